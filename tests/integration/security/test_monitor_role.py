"""The monitor role against a real Controller over mTLS (port 0): Prometheus's credential reads
metrics, status, timelines and the status watch, and every mutation an operator may call is refused
to it: a hardware fault for a whole node (empty npu_name: every card) and a publication request."""

from __future__ import annotations

import asyncio
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from gen.motor.v1 import controller_pb2, controller_pb2_grpc
from motor.common.config.tls import ClientTlsConfig
from motor.common.grpc_server import open_channel
from motor.common.pki import DevPki, create_dev_pki
from motor.common.security import Role, http_client_context

from .mtls_controller import mtls_controller

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def pki(tmp_path: Path) -> DevPki:
    return create_dev_pki(tmp_path / "pki")


@pytest.fixture
async def controller(pki: DevPki) -> AsyncIterator[tuple[str, int]]:
    async with mtls_controller(pki) as (_, info):
        yield f"127.0.0.1:{info['grpc_port']}", info["http_port"]


def _tls(pki: DevPki, role: Role) -> ClientTlsConfig:
    return ClientTlsConfig(ca_file=pki.ca_file, cert_file=pki.cert_file(role), key_file=pki.key_file(role))


def _get(url: str, pki: DevPki, role: Role) -> tuple[int, str]:
    context = http_client_context(pki.ca_file, pki.cert_file(role), pki.key_file(role))
    try:
        with urllib.request.urlopen(url, context=context, timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def _whole_node_fault(level: int) -> controller_pb2.ReportHardwareFaultRequest:
    # An empty npu_name means every card of the node.
    return controller_pb2.ReportHardwareFaultRequest(node_name="node-a", npu_name="", fault_code="80E01801",
                                                     level=level)


async def test_the_monitor_reads_and_is_refused_every_mutation(pki: DevPki, controller: tuple[str, int]) -> None:
    address, http_port = controller
    async with open_channel(address, _tls(pki, Role.MONITOR)) as channel:
        stub = controller_pb2_grpc.ControllerStub(channel)
        status = await stub.GetFaultToleranceStatus(controller_pb2.GetFaultToleranceStatusRequest(), timeout=5)
        assert list(status.instances) == []
        with pytest.raises(grpc.aio.AioRpcError) as watched:
            await stub.WatchFaultToleranceStatus(controller_pb2.WatchFaultToleranceStatusRequest(), timeout=1).read()
        assert watched.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED  # let in; nothing to say yet
        for call, request in ((stub.ReportHardwareFault, _whole_node_fault(controller_pb2.FAULT_LEVEL_L6)),
                              (stub.RequestPublication, controller_pb2.RequestPublicationRequest())):
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await call(request, timeout=5)
            assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
            assert "is not allowed for role monitor" in refused.value.details()
    # The operator still reports the same fault (the mutation is the operator's, not gone).
    async with open_channel(address, _tls(pki, Role.OPERATOR)) as channel:
        await controller_pb2_grpc.ControllerStub(channel).ReportHardwareFault(
            _whole_node_fault(controller_pb2.FAULT_LEVEL_L1), timeout=5)
    for path in ("/metrics", "/controller/fault_tolerance/status"):
        status_code, body = await asyncio.to_thread(_get, f"https://127.0.0.1:{http_port}{path}", pki, Role.MONITOR)
        assert status_code == 200, (path, body)
    status_code, body = await asyncio.to_thread(_get, f"https://127.0.0.1:{http_port}/metrics", pki, Role.NODEMANAGER)
    assert status_code == 403 and "role nodemanager" in body
