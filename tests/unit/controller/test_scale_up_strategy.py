"""Elastic scale-up (docs/engine-protocol-scale-up.md, "Motor's transaction"): the plan and the
verdicts (pure), and ScaleUpStrategy over the real ControllerCore with fake peers on the fake clock:
the Restorer picks it when every pod declares supports_scale_up; a round re-admits the removed
ranks without restarting the survivors; each failure before the Controller's commit aborts every
participant and hands over to the planned restoration, which brings every rank back."""

from __future__ import annotations

import grpc
import pytest
from .controller_fakes import (
    DEAD,
    FAILED,
    HEALTHY,
    NONE,
    RECOVERING,
    UNHEALTHY,
    FakeCluster,
    FakeCoordinator,
    make_core,
    register_request,
    settle,
    two_pods,
)

from gen.motor.v1 import common_pb2, controller_pb2, node_manager_pb2
from motor.common.config.loader import load_config
from motor.controller.config import ControllerConfig
from motor.controller.fault_tolerance.engine_states import Verdict
from motor.controller.fault_tolerance.stages import SCALE_UP_STAGES, transaction_stages
from motor.controller.fault_tolerance.strategy.base import publish_serving_view
from motor.controller.fault_tolerance.topology import TopologyError
from motor.controller.model.placement import EndpointInfo, PodInfo
from motor.controller.model.runtime import FtPhase
from motor.controller.restoration.scale_up_plan import plan_scale_up, scale_up_outcome, scale_up_readiness

STOPPED, SURVIVOR = "127.0.0.2", "127.0.0.3"
JOINERS_POD, SURVIVORS_POD = f"{STOPPED}:1", f"{SURVIVOR}:1"


def _status(status: int, ft_state: int = NONE, ft_error: str = "", request_id: str = "") -> common_pb2.EngineFtStatus:
    return common_pb2.EngineFtStatus(id=0, status=status, ft_state=ft_state, ft_error=ft_error,
                                     last_ft_request_id=request_id)


@pytest.mark.parametrize(("status", "before", "after"), [
    (_status(HEALTHY), Verdict.DONE, Verdict.DONE),
    (_status(UNHEALTHY), Verdict.FAIL, Verdict.WAIT),
    (_status(UNHEALTHY, RECOVERING), Verdict.FAIL, Verdict.WAIT),
    (_status(HEALTHY, RECOVERING), Verdict.FAIL, Verdict.WAIT),
    (_status(UNHEALTHY, FAILED), Verdict.FAIL, Verdict.FAIL),
    (_status(DEAD), Verdict.FAIL, Verdict.FAIL),
    (_status(UNHEALTHY, NONE, "check-in window missed", "su-7-x"), Verdict.FAIL, Verdict.FAIL),
    (_status(UNHEALTHY, NONE, "an older round's error", "sd-7-y"), Verdict.FAIL, Verdict.WAIT),
], ids=["healthy", "unhealthy", "recovering", "healthy-recovering", "failed", "dead", "own-error", "old-error"])
def test_the_verdicts_before_and_after_the_apply(status, before: Verdict, after: Verdict) -> None:
    assert scale_up_readiness(status) is before
    assert scale_up_outcome(status, "su-7-x") is after


def test_the_plan_names_survivors_and_joiners_and_the_grown_groups_master() -> None:
    endpoints = {r: EndpointInfo(r, "10.0.0.1" if r < 2 else "10.0.0.2", False) for r in range(4)}
    pods = [PodInfo("10.0.0.1", "a:1", (0, 1)), PodInfo("10.0.0.2", "b:1", (2, 3))]
    plan = plan_scale_up(original_dp_ranks=range(4), dead_committed={0, 1, 3}, added={0, 1}, endpoints=endpoints,
                         pods=pods)
    assert (plan.added, plan.removed_cumulative, plan.survivors) == ((0, 1), (3,), (0, 1, 2))
    assert (plan.dp_master_rank, plan.dp_master_ip) == (0, "10.0.0.1")
    assert [(p.node_manager_address, p.status_targets, p.retired) for p in plan.pods] == [("a:1", (0, 1), ()),
                                                                                          ("b:1", (2,), ())]
    with pytest.raises(TopologyError, match=r"ranks \[2\] are not committed dead"):
        plan_scale_up(original_dp_ranks=range(4), dead_committed={0}, added={0, 2}, endpoints=endpoints, pods=pods)
    with pytest.raises(TopologyError, match="no survivor serves"):
        plan_scale_up(original_dp_ranks=range(4), dead_committed=set(range(4)), added=set(range(4)),
                      endpoints=endpoints, pods=pods)


