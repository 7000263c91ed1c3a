"""The Coordinator's one engine session serves every client: a cookie one engine answer set must
not reach the engine again on another client's request."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from motor.coordinator.engine_client import EngineClient
from motor.coordinator.routing import Route


@pytest.fixture
async def engine() -> AsyncIterator[tuple[int, list[str | None]]]:
    """An engine stand-in on 127.0.0.1 that sets a cookie on every answer and keeps each request's
    Cookie header."""
    seen: list[str | None] = []

    async def complete(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Cookie"))
        resp = web.json_response({"choices": [{"text": "ok"}]})
        resp.set_cookie("affinity", f"client-{len(seen)}")
        return resp

    app = web.Application()
    app.router.add_post("/v1/completions", complete)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield site._server.sockets[0].getsockname()[1], seen  # type: ignore[union-attr]
    finally:
        await runner.cleanup()


async def test_a_cookie_an_engine_set_is_not_sent_on_later_requests(engine: tuple[int, list[str | None]]) -> None:
    port, seen = engine
    client = EngineClient(connect_timeout_sec=5, total_timeout_sec=10)
    await client.start()
    try:
        # By name, as an instance's inference endpoint may be given: aiohttp's jar keeps no cookie
        # of an IP address, but does of a host name.
        route = Route(instance_id=1, rank=0, ip="localhost", port=port, model="m", pinned_rank=0)
        for user in ("alice", "bob"):
            async with client.post(route, "/v1/completions", b'{"prompt": "%s"}' % user.encode(),
                                   {"Content-Type": "application/json"}) as resp:
                assert resp.status == 200
                assert resp.cookies["affinity"].value.startswith("client-")  # the answer still carries it
                await resp.read()
    finally:
        await client.close()
    assert seen == [None, None]
