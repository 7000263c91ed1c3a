"""A pod stays bound to the pod URI that registered it first across a Controller restart: a real
mTLS Controller persisting to a real TLS etcd binds pods A and B, is stopped, and a new Controller
over the same etcd refuses B's registration and heartbeat from another identity's certificate
(one that covers B's IP), and takes B's own."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from gen.motor.v1 import controller_pb2, controller_pb2_grpc
from motor.common.grpc_server import open_channel
from motor.common.pki import ETCD, DevPki, create_dev_pki
from motor.common.security import Role
from motor.controller.config import ControllerConfig
from motor.controller.main import ControllerService
from motor.launch.etcd import EtcdServer, EtcdTls, astart_etcd
from motor.testing.waits import async_wait_for

from ..nodemanager.nm_helpers import rpc_error
from .test_identity_attacks import A_ADDRESS, A_IP, B_ADDRESS, B_IP, INSTANCE, _tls, register_request

pytestmark = [pytest.mark.timeout(90), pytest.mark.etcd]


@pytest.fixture
def pki(tmp_path: Path) -> DevPki:
    return create_dev_pki(tmp_path / "pki", ["localhost", "127.0.0.1"],
                          pods=[("a", A_IP), ("b", B_IP), ("b-twin", B_IP)])


@pytest.fixture
async def etcd(pki: DevPki, tmp_path: Path) -> AsyncIterator[EtcdServer]:
    tls = EtcdTls(pki.ca_file, pki.cert_file(ETCD), pki.key_file(ETCD), pki.cert_file(Role.CONTROLLER),
                  pki.key_file(Role.CONTROLLER))
    server = await astart_etcd(tmp_path / "etcd", tls=tls)
    try:
        yield server
    finally:
        await server.astop()


def _controller(pki: DevPki, etcd: EtcdServer, replica_id: str) -> ControllerService:
    return ControllerService(ControllerConfig.model_validate({
        "server": {"host": "127.0.0.1", "port": 0, "shutdown_grace_sec": 0.5},
        "status_http": {"host": "127.0.0.1", "port": 0},
        "hardware_monitor": {"kubernetes": "off"},
        "security": pki.security(Role.CONTROLLER),
        "store": {"etcd_endpoints": [etcd.endpoint], "request_timeout_sec": 3.0},
        "leader_election": {"mode": "on", "lease_ttl_sec": 2, "replica_id": replica_id},
    }))


async def _started(service: ControllerService) -> str:
    info: dict[str, Any] = await service.start()
    await async_wait_for(lambda: service.core is not None and service.core.acting, 20,
                         "the Controller acts as leader")
    return f"127.0.0.1:{info['grpc_port']}"


async def _call(pki: DevPki, address: str, name: str, call: str, request):  # noqa: ANN001, ANN202
    async with open_channel(address, _tls(pki, name)) as channel:
        return await getattr(controller_pb2_grpc.ControllerStub(channel), call)(request, timeout=5)


async def test_a_restarted_controller_keeps_refusing_another_identity(pki: DevPki, etcd: EtcdServer) -> None:
    first = _controller(pki, etcd, "c-0")
    address = await _started(first)
    try:
        for name, ip, rank, nm_address in (("a", A_IP, 0, A_ADDRESS), ("b", B_IP, 1, B_ADDRESS)):
            assert (await _call(pki, address, f"nodemanager-{name}", "Register",
                                register_request(ip, rank, nm_address))).accepted
    finally:
        await first.stop()

    second = _controller(pki, etcd, "c-1")
    address = await _started(second)
    try:
        assert second.core is not None and second.core.registry.get(INSTANCE) is not None  # restored
        err = await rpc_error(_call(pki, address, "nodemanager-b-twin", "Register",
                                    register_request(B_IP, 1, B_ADDRESS)))
        assert err.code() == grpc.StatusCode.PERMISSION_DENIED, err.details()
        assert "spiffe://motor/ns/motor/pod/b" in err.details()
        err = await rpc_error(_call(pki, address, "nodemanager-b-twin", "Heartbeat",
                                    controller_pb2.HeartbeatRequest(pod_ip=B_IP, instance_id=INSTANCE,
                                                                    alive_endpoint_ids=[1])))
        assert err.code() == grpc.StatusCode.PERMISSION_DENIED
        assert second.core.metrics.registry.get_sample_value(
            "motor_controller_identity_refusals_total", {"method": "Register", "reason": "other_identity"}) == 1
        assert (await _call(pki, address, "nodemanager-b", "Register", register_request(B_IP, 1, B_ADDRESS))).accepted
    finally:
        await second.stop()