def _config() -> ControllerConfig:
    return load_config(ControllerConfig, None, [("fault_tolerance_config.enable_dp_scale_down", True),
                                                ("capacity_restore.mode", "manual")])


async def _scaled_down(scale_up: bool = True, cluster: FakeCluster | None = None):
    """Instance 7 after rounds that removed ranks 0 and 1; their pod registered again (a place)."""
    cluster, coordinator = cluster or two_pods(), FakeCoordinator()
    core, clock = make_core(cluster, _config(), coordinator)
    for address in cluster.pods:
        await core.register(register_request(cluster, address, scale_up=scale_up))
    for phase in (FtPhase.DECIDING, FtPhase.SCALING_DOWN, FtPhase.POST_SCALE_CLEANUP, FtPhase.SCALED_DOWN_RUNNING):
        core.runtimes.set_phase(7, phase)
    core.runtimes.commit_round(7, [0, 1])
    await publish_serving_view(core.deps, 7)
    for pod_ip, alive in ((STOPPED, []), (SURVIVOR, [2, 3])):
        core.heartbeat(controller_pb2.HeartbeatRequest(pod_ip=pod_ip, instance_id=7, alive_endpoint_ids=alive))
    return core, clock, cluster, coordinator


async def test_a_scale_up_readmits_the_removed_ranks_without_restarting_the_survivors() -> None:
    core, _, cluster, coordinator = await _scaled_down()
    req = core.restorer.request(7, "r-1", when_ready=False, deadline_sec=0)
    assert req.state == "restoring"
    await settle(core)
    core.restorer.check()
    runtime = core.runtimes.get(7)
    assert req.state == "restored", req.message
    assert runtime.phase is FtPhase.NORMAL and runtime.dead_committed == frozenset()
    assert coordinator.view == {7: [0, 1, 2, 3]}
    assert cluster.named("stop_engines") == [] and cluster.named("start_engines") == []
    assert [c[1:] for c in cluster.named("join")] == [(JOINERS_POD, req.transaction_id, (0, 1))]
    assert cluster.instructions == [node_manager_pb2.INSTRUCTION_SCALE_UP] * 2 and cluster.added == [(0, 1)] * 2
    applies = {c[1]: c for c in cluster.named("apply")}
    assert applies[JOINERS_POD][3:7] == ((), STOPPED, 0, (0, 1)) and applies[SURVIVORS_POD][6] == (2, 3)
    assert sorted((c[1], c[3], c[4]) for c in cluster.named("finalize")) == [(JOINERS_POD, True, ()),
                                                                            (SURVIVORS_POD, True, ())]
    txn = core.timelines.transactions(7)[-1]
    assert (txn.strategy, txn.outcome, txn.request_id) == ("scale_up", "succeeded", req.transaction_id)
    names = [e.name for e in txn.events]
    order = ["scale_up", "gate", "SCALING_UP", "guard", "start_engines", "status", "drain", "apply", "finalize",
             "NORMAL", "publish"]
    assert set(order) <= set(names) and sorted(order, key=names.index) == order, names
    assert core.metrics.registry.get_sample_value("motor_strategy_runs_total",
                                                  {"strategy": "scale_up", "outcome": "succeeded"}) == 1
    assert [s.name for s in transaction_stages(txn.proto)] == list(SCALE_UP_STAGES)


async def test_without_the_declaration_the_restoration_is_the_planned_rebuild() -> None:
    core, _, cluster, _ = await _scaled_down(scale_up=False)
    req = core.restorer.request(7, "r-1", when_ready=False, deadline_sec=0)
    await settle(core)
    core.restorer.check()
    assert req.state == "restored" and cluster.named("join") == []
    assert [t.strategy for t in core.timelines.transactions(7)] == ["capacity_restore"]


def _joiner_dead(cluster: FakeCluster) -> None:
    cluster.on_status = lambda polls: cluster.set(0, DEAD) if polls == 1 else None


