"""The NodeManager's metrics where they are observed (poller, reporter, FT proxy, agent), with doubles
of the engines and the Controller and a fake clock; and the exposition they make (no sockets)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gen.motor.v1 import controller_pb2, node_manager_pb2
from motor.testing.waits import async_wait_for
from nodemanager.agent import NodeManagerAgent
from nodemanager.config import NodeManagerConfig
from nodemanager.engine_answers import EngineProtocolError, EngineStatusEntry, EngineTimeout, EngineUnreachable
from nodemanager.engine_http import EngineAddress
from nodemanager.errors import FailedPrecondition
from nodemanager.ft_poller import DEAD, UNHEALTHY, EngineFtManager, FaultReport
from nodemanager.metrics import NodeManagerMetrics
from nodemanager.reporter import FaultReporter
from nodemanager.supervisor import EngineExit


def value(metrics: NodeManagerMetrics, name: str, **labels: str) -> float:
    found = metrics.registry.get_sample_value(name, labels)
    return 0.0 if found is None else found


class Clock:
    """The agent's clock, moved by hand (`now`, monotonic seconds)."""

    now = 0.0

    def monotonic(self) -> float:
        return self.now

    def wall(self) -> float:
        return 1_700_000_000.0 + self.now


class ScriptedHttp:
    def __init__(self, answers: list) -> None:
        self._answers = answers

    async def read_status(self, addr: EngineAddress, timeout_sec: float | None = None) -> EngineStatusEntry:
        answer = self._answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


class Controller:
    """Double of the Controller client: the first `fail` report calls fail with `code`."""

    address = "controller.test:1"

    def __init__(self, fail: int = 0, code: grpc.StatusCode = grpc.StatusCode.UNAVAILABLE) -> None:
        self.fail, self.code, self.calls = fail, code, 0

    async def report_software_fault(self, req: controller_pb2.ReportSoftwareFaultRequest
                                    ) -> controller_pb2.ReportSoftwareFaultResponse:
        self.calls += 1
        if self.fail > 0:
            self.fail -= 1
            raise grpc.aio.AioRpcError(self.code, grpc.aio.Metadata(), grpc.aio.Metadata(), "down")
        return controller_pb2.ReportSoftwareFaultResponse(accepted=True)

    async def report_software_faults(self, req: controller_pb2.ReportSoftwareFaultsRequest
                                     ) -> controller_pb2.ReportSoftwareFaultsResponse:
        answer = await self.report_software_fault(req.reports[0])
        return controller_pb2.ReportSoftwareFaultsResponse(
            results=[controller_pb2.ReportSoftwareFaultResult(accepted=answer.accepted) for _ in req.reports])


async def test_every_poll_is_counted_and_timed_and_errors_by_kind() -> None:
    metrics = NodeManagerMetrics()
    answers = [EngineStatusEntry(3, "healthy"), EngineTimeout(3, "no answer within 0.5s"),
               EngineUnreachable(3, "connection refused"), EngineProtocolError(3, "entry id 4, asked for 3"),
               EngineStatusEntry(3, "unhealthy", fault_info="peer gone")]
    manager = EngineFtManager(ScriptedHttp(answers), interval_sec=1.0, timeout_sec=0.5,  # type: ignore[arg-type]
                              address_of=lambda i: EngineAddress(i, "127.0.0.2", 9000), report=lambda r: None,
                              instance_id=1, metrics=metrics)
    for _ in range(5):
        await manager.poll_once(3)
    assert value(metrics, "motor_nodemanager_status_polls_total") == 5
    assert value(metrics, "motor_nodemanager_status_poll_seconds_count") == 5
    for kind in ("timeout", "unreachable", "protocol"):
        assert value(metrics, "motor_nodemanager_status_poll_errors_total", kind=kind) == 1, kind


def registered() -> asyncio.Event:
    event = asyncio.Event()
    event.set()
    return event


