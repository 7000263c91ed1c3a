"""Certificates replaced on disk while a Coordinator runs (real gRPC and HTTPS on 127.0.0.1): the
next handshakes use the new files, without a restart, and /metrics says when each expires."""

from __future__ import annotations

import shutil
import ssl
from pathlib import Path

import aiohttp
import grpc
import pytest

from gen.motor.v1 import coordinator_pb2, coordinator_pb2_grpc
from motor.common.config.tls import ClientTlsConfig
from motor.common.grpc_server import open_channel
from motor.common.ports import free_ports
from motor.common.pki import DevPki, create_dev_pki
from motor.common.security import Role
from motor.controller.clients import CoordinatorClient
from motor.coordinator.config import CoordinatorConfig
from motor.coordinator.main import CoordinatorService

pytestmark = pytest.mark.timeout(60)
HOSTS = ["localhost", "127.0.0.1"]


def install(pki: DevPki, live: Path) -> None:
    """What a rotated Secret does: the same paths, new contents."""
    for src, name in ((pki.ca_file, "ca.crt"), (pki.cert_file(Role.COORDINATOR), "coordinator.crt"),
                      (pki.key_file(Role.COORDINATOR), "coordinator.key")):
        tmp = live / (name + ".new")
        shutil.copyfile(src, tmp)
        tmp.replace(live / name)


async def list_as_operator(service: CoordinatorService, pki: DevPki) -> coordinator_pb2.ListInstancesResponse:
    tls = ClientTlsConfig(ca_file=pki.ca_file, cert_file=pki.cert_file(Role.OPERATOR),
                          key_file=pki.key_file(Role.OPERATOR))
    async with open_channel(f"127.0.0.1:{service.grpc_port}", tls) as channel:
        return await coordinator_pb2_grpc.CoordinatorStub(channel).ListInstances(
            coordinator_pb2.ListInstancesRequest(), timeout=5)


async def metrics_as_operator(service: CoordinatorService, pki: DevPki) -> str:
    ctx = ssl.create_default_context(cafile=str(pki.ca_file))
    ctx.load_cert_chain(pki.cert_file(Role.OPERATOR), pki.key_file(Role.OPERATOR))
    async with aiohttp.ClientSession() as http:
        async with http.get(f"https://127.0.0.1:{service.http_port}/metrics", ssl=ctx) as r:
            assert r.status == 200
            return await r.text()


def expiry_sec(page: str, file: Path) -> float:
    prefix = f'motor_certificate_expiry_seconds{{file="{file}"}} '
    lines = [line for line in page.splitlines() if line.startswith(prefix)]
    assert lines, page[:2000]
    return float(lines[0][len(prefix):])


async def test_rotated_certificates_are_served_without_a_restart(tmp_path: Path) -> None:
    old = create_dev_pki(tmp_path / "old", HOSTS, days=30)
    new = create_dev_pki(tmp_path / "new", HOSTS, days=90, ca_name="rotated CA")
    live = tmp_path / "live"
    live.mkdir()
    install(old, live)
    service = CoordinatorService(CoordinatorConfig.model_validate({
        "server": {"host": "127.0.0.1", "port": 0, "shutdown_grace_sec": 0.5},
        "http": {"host": "127.0.0.1", "port": 0},
        "security": {"ca_file": str(live / "ca.crt"), "cert_file": str(live / "coordinator.crt"),
                     "key_file": str(live / "coordinator.key")}}))
    await service.start()
    try:
        await list_as_operator(service, old)
        page = await metrics_as_operator(service, old)
        assert 29 * 86400 < expiry_sec(page, live / "coordinator.crt") <= 30 * 86400
        install(new, live)
        # gRPC checks the files on each handshake: the next channel meets the new certificate and CA.
        await list_as_operator(service, new)
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await list_as_operator(service, old)
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
        # The HTTPS front's poll (run here at once rather than waited for).
        (reloader,) = service._reloaders
        assert reloader.check() and reloader.reloads == 1
        page = await metrics_as_operator(service, new)
        assert 89 * 86400 < expiry_sec(page, live / "coordinator.crt") <= 90 * 86400
        # A half-written set is refused; the last good one stays.
        (live / "coordinator.key").write_text("not a key")
        assert not reloader.check()
        await list_as_operator(service, new)
    finally:
        await service.stop()


def _install_role(pki: DevPki, role: Role, live: Path) -> None:
    for src, name in ((pki.ca_file, "ca.crt"), (pki.cert_file(role), "tls.crt"), (pki.key_file(role), "tls.key")):
        tmp = live / (name + ".new")
        shutil.copyfile(src, tmp)
        tmp.replace(live / name)


def _coordinator(live: Path, port: int) -> CoordinatorService:
    return CoordinatorService(CoordinatorConfig.model_validate({
        "server": {"host": "127.0.0.1", "port": port, "shutdown_grace_sec": 0.5},
        "http": {"host": "127.0.0.1", "port": 0},
        "security": {"ca_file": str(live / "ca.crt"), "cert_file": str(live / "tls.crt"),
                     "key_file": str(live / "tls.key")}}))


async def test_the_controllers_coordinator_client_follows_rotated_files(tmp_path: Path) -> None:
    """The Controller's Coordinator client keeps one channel; once its files rotate (and the
    Coordinator's, to a new CA), its next call opens a channel with the new files, where the old
    one could never again complete a handshake with the Coordinator."""
    old = create_dev_pki(tmp_path / "old", HOSTS)
    new = create_dev_pki(tmp_path / "new", HOSTS, ca_name="rotated CA")
    server_live, client_live = tmp_path / "coordinator", tmp_path / "controller"
    for live, role in ((server_live, Role.COORDINATOR), (client_live, Role.CONTROLLER)):
        live.mkdir()
        _install_role(old, role, live)
    client = CoordinatorClient(f"127.0.0.1:{(port := free_ports(1)[0])}", ClientTlsConfig(
        ca_file=client_live / "ca.crt", cert_file=client_live / "tls.crt", key_file=client_live / "tls.key"), 5.0)
    service = _coordinator(server_live, port)
    await service.start()
    try:
        assert (await client.list_instances()).revision == 0
        await service.stop()
        # Both Secrets rotate to the new CA; the Coordinator comes back on the same address.
        _install_role(new, Role.COORDINATOR, server_live)
        _install_role(new, Role.CONTROLLER, client_live)
        service = _coordinator(server_live, port)
        await service.start()
        assert (await client.list_instances()).revision == 0
    finally:
        await client.close()
        await service.stop()
