"""The daemon's rules without processes: which exits are reported, the heartbeat alive set, proxy
adoption, the registration; and the error→status map."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from gen.motor.v1 import controller_pb2
from nodemanager.config import NodeManagerConfig
from nodemanager import errors
from nodemanager.agent import NodeManagerAgent
from nodemanager.ft_poller import ENGINE_DEAD
from nodemanager.rpc import status_code_of
from nodemanager.supervisor import EngineExit, RunState


class Clock:
    """The agent's clock, moved by hand (`now`, monotonic seconds)."""

    now = 0.0

    def monotonic(self) -> float:
        return self.now

    def wall(self) -> float:
        return 1_700_000_000.0 + self.now


@pytest.fixture
def agent(tmp_path: Path):
    cfg = NodeManagerConfig.model_validate({
        "controller_address": "127.0.0.1:1", "instance_id": 7, "dp_size": 2, "pod_ip": "127.0.0.2",
        "engines": [{"dp_rank": 0}, {"dp_rank": 1}], "log_dir": str(tmp_path), "exit_when_all_engines_dead": True,
        "fault_tolerance_config": {"enable_dp_scale_down": True},
    })
    exits: list[tuple[int, str]] = []
    clock = Clock()
    a = NodeManagerAgent(cfg, exit_hook=lambda code, why: exits.append((code, why)), clock=clock)
    return a, exits, clock


def pending(a: NodeManagerAgent) -> list[tuple[int, int]]:
    return [(r.endpoint_id, r.kind) for r in a.reporter._queue]


def exit_event(endpoint_id: int, intentional: bool = False) -> EngineExit:
    return EngineExit(endpoint_id, 1, 4242, -9, intentional, True)


def test_unintended_exit_is_reported_as_engine_dead(agent) -> None:
    a, _, _ = agent
    a._on_exit(exit_event(0))
    assert pending(a) == [(0, ENGINE_DEAD)]
    assert "signal SIGKILL" in a.reporter._queue[0].evidence


def test_intentional_and_retired_exits_are_not_reported(agent) -> None:
    a, _, _ = agent
    a._on_exit(exit_event(0, intentional=True))
    a.state.retire([1])
    a._on_exit(exit_event(1))
    assert pending(a) == []


def test_reports_about_retired_endpoints_are_dropped_in_the_queue_too(agent) -> None:
    a, _, _ = agent
    a._on_exit(exit_event(1))
    assert pending(a) == [(1, ENGINE_DEAD)]
    a.state.retire([1])
    from nodemanager.ft_poller import FaultReport
    a.reporter.submit(FaultReport(1, ENGINE_DEAD, "x"))
    assert pending(a) == [(1, ENGINE_DEAD)]  # the new one was refused; the queued one is skipped at send time


def test_heartbeat_alive_set(agent) -> None:
    a, _, _ = agent
    assert a.alive_ids() == []
    for i in (0, 1):
        a.supervisor.slot(i).state = RunState.READY
    assert a.alive_ids() == [0, 1]
    a.state.retire([1])
    assert a.alive_ids() == [0]
    a.supervisor.slot(0).state = RunState.STARTING
    assert a.alive_ids() == [0]
    a.supervisor.slot(0).state = RunState.STOPPING
    assert a.alive_ids() == []


def test_proxy_switch_from_controller_drops_the_guard(agent) -> None:
    a, _, _ = agent
    a.guard.acquire("r1", 10)
    a._on_config(controller_pb2.NodeManagerFtConfig(enable_dp_scale_down_proxy=True), "heartbeat")
    assert a.guard.holder == "r1" and a.state.proxy_enabled
    a._on_config(controller_pb2.NodeManagerFtConfig(enable_dp_scale_down_proxy=False), "heartbeat")
    assert a.guard.holder is None and not a.state.proxy_enabled


def test_reports_wait_for_the_links_first_registration(agent) -> None:
    a, _, _ = agent
    assert a.reporter.registered is a.link.registered and not a.link.registered.is_set()


def test_register_request_carries_topology_capability_and_retired(agent) -> None:
    a, _, _ = agent
    a.state.retire([1])
    req = a.register_request()
    assert (req.instance_id, req.dp_size, req.pod.pod_ip) == (7, 2, "127.0.0.2")
    assert [e.id for e in req.endpoints] == [0, 1] and list(req.retired_ids) == [1]
    assert req.ft_capability.engine_ft_enabled and req.ft_capability.scale_down_supported


@pytest.mark.parametrize(
    ("exc", "code"),
    [
        (errors.InvalidArgument("x"), grpc.StatusCode.INVALID_ARGUMENT),
        (errors.FailedPrecondition("x"), grpc.StatusCode.FAILED_PRECONDITION),
        (errors.AlreadyExists("x"), grpc.StatusCode.ALREADY_EXISTS),
        (errors.Unavailable("x"), grpc.StatusCode.UNAVAILABLE),
        (errors.DeadlineExceeded("x"), grpc.StatusCode.DEADLINE_EXCEEDED),
        (errors.ProxyDisabled(), grpc.StatusCode.UNIMPLEMENTED),
        (errors.NodeManagerError("x"), grpc.StatusCode.INTERNAL),
    ],
)
def test_error_to_status_mapping(exc: errors.NodeManagerError, code: grpc.StatusCode) -> None:
    assert status_code_of(exc) is code
