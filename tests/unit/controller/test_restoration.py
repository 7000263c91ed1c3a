"""Capacity restoration: when a scaled-down instance can be restored and why not (readiness, pure),
when the auto mode acts (auto_due, pure), and RestoreInstance over the real ControllerCore with fake
peers: refused while off or not ready, pending until every retired rank has a place, idempotent by
request id, paused and drained before the rebuild, back to every original rank, timeline and metrics."""

from __future__ import annotations

import grpc
import pytest
from .controller_fakes import FakeCoordinator, assemble, make_core, register_request, settle, two_pods

from gen.motor.v1 import controller_pb2
from motor.common.config.loader import load_config
from motor.controller.config import ControllerConfig
from motor.controller.fault_tolerance.strategy.base import publish_serving_view
from motor.controller.model.runtime import FtPhase
from motor.controller.restoration.readiness import auto_due, readiness
from motor.controller.restoration.restorer import RestoreRefused
from motor.testing.waits import turns_until

STOPPED, SURVIVOR = "127.0.0.2", "127.0.0.3"


def _config(mode: str, **restore) -> ControllerConfig:
    overrides = [("fault_tolerance_config.enable_dp_scale_down", True), ("capacity_restore.mode", mode)]
    overrides += [(f"capacity_restore.{k}", v) for k, v in restore.items()]
    return load_config(ControllerConfig, None, overrides)


async def _scaled_down(mode: str = "manual", **restore):
    """Instance 7 after rounds that removed ranks 0 and 1: pod 127.0.0.2 emptied (stopped, silent)."""
    cluster, coordinator = two_pods(), FakeCoordinator()
    core, clock = make_core(cluster, _config(mode, **restore), coordinator)
    await assemble(core, cluster)
    for phase in (FtPhase.DECIDING, FtPhase.SCALING_DOWN, FtPhase.POST_SCALE_CLEANUP, FtPhase.SCALED_DOWN_RUNNING):
        core.runtimes.set_phase(7, phase)
    core.runtimes.commit_round(7, [0, 1])
    await publish_serving_view(core.deps, 7)
    assert coordinator.view == {7: [2, 3]}
    clock.advance(core.config.heartbeat_timeout_sec + 1)
    beat(core, SURVIVOR, [2, 3])
    return core, clock, cluster, coordinator


def beat(core, pod_ip: str, alive: list[int]) -> None:
    core.heartbeat(controller_pb2.HeartbeatRequest(pod_ip=pod_ip, instance_id=7, alive_endpoint_ids=alive))


async def test_readiness_names_the_ranks_without_a_place_and_what_else_blocks() -> None:
    core, clock, _, _ = await _scaled_down()
    runtime, record = core.runtimes.get(7), core.registry.get(7)
    now, timeout = clock.monotonic(), core.config.heartbeat_timeout_sec
    waiting = readiness(runtime, record, now, timeout, None)
    assert not waiting.ready and waiting.unplaced == (0, 1) and waiting.silent_pods == (STOPPED,)
    assert "ranks [0, 1] have no ready place" in waiting.why() and STOPPED in waiting.why()
    beat(core, STOPPED, [])  # the stopped pod's NodeManager is back (its ranks registered retired)
    assert readiness(runtime, record, now, timeout, None).ready
    busy = readiness(runtime, record, now, timeout, "dp_scale_down")
    assert not busy.ready and "dp_scale_down is running" in busy.why()
    clock.advance(timeout)
    silent = readiness(runtime, record, clock.monotonic(), timeout, None)
    assert f"pod {SURVIVOR} of serving ranks is silent" in silent.blocked
    core.runtimes.clear_history(7, runtime.gate)
    assert readiness(runtime, record, now, timeout, None).full


@pytest.mark.parametrize(("fraction", "since", "due"), [(1.0, 0.0, True), (1.0, 25.0, False), (0.5, 0.0, False)],
                         ids=["settled", "settling", "enough-alive"])
