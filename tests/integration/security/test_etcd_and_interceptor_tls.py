"""TLS towards etcd (a real etcd with --client-cert-auth, the runtime store's TLS client) and the
shared authorization interceptor in process: streaming methods, certificates without a role, the
refusal counter and hook."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from gen.motor.v1 import controller_pb2, controller_pb2_grpc
from motor.common import authz
from motor.common.config.tls import ClientTlsConfig
from motor.common.grpc_server import open_channel
from motor.common.pki import ETCD, DevPki, create_dev_pki
from motor.common.security import Role
from motor.controller.config import StoreConfig
from motor.controller.persistence import EtcdRuntimeStore, PersistedInstance, StoreError
from motor.launch.etcd import EtcdTls, astart_etcd

from .mtls_controller import mtls_controller

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def pki(tmp_path: Path) -> DevPki:
    return create_dev_pki(tmp_path / "pki")


def _tls(pki: DevPki, role: Role | str | None) -> ClientTlsConfig:
    if role is None:
        return ClientTlsConfig(ca_file=pki.ca_file)
    return ClientTlsConfig(ca_file=pki.ca_file, cert_file=pki.cert_file(role), key_file=pki.key_file(role))


RECORD = PersistedInstance(instance_id=1, phase="NORMAL", generation=1, original_dp_ranks=(0, 1), dead_committed=(),
                           fallback_strategy="instance_reconfiguration", topology=b"t")


async def test_runtime_store_over_tls_etcd_needs_a_client_certificate(pki: DevPki, tmp_path: Path) -> None:
    tls = EtcdTls(pki.ca_file, pki.cert_file(ETCD), pki.key_file(ETCD), pki.cert_file(Role.CONTROLLER),
                  pki.key_file(Role.CONTROLLER))
    server = await astart_etcd(tmp_path / "etcd", tls=tls)
    try:
        assert server.client_url.startswith("https://")
        config = StoreConfig(etcd_endpoints=[server.endpoint], key_prefix="/tls-test", request_timeout_sec=3.0)
        store = EtcdRuntimeStore.from_config(config, _tls(pki, Role.CONTROLLER))
        try:
            await store.put(RECORD, None)
            assert [r.instance_id for r in await store.load_all()] == [1]
            assert "over TLS" in store.description
        finally:
            await store.close()
        for client in (None, _tls(pki, None)):  # plaintext; TLS without a client certificate
            refused = EtcdRuntimeStore.from_config(config, client)
            try:
                with pytest.raises(StoreError, match="no etcd endpoint reachable|failed|timed out"):
                    await refused.load_all()
            finally:
                await refused.close()
    finally:
        await server.astop()


@pytest.fixture
async def controller(pki: DevPki) -> AsyncIterator[str]:
    async with mtls_controller(pki) as (_, info):
        yield f"127.0.0.1:{info['grpc_port']}"


async def test_streaming_method_is_authorized_and_refusals_are_counted_and_hooked(pki: DevPki, controller: str) -> None:
    seen: list[tuple[str, str, str]] = []

    def hook(*event: str) -> None:
        seen.append(event)

    authz.add_refusal_hook(hook)
    try:
        await _watch_by_role(pki, controller, seen)
    finally:
        authz.remove_refusal_hook(hook)


async def _watch_by_role(pki: DevPki, controller: str, seen: list[tuple[str, str, str]]) -> None:
    method = "/motor.v1.Controller/WatchFaultToleranceStatus"
    before = authz.refusal_counts().get(("grpc", method, "nodemanager"), 0)
    request = controller_pb2.WatchFaultToleranceStatusRequest()
    async with open_channel(controller, _tls(pki, Role.NODEMANAGER)) as channel:
        stream = controller_pb2_grpc.ControllerStub(channel).WatchFaultToleranceStatus(request, timeout=5)
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stream.read()
    assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert info.value.details() == f"{method} is not allowed for role nodemanager (allowed: controller, monitor, operator)"
    assert authz.refusal_counts()[("grpc", method, "nodemanager")] == before + 1
    assert ("grpc", method, "nodemanager") in seen
    # The operator is let in: the stream is open and has nothing to say yet (no instance).
    async with open_channel(controller, _tls(pki, Role.OPERATOR)) as channel:
        stream = controller_pb2_grpc.ControllerStub(channel).WatchFaultToleranceStatus(request, timeout=1)
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stream.read()
    assert info.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED


async def test_a_certificate_of_the_ca_without_a_role_gets_nothing_protected(pki: DevPki, controller: str) -> None:
    async with open_channel(controller, _tls(pki, ETCD)) as channel:  # etcd's certificate: no role URI
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await controller_pb2_grpc.ControllerStub(channel).GetFaultToleranceStatus(
                controller_pb2.GetFaultToleranceStatusRequest(), timeout=5)
    assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "for role none" in info.value.details()
    async with open_channel(controller, _tls(pki, Role.OPERATOR)) as channel:
        resp = await controller_pb2_grpc.ControllerStub(channel).GetFaultToleranceStatus(
            controller_pb2.GetFaultToleranceStatusRequest(), timeout=5)
    assert list(resp.instances) == []
