"""etcd with RBAC as the launcher starts it (motor.launch.etcd_rbac): a real TLS etcd with auth on, a
user for the Controller's certificate CN and a role on `/motor/`. The Controller elects itself and
persists there; the NodeManager's and the Coordinator's certificates (same CA) can neither read nor
write a key, the leader key included; the Controller's own user stays inside `/motor/`."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import aetcd
import grpc
import pytest

from motor.common.config.tls import ClientTlsConfig
from motor.common.pki import ETCD, DevPki, create_dev_pki
from motor.common.security import Role
from motor.controller.config import ControllerConfig
from motor.controller.main import ControllerService
from motor.controller.persistence.etcd_connection import TlsEtcdClient
from motor.launch.etcd import EtcdServer, EtcdTls, astart_etcd
from motor.launch.etcd_rbac import CONTROLLER_ROLE, common_name, enable_rbac, prefix_range_end
from motor.testing.waits import async_wait_for

pytestmark = [pytest.mark.timeout(90), pytest.mark.etcd]

LEADER_KEY = b"/motor/v1/leader"


@pytest.fixture
def pki(tmp_path: Path) -> DevPki:
    return create_dev_pki(tmp_path / "pki")


@pytest.fixture
async def etcd(pki: DevPki, tmp_path: Path) -> AsyncIterator[EtcdServer]:
    tls = EtcdTls(pki.ca_file, pki.cert_file(ETCD), pki.key_file(ETCD), pki.cert_file(Role.CONTROLLER),
                  pki.key_file(Role.CONTROLLER))
    server = await astart_etcd(tmp_path / "etcd", tls=tls)
    try:
        assert enable_rbac(server, pki.cert_file(Role.CONTROLLER)) == common_name(pki.cert_file(Role.CONTROLLER))
        yield server
    finally:
        await server.astop()


def _client(server: EtcdServer, pki: DevPki, role: Role) -> TlsEtcdClient:
    tls = ClientTlsConfig(ca_file=pki.ca_file, cert_file=pki.cert_file(role), key_file=pki.key_file(role))
    return TlsEtcdClient(host=server.host, port=server.client_port, timeout=5, tls=tls)  # type: ignore[arg-type]


async def _refused(op) -> str:
    with pytest.raises((aetcd.ClientError, grpc.RpcError)) as info:
        await op
    return str(info.value)


def test_the_range_end_covers_the_prefix_only() -> None:
    assert prefix_range_end("/motor/") == b"/motor0"


async def test_only_the_controller_certificate_reaches_motor_keys(pki: DevPki, etcd: EtcdServer) -> None:
    controller = ControllerService(ControllerConfig.model_validate({
        "server": {"host": "127.0.0.1", "port": 0, "shutdown_grace_sec": 0.5},
        "status_http": {"host": "127.0.0.1", "port": 0},
        "hardware_monitor": {"kubernetes": "off"},
        "security": pki.security(Role.CONTROLLER),
        "store": {"etcd_endpoints": [etcd.endpoint], "request_timeout_sec": 3.0},
        "leader_election": {"mode": "on", "lease_ttl_sec": 2, "replica_id": "c-0"},
    }))
    await controller.start()
    try:
        own = _client(etcd, pki, Role.CONTROLLER)
        try:
            # Elected under RBAC: the lease, the transaction and the leader key all went through.
            await async_wait_for(lambda: own.get(LEADER_KEY), 10, "the Controller's leader key",
                                 until=lambda got: got is not None and b"c-0" in got.value)
            for role in (Role.NODEMANAGER, Role.COORDINATOR):
                other = _client(etcd, pki, role)
                try:
                    assert "permission denied" in await _refused(other.get(LEADER_KEY))
                    assert "permission denied" in await _refused(other.put(LEADER_KEY, b"mine"))
                    assert "permission denied" in await _refused(other.delete(LEADER_KEY))
                finally:
                    await other.close()
            got = await own.get(LEADER_KEY)
            assert got is not None and b"c-0" in got.value  # untouched
            # The Controller's role is Motor's prefix, not etcd root.
            assert "permission denied" in await _refused(own.put(b"/other/key", b"x"))
            assert CONTROLLER_ROLE == "motor-controller"
        finally:
            await own.close()
    finally:
        await controller.stop()