async def test_auto_acts_once_settled_and_below_the_alive_fraction(fraction: float, since: float, due: bool) -> None:
    core, clock, _, _ = await _scaled_down()
    beat(core, STOPPED, [])
    runtime = core.runtimes.get(7)
    ready = readiness(runtime, core.registry.get(7), clock.monotonic(), core.config.heartbeat_timeout_sec, None)
    assert auto_due(runtime, ready, since, 30.0, min_alive_fraction=fraction, settle_sec=30.0) is due


async def test_off_refuses_and_not_ready_refuses_naming_the_ranks() -> None:
    core, *_ = await _scaled_down("off")
    with pytest.raises(RestoreRefused, match="capacity_restore.mode is off") as info:
        core.restorer.request(7, "r-1", when_ready=True, deadline_sec=0)
    assert info.value.code == "FAILED_PRECONDITION"
    core, *_ = await _scaled_down("manual")
    with pytest.raises(RestoreRefused, match=r"ranks \[0, 1\] have no ready place"):
        core.restorer.request(7, "r-1", when_ready=False, deadline_sec=0)
    with pytest.raises(RestoreRefused) as info:
        core.restorer.request(8, "r-2", when_ready=False, deadline_sec=0)
    assert info.value.code == "NOT_FOUND"


async def test_a_pending_restoration_starts_once_placed_and_brings_every_original_rank_back() -> None:
    core, clock, cluster, coordinator = await _scaled_down("manual")
    req = core.restorer.request(7, "r-1", when_ready=True, deadline_sec=0)
    runtime = core.runtimes.get(7)
    assert req.state == "restore_pending" and runtime.capacity_restore == "restore_pending"
    assert runtime.restore_unplaced_ranks == (0, 1) and STOPPED in runtime.restore_waiting_for
    core.restorer.check()
    assert core.faults.running(7) is None  # still no place

    beat(core, STOPPED, [])
    core.restorer.check()
    assert req.state == "restoring" and runtime.capacity_restore == "restoring"
    await settle(core)
    core.restorer.check()
    assert req.state == "restored" and runtime.capacity_restore == ""
    assert runtime.phase is FtPhase.NORMAL and runtime.dead_committed == frozenset()
    assert coordinator.view == {7: [0, 1, 2, 3]}
    assert [name for name, _ in coordinator.events][-3:] == ["PAUSE", "DEL", "ADD"]
    txn = core.timelines.transactions(7)[-1]
    assert (txn.strategy, txn.outcome, txn.request_id) == ("capacity_restore", "succeeded", req.transaction_id)
    assert runtime.restore_request_id == req.transaction_id
    names = [e.name for e in txn.events]
    for stage in ("restore", "RECONFIGURING", "pause", "in_flight_finished", "drain", "stop_engines",
                  "start_engines", "NORMAL", "publish"):
        assert stage in names, names
    assert names.index("pause") < names.index("in_flight_finished") < names.index("drain") < names.index("stop_engines")
    assert sorted(c[1] for c in cluster.named("start_engines")) == ["127.0.0.2:1", "127.0.0.3:1"]

    # The same request id answers the same request: no second restoration.
    again = core.restorer.request(7, "r-1", when_ready=True, deadline_sec=0)
    assert again is req and len(core.timelines.transactions(7)) == 1
    sample = core.metrics.registry.get_sample_value
    assert sample("motor_strategy_runs_total", {"strategy": "capacity_restore", "outcome": "succeeded"}) == 1
    assert sample("motor_capacity_restore_seconds_count") == 1
    with pytest.raises(RestoreRefused, match="used for instance 7"):
        core.restorer.request(8, "r-1", when_ready=True, deadline_sec=0)


