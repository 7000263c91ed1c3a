"""Several software fault reports of one pod in one ReportSoftwareFaults call, against a real
Controller on port 0: taken in order as that many ReportSoftwareFault calls; an invalid report is
refused alone; a call mixing pods, carrying none or too many, or of an unknown instance is refused
whole, naming the value; and the NodeManager's FaultReporter sends the reports that wait together in
one call."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc
import pytest

from gen.motor.v1 import common_pb2, controller_pb2, controller_pb2_grpc
from motor.common.grpc_server import open_channel
from motor.controller.config import ControllerConfig
from motor.controller.main import ControllerService
from motor.testing.waits import async_wait_for
from nodemanager.controller_client import ControllerClient
from nodemanager.ft_poller import DEAD, UNHEALTHY, FaultReport
from nodemanager.reporter import FaultReporter

from ..nodemanager.nm_helpers import rpc_error

pytestmark = pytest.mark.timeout(60)

POD_IP = "127.0.0.2"
INSTANCE = 3
RANKS = (0, 1, 2, 3)


@pytest.fixture
async def controller() -> AsyncIterator[tuple[ControllerService, controller_pb2_grpc.ControllerStub, str]]:
    service = ControllerService(ControllerConfig.model_validate({
        "server": {"host": "127.0.0.1", "port": 0, "shutdown_grace_sec": 0.5},
        "status_http": {"host": "127.0.0.1", "port": 0},
        "hardware_monitor": {"kubernetes": "off"},
    }))
    info = await service.start()
    address = f"127.0.0.1:{info['grpc_port']}"
    try:
        async with open_channel(address) as channel:
            stub = controller_pb2_grpc.ControllerStub(channel)
            resp = await stub.Register(controller_pb2.RegisterRequest(
                pod=common_pb2.Pod(pod_ip=POD_IP, node_name="node-1", node_manager_address=f"{POD_IP}:50061",
                                   endpoint_ids=list(RANKS)),
                instance_id=INSTANCE, role=common_pb2.ROLE_UNION, model="motor-sim", dp_size=len(RANKS),
                endpoints=[common_pb2.Endpoint(id=r, ip=POD_IP, business_port=18000 + r) for r in RANKS]), timeout=5)
            assert resp.accepted, resp.message
            yield service, stub, address
    finally:
        await service.stop()


def _report(rank: int, kind: int = UNHEALTHY, pod_ip: str = POD_IP,
            instance_id: int = INSTANCE) -> controller_pb2.ReportSoftwareFaultRequest:
    return controller_pb2.ReportSoftwareFaultRequest(pod_ip=pod_ip, instance_id=instance_id, endpoint_id=rank,
                                                     kind=kind, evidence=f"rank {rank}")  # type: ignore[arg-type]


def _taken(service: ControllerService, kind: str) -> float:
    assert service.core is not None
    return service.core.metrics.registry.get_sample_value("motor_fault_reports_total", {"kind": kind}) or 0.0


async def test_reports_are_taken_in_order_and_an_invalid_one_is_refused_alone(controller) -> None:
    service, stub, _ = controller
    answer = await stub.ReportSoftwareFaults(controller_pb2.ReportSoftwareFaultsRequest(
        reports=[_report(1), _report(2, kind=99), _report(3, kind=DEAD)]), timeout=5)
    assert [(r.accepted, r.refused) for r in answer.results] == [(True, False), (False, True), (True, False)]
    assert "kind 99 is not a software fault kind" in answer.results[1].message
    assert (_taken(service, "UNHEALTHY"), _taken(service, "DEAD")) == (1, 1)


@pytest.mark.parametrize(("reports", "named"), [
    ([_report(0), _report(1, pod_ip="127.0.0.9")], "reports[1] is of instance 3 pod '127.0.0.9'"),
    ([_report(0), _report(1, instance_id=4)], "reports[1] is of instance 4"),
    ([], "a call carries at least one report"),
    ([_report(r % 4) for r in range(65)], "reports: 65 entries exceed the limit of 64"),
], ids=["two pods", "two instances", "none", "65"])
async def test_a_call_that_is_not_one_pods_bounded_reports_is_refused_whole(controller, reports, named) -> None:
    service, stub, _ = controller
    err = await rpc_error(stub.ReportSoftwareFaults(controller_pb2.ReportSoftwareFaultsRequest(reports=reports),
                                                    timeout=5))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and named in err.details()
    assert _taken(service, "UNHEALTHY") == 0


async def test_reports_of_an_unknown_instance_are_not_found(controller) -> None:
    service, stub, _ = controller
    err = await rpc_error(stub.ReportSoftwareFaults(controller_pb2.ReportSoftwareFaultsRequest(
        reports=[_report(0, instance_id=9), _report(1, instance_id=9)]), timeout=5))
    assert err.code() == grpc.StatusCode.NOT_FOUND and "unknown instance_id 9" in err.details()


async def test_the_reporter_sends_the_reports_that_wait_together_in_one_call(controller) -> None:
    service, _, address = controller
    client = ControllerClient(address, timeout_sec=5.0)
    registered = asyncio.Event()
    registered.set()
    reporter = FaultReporter(client, pod_ip=POD_IP, instance_id=INSTANCE, queue_size=8, attempts=3,
                             is_retired=lambda rank: False, registered=registered)
    for rank in (1, 2, 3):
        reporter.submit(FaultReport(rank, DEAD, f"rank {rank} died"))
    reporter.start()
    try:
        await async_wait_for(lambda: reporter.sent == 3, 10.0, "three reports delivered")
    finally:
        await reporter.close()
        await client.close()
    assert service.core is not None
    calls = {method: service.core.metrics.registry.get_sample_value(
        "motor_grpc_server_calls_total", {"method": method}) or 0.0
        for method in ("ReportSoftwareFault", "ReportSoftwareFaults")}
    assert calls == {"ReportSoftwareFault": 0, "ReportSoftwareFaults": 1}
    assert _taken(service, "DEAD") == 3