def _survivor_unhealthy(cluster: FakeCluster) -> None:
    cluster.on_status = lambda polls: cluster.set(2, UNHEALTHY) if polls == 1 else None


def _rebuild_fails(cluster: FakeCluster) -> None:
    cluster.on_apply = lambda: setattr(cluster.engines[1], "fail_on_apply", "the vote failed")


def _never_done(cluster: FakeCluster) -> None:
    cluster.on_apply = lambda: setattr(cluster.engines[3], "recover_after_polls", None)


@pytest.mark.parametrize("fault", [
    lambda c: c.fail.update({("join", "*"): grpc.StatusCode.UNAVAILABLE}),
    _joiner_dead,
    _survivor_unhealthy,
    lambda c: c.fail.update({("apply", SURVIVORS_POD): grpc.StatusCode.UNAVAILABLE}),
    lambda c: c.apply_refused.add(1),
    _rebuild_fails,
    _never_done,
    lambda c: c.fail.update({("finalize", JOINERS_POD): grpc.StatusCode.FAILED_PRECONDITION}),
], ids=["join-fails", "joiner-dead", "survivor-unhealthy", "apply-unreachable", "apply-refused", "rebuild-fails",
        "deadline", "commit-refused"])
async def test_each_failure_aborts_and_falls_back_to_the_planned_restoration(fault) -> None:
    core, _, cluster, coordinator = await _scaled_down()
    fault(cluster)
    req = core.restorer.request(7, "r-1", when_ready=False, deadline_sec=0)
    await settle(core)
    cluster.on_status = cluster.on_apply = None
    await settle(core)
    core.restorer.check()
    scale_up, restore = core.timelines.transactions(7)
    assert scale_up.strategy == "scale_up" and scale_up.outcome.startswith("failed: "), scale_up.outcome
    assert (restore.strategy, restore.outcome) == ("capacity_restore", "succeeded")
    aborts = [c for c in cluster.named("finalize") if c[2] == scale_up.request_id and not c[3]]
    # Every NodeManager not committed is aborted (a refused commit is no commit).
    committed = {c[1] for c in cluster.named("finalize") if c[2] == scale_up.request_id and c[3]}
    assert aborts and {c[1] for c in aborts} | committed == set(cluster.pods)
    assert req.state == "restored", req.message
    runtime = core.runtimes.get(7)
    assert runtime.phase is FtPhase.NORMAL and runtime.dead_committed == frozenset()
    assert coordinator.view == {7: [0, 1, 2, 3]}
    assert core.metrics.registry.get_sample_value("motor_strategy_runs_total",
                                                  {"strategy": "scale_up", "outcome": "failed"}) == 1


async def test_a_hardware_fault_during_the_round_fails_it_before_the_apply() -> None:
    core, _, cluster, _ = await _scaled_down()

    def card_fault(polls: int) -> None:
        running = core.faults.running(7)
        if polls == 1 and running is not None:
            running.note_hardware(frozenset({2}), "L5 on Ascend910-0 of node-127.0.0.3")

    cluster.on_status = card_fault
    req = core.restorer.request(7, "r-1", when_ready=False, deadline_sec=0)
    await settle(core)
    await settle(core)
    core.restorer.check()
    scale_up, restore = core.timelines.transactions(7)
    assert "hardware fault" in scale_up.outcome and cluster.named("apply") == []
    assert restore.strategy == "capacity_restore" and req.state == "restored"


async def test_a_strategy_stopped_mid_round_aborts_and_starts_nothing_else() -> None:
    core, _, cluster, _ = await _scaled_down()
    stopping: list[bool] = []

    def stop_on_first_poll(polls: int) -> None:
        if polls == 1:
            stopping.append(True)

    cluster.on_status = stop_on_first_poll
    core.restorer.request(7, "r-1", when_ready=False, deadline_sec=0)
    from motor.testing.waits import turns_until
    await turns_until(lambda: stopping, 300, "the round's first status poll")
    await core.faults.center.stop_running(7)
    assert core.faults.running(7) is None
    txn = core.timelines.transactions(7)[-1]
    assert txn.strategy == "scale_up" and txn.outcome.startswith("failed: ")
    assert sorted(c[1] for c in cluster.named("finalize") if not c[3]) == sorted(cluster.pods)
    assert core.runtimes.get(7).phase is FtPhase.SCALING_UP  # a new life takes it as an interrupted round