async def test_in_flight_requests_get_the_bound_then_continue_elsewhere() -> None:
    core, clock, cluster, coordinator = await _scaled_down("manual", in_flight_finish_sec=3.0)
    beat(core, STOPPED, [])
    coordinator.outstanding[7] = 2  # never finish
    req = core.restorer.request(7, "r-1", when_ready=False, deadline_sec=0)
    assert req.state == "restoring"
    started = clock.monotonic()
    await settle(core)
    txn = core.timelines.transactions(7)[-1]
    note = next(e for e in txn.events if e.name == "in_flight_finished")
    assert "2 requests still in flight after 3.000s continue elsewhere" in note.detail
    assert clock.monotonic() - started >= 3.0 and core.runtimes.get(7).phase is FtPhase.NORMAL


async def test_a_pending_request_expires_at_its_deadline() -> None:
    core, clock, *_ = await _scaled_down("manual")
    req = core.restorer.request(7, "r-1", when_ready=True, deadline_sec=5.0)
    clock.advance(5.0)
    core.restorer.check()
    assert req.state == "expired" and "not ready within the deadline" in req.message
    assert core.runtimes.get(7).capacity_restore == ""


async def test_a_failed_restoration_is_retried_as_a_reconfiguration() -> None:
    core, clock, cluster, _ = await _scaled_down("manual")
    beat(core, STOPPED, [])
    cluster.fail[("start_engines", "127.0.0.2:1")] = grpc.StatusCode.UNAVAILABLE
    req = core.restorer.request(7, "r-1", when_ready=False, deadline_sec=0)
    await settle(core)
    core.restorer.check()
    runtime = core.runtimes.get(7)
    assert req.state.startswith("failed:") and runtime.phase is FtPhase.RECONFIGURING
    assert runtime.reconfiguration_attempts == 1
    del cluster.fail[("start_engines", "127.0.0.2:1")]
    clock.advance(60)
    await core.faults.evaluate_all()
    await turns_until(lambda: core.runtimes.get(7).phase is FtPhase.NORMAL, 300, "the retried reconfiguration")
    assert core.timelines.transactions(7)[-1].strategy == "instance_reconfiguration"


async def test_auto_restores_by_itself_after_settling_and_off_never_does() -> None:
    for mode, restored in (("auto", True), ("manual", False)):
        core, clock, *_ = await _scaled_down(mode, settle_sec=10.0)
        beat(core, STOPPED, [])
        core.restorer.check()
        assert core.faults.running(7) is None
        if mode == "auto":
            assert "settling" in core.runtimes.get(7).restore_waiting_for
        clock.advance(10.0)
        beat(core, STOPPED, [])
        beat(core, SURVIVOR, [2, 3])
        core.restorer.check()
        await settle(core)
        runtime = core.runtimes.get(7)
        assert (runtime.dead_committed == frozenset()) is restored, mode
        if restored:
            assert core.timelines.transactions(7)[-1].strategy == "capacity_restore"


async def test_a_pod_told_to_stop_has_no_place_until_it_registers_again() -> None:
    core, clock, cluster, _ = await _scaled_down()
    core.registry.get(7).pods[STOPPED].stop_requested = True  # the round that emptied it sent StopPod
    beat(core, STOPPED, [])  # a heartbeat sent before it exited
    with pytest.raises(RestoreRefused, match=r"ranks \[0, 1\] have no ready place"):
        core.restorer.request(7, "r-1", when_ready=False, deadline_sec=0)
    back = register_request(cluster, "127.0.0.2:1")
    back.retired_ids.extend([0, 1])
    await core.register(back)  # restarted in place: its stop record keeps the ranks retired
    assert core.runtimes.get(7).phase is FtPhase.SCALED_DOWN_RUNNING and core.faults.running(7) is None
    beat(core, STOPPED, [])
    assert core.restorer.request(7, "r-2", when_ready=False, deadline_sec=0).state == "restoring"
    await settle(core)
    assert core.runtimes.get(7).dead_committed == frozenset()
