"""Attacks on the Coordinator's HTTP front over real HTTP, against a small in-process engine on
127.0.0.5: the admin pages without a role certificate, a flood beyond the concurrency limit, an
engine answer beyond its bound, inference without an API key, and a body nested too deeply."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import grpc
import pytest
from aiohttp import web

from gen.motor.v1 import common_pb2, coordinator_pb2, coordinator_pb2_grpc
from motor.common.grpc_server import open_channel
from motor.common.pki import create_dev_pki
from motor.common.security import Role
from motor.coordinator.config import CoordinatorConfig
from motor.coordinator.main import CoordinatorService
from motor.testing.waits import async_wait_for

pytestmark = pytest.mark.timeout(60)
ENGINE_IP = "127.0.0.5"
MODEL = "tiny"


class TinyEngine:
    """Answers /v1/completions: held until released (`hold`), `size` bytes long, chunked or not; records
    the Authorization header it received."""

    def __init__(self) -> None:
        self.hold = False
        self.release = asyncio.Event()
        self.size = 16
        self.chunked = False
        self.authorizations: list[str | None] = []
        self.waiting = 0

    async def completions(self, request: web.Request) -> web.StreamResponse:
        self.authorizations.append(request.headers.get("Authorization"))
        if self.hold:
            self.waiting += 1
            await self.release.wait()
        body = b'{"x": "' + b"a" * self.size + b'"}'
        if not self.chunked:
            return web.Response(body=body, content_type="application/json")
        out = web.StreamResponse(headers={"Content-Type": "application/json"})
        out.enable_chunked_encoding()
        await out.prepare(request)
        for i in range(0, len(body), 4096):
            await out.write(body[i:i + 4096])
        await out.write_eof()
        return out


@pytest.fixture
async def engine() -> AsyncIterator[tuple[TinyEngine, int]]:
    fake = TinyEngine()
    app = web.Application()
    app.router.add_post("/v1/completions", fake.completions)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, ENGINE_IP, 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield fake, port
    finally:
        fake.release.set()
        await runner.cleanup()


async def started(tmp_path: Path, engine_port: int | None, **overrides) -> CoordinatorService:
    service = CoordinatorService(CoordinatorConfig.model_validate({
        "server": {"host": "127.0.0.1", "port": 0, "shutdown_grace_sec": 0.5},
        "http": {"host": "127.0.0.1", "port": 0}, "hold_when_unavailable_sec": 0.0, **overrides}))
    await service.start()
    if engine_port is not None:
        view = common_pb2.Instance(id=1, model=MODEL, dp_size=1)
        view.endpoints.add(id=0, ip=ENGINE_IP, business_port=engine_port)
        async with open_channel(f"127.0.0.1:{service.grpc_port}") as channel:
            await coordinator_pb2_grpc.CoordinatorStub(channel).Refresh(coordinator_pb2.RefreshRequest(
                event=coordinator_pb2.REFRESH_EVENT_SET, instances=[view], revision=1), timeout=5)
    return service


def url(service: CoordinatorService, path: str, scheme: str = "http") -> str:
    return f"{scheme}://127.0.0.1:{service.http_port}{path}"


BODY = {"model": MODEL, "prompt": "hi", "max_tokens": 1}


async def test_admin_pages_need_a_role_certificate_when_security_is_on(tmp_path: Path) -> None:
    pki = create_dev_pki(tmp_path / "pki", ["localhost", "127.0.0.1"])
    service = await started(tmp_path, None, security=pki.security(Role.COORDINATOR))
    try:
        anonymous = ssl.create_default_context(cafile=str(pki.ca_file))
        operator = ssl.create_default_context(cafile=str(pki.ca_file))
        operator.load_cert_chain(pki.cert_file(Role.OPERATOR), pki.key_file(Role.OPERATOR))
        nodemanager = ssl.create_default_context(cafile=str(pki.ca_file))
        nodemanager.load_cert_chain(pki.cert_file(Role.NODEMANAGER), pki.key_file(Role.NODEMANAGER))
        async with aiohttp.ClientSession() as http:
            for path in ("/metrics", "/coordinator/instances"):
                for ctx in (anonymous, nodemanager):
                    async with http.get(url(service, path, "https"), ssl=ctx) as r:
                        assert r.status == 403, (path, r.status)
                        assert "is not allowed for role" in (await r.json())["detail"]
                async with http.get(url(service, path, "https"), ssl=operator) as r:
                    assert r.status == 200, path
            async with http.get(url(service, "/v1/models", "https"), ssl=anonymous) as r:
                assert r.status == 200  # inference stays open to clients without a certificate
    finally:
        await service.stop()


async def test_requests_beyond_the_concurrency_limit_get_429_with_retry_after(
        tmp_path: Path, engine: tuple[TinyEngine, int]) -> None:
    fake, port = engine
    fake.hold = True
    service = await started(tmp_path, port, max_concurrent_requests=2, retry_after_sec=3)
    try:
        async with aiohttp.ClientSession() as http:
            held = [asyncio.ensure_future(http.post(url(service, "/v1/completions"), json=BODY)) for _ in range(2)]
            await async_wait_for(lambda: fake.waiting, 10, "two requests at the engine", interval_sec=0.01,
                                 until=lambda n: n == 2)
            async with http.post(url(service, "/v1/completions"), json=BODY) as r:
                assert r.status == 429 and r.headers["Retry-After"] == "3"
                assert (await r.json())["error"]["code"] == "too_many_requests"
            fake.release.set()
            for answer in await asyncio.gather(*held):
                assert answer.status == 200
                answer.release()
            async with http.post(url(service, "/v1/completions"), json=BODY) as r:
                assert r.status == 200  # the slots came back
    finally:
        await service.stop()
    assert service.metrics.admission_refusals.labels("concurrency")._value.get() == 1


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
async def test_an_engine_answer_beyond_its_bound_is_502(tmp_path: Path, engine: tuple[TinyEngine, int],
                                                       chunked: bool) -> None:
    fake, port = engine
    fake.size, fake.chunked = 200_000, chunked
    service = await started(tmp_path, port, max_engine_answer_bytes=65536)
    try:
        async with aiohttp.ClientSession() as http:
            async with http.post(url(service, "/v1/completions"), json=BODY) as r:
                assert r.status == 502
                message = (await r.json())["error"]["message"]
                assert "max_engine_answer_bytes 65536" in message, message
            fake.size = 1000
            async with http.post(url(service, "/v1/completions"), json=BODY) as r:
                assert r.status == 200 and len(await r.read()) == 1000 + 9
    finally:
        await service.stop()


async def test_inference_needs_an_api_key_from_the_file_and_the_key_is_not_passed_on(
        tmp_path: Path, engine: tuple[TinyEngine, int]) -> None:
    fake, port = engine
    keys = tmp_path / "api-keys"
    keys.write_text("# inference clients\nkey-one\n")
    service = await started(tmp_path, port, api_key_file=str(keys))
    try:
        async with aiohttp.ClientSession() as http:
            for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "key-one"}):
                async with http.post(url(service, "/v1/completions"), json=BODY, headers=headers) as r:
                    assert r.status == 401 and r.headers["WWW-Authenticate"] == "Bearer", headers
            async with http.get(url(service, "/v1/models")) as r:
                assert r.status == 401
            good = {"Authorization": "Bearer key-one"}
            async with http.post(url(service, "/v1/completions"), json=BODY, headers=good) as r:
                assert r.status == 200
            assert fake.authorizations == [None]
            keys.write_text("key-two\n")  # key-one revoked without a restart
            async with http.post(url(service, "/v1/completions"), json=BODY, headers=good) as r:
                assert r.status == 401
            async with http.post(url(service, "/v1/completions"), json=BODY,
                                 headers={"Authorization": "Bearer key-two"}) as r:
                assert r.status == 200
    finally:
        await service.stop()


async def test_a_body_nested_too_deeply_is_a_400(tmp_path: Path, engine: tuple[TinyEngine, int]) -> None:
    _fake, port = engine
    service = await started(tmp_path, port)
    try:
        async with aiohttp.ClientSession() as http:
            deep = b'{"model": "tiny", "prompt": ' + b"[" * 200_000 + b"]" * 200_000 + b"}"
            async with http.post(url(service, "/v1/completions"), data=deep,
                                 headers={"Content-Type": "application/json"}) as r:
                assert r.status == 400
                assert "nested too deeply" in (await r.json())["error"]["message"]
    finally:
        await service.stop()


async def test_a_management_key_file_guards_refresh(tmp_path: Path) -> None:
    key = tmp_path / "management-key"
    key.write_text("s3cret\n")
    service = await started(tmp_path, None, management_key_file=str(key))
    try:
        async with open_channel(f"127.0.0.1:{service.grpc_port}") as channel:
            stub = coordinator_pb2_grpc.CoordinatorStub(channel)
            request = coordinator_pb2.RefreshRequest(event=coordinator_pb2.REFRESH_EVENT_SET, revision=1)
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await stub.Refresh(request, timeout=5)
            assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
            await stub.Refresh(request, timeout=5, metadata=(("x-motor-key", "s3cret"),))
    finally:
        await service.stop()