async def test_reports_sent_retried_and_dropped_by_reason() -> None:
    metrics = NodeManagerMetrics()
    retired = {5}
    reporter = FaultReporter(Controller(fail=4), pod_ip="127.0.0.2", instance_id=7, queue_size=8,  # type: ignore[arg-type]
                             attempts=3, is_retired=retired.__contains__, metrics=metrics, registered=registered(),
                             retry_max_sec=0.05)
    reporter.start()
    try:
        reporter.submit(FaultReport(5, DEAD, "retired rank"))
        reporter.submit(FaultReport(1, DEAD, "owed after 3 attempts, delivered at the 5th"))
        reporter.submit(FaultReport(2, UNHEALTHY, "in the same call as rank 1's"))
        await async_wait_for(lambda: reporter.sent == 2, 5.0, "reporter.sent == 2", interval_sec=0.01)
    finally:
        await reporter.close()
    assert value(metrics, "motor_nodemanager_fault_reports_dropped_total", reason="retired") == 1
    assert value(metrics, "motor_nodemanager_fault_reports_dropped_total", reason="attempts_exhausted") == 0
    assert value(metrics, "motor_nodemanager_fault_report_retries_total") == 4  # 4 failures of the call
    assert value(metrics, "motor_nodemanager_fault_reports_sent_total", kind="DEAD") == 1
    assert value(metrics, "motor_nodemanager_fault_reports_sent_total", kind="UNHEALTHY") == 1

    refused = NodeManagerMetrics()
    reporter = FaultReporter(Controller(fail=1, code=grpc.StatusCode.INVALID_ARGUMENT), pod_ip="127.0.0.2",  # type: ignore[arg-type]
                             instance_id=7, queue_size=1, attempts=3, is_retired=lambda _: False, metrics=refused,
                             registered=registered())
    reporter.submit(FaultReport(1, DEAD, "dropped: the queue holds one"))
    reporter.submit(FaultReport(2, DEAD, "refused by the controller"))
    reporter.start()
    try:
        await async_wait_for(lambda: reporter.lost == 2, 10.0, "both reports lost", interval_sec=0.01)
    finally:
        await reporter.close()
    assert value(refused, "motor_nodemanager_fault_reports_dropped_total", reason="queue_full") == 1
    assert value(refused, "motor_nodemanager_fault_reports_dropped_total", reason="refused") == 1


@pytest.fixture
def agent(tmp_path: Path):
    cfg = NodeManagerConfig.model_validate({
        "controller_address": "127.0.0.1:1", "instance_id": 7, "dp_size": 2, "pod_ip": "127.0.0.2",
        "engines": [{"dp_rank": 0}, {"dp_rank": 1}], "log_dir": str(tmp_path),
        "fault_tolerance_config": {"enable_dp_scale_down": True},
    })
    clock = Clock()
    return NodeManagerAgent(cfg, exit_hook=lambda code, why: None, clock=clock), clock


async def test_guard_gauges_are_read_at_scrape_time_and_applies_by_outcome(agent) -> None:
    a, clock = agent
    m = a.metrics
    assert value(m, "motor_nodemanager_guard_held") == 0
    a.proxy.guard("sd-1", 10.0, 7)
    assert value(m, "motor_nodemanager_guard_held") == 1
    assert value(m, "motor_nodemanager_guard_remaining_seconds") == 10.0
    apply = {"instance_id": 7, "request_id": "sd-1", "instruction": node_manager_pb2.INSTRUCTION_SCALE_DOWN,
             "removed_dp_ranks": [1], "dp_master_ip": "127.0.0.2", "dp_master_rank": 0, "endpoint_ids": [0]}
    result = await a.proxy.apply(**apply)  # forwarded, but the engine was never launched: not accepted
    assert not result.accepted
    assert value(m, "motor_nodemanager_apply_calls_total", outcome="not_accepted") == 1
    assert value(m, "motor_nodemanager_engine_applies_total", outcome="not_accepted") == 1
    with pytest.raises(Exception, match="never sent twice"):
        await a.proxy.apply(**apply)
    assert value(m, "motor_nodemanager_apply_calls_total", outcome="refused") == 1
    a.proxy.finalize(instance_id=7, request_id="sd-1", commit=False, retired_ids=[])
    assert value(m, "motor_nodemanager_finalizes_total", decision="abort") == 1
    a.proxy.guard("sd-2", 5.0, 7)
    clock.now = 6.0
    assert value(m, "motor_nodemanager_guard_held") == 0  # expired: read from the guard, nothing to update
    with pytest.raises(FailedPrecondition, match="expired"):
        await a.proxy.apply(**{**apply, "request_id": "sd-2"})
    assert value(m, "motor_nodemanager_apply_calls_total", outcome="refused") == 2


def test_engine_exits_by_intent_and_the_exposition_parses(agent) -> None:
    a, _ = agent
    a._on_exit(EngineExit(0, 1, 4242, -9, False, True))
    a._on_exit(EngineExit(1, 1, 4243, 0, True, True))
    m = a.metrics
    assert value(m, "motor_nodemanager_engine_exits_total", intentional="false") == 1
    assert value(m, "motor_nodemanager_engine_exits_total", intentional="true") == 1
    assert value(m, "motor_nodemanager_fault_report_queue") == 1  # the ENGINE_DEAD report waits for delivery
    families = {f.name: f for f in text_string_to_metric_families(generate_latest(m.registry).decode())}
    assert {"motor_nodemanager_status_polls", "motor_nodemanager_status_poll_seconds",
            "motor_nodemanager_status_poll_errors", "motor_nodemanager_fault_reports_sent",
            "motor_nodemanager_fault_reports_taken",
            "motor_nodemanager_fault_report_retries", "motor_nodemanager_fault_reports_dropped",
            "motor_nodemanager_engine_exits", "motor_nodemanager_guard_held", "motor_nodemanager_apply_calls",
            "motor_nodemanager_engine_applies"} <= set(families)
    assert all(name.startswith("motor_nodemanager_") for name in families)
