"""Fast recovery by `retry` (RFC §4.3 EngineFastRecoveryStrategy): the transaction against in-memory
NodeManager/Coordinator peers with a manual clock, wired through the real strategy centre: guard →
drain → one retry per pod with one request id → poll → commit → publish; failures go straight to
whole-instance reconfiguration, never to a scale-down; the attempt budget bounds repetition."""

from __future__ import annotations

import pytest

from gen.motor.v1 import common_pb2, controller_pb2, node_manager_pb2
from motor.controller.fault_tolerance.evidence import EvidenceKind
from motor.controller.fault_tolerance.strategy.fast_recovery import FastRecoveryStrategy, retry_outcome
from motor.controller.hardware.levels import L5
from motor.controller.hardware.model import HardwareFault
from motor.controller.fault_tolerance.engine_states import Verdict
from motor.controller.model.runtime import FtPhase
from motor.testing.waits import turns_until

from .controller_fakes import (
    DEAD,
    HEALTHY,
    NONE,
    RECOVERING,
    UNHEALTHY,
    FakeCluster,
    FakeCoordinator,
    assemble,
    heartbeat_all,
    make_config,
    make_core,
    register_request,
    two_pods,
)

FAST_ON = {"enable_fast_recovery": True}


async def drain_tasks(core) -> None:
    await turns_until(lambda: not any(core.faults.running(r.instance_id) for r in core.runtimes.all()), 400,
                      "every strategy ended")


def all_unhealthy(core, cluster: FakeCluster, ranks=(0, 1, 2, 3),
                  info: str = "status=unhealthy fault_info='RuntimeError'") -> None:
    for r in ranks:
        cluster.set(r, UNHEALTHY)
        core.faults.report_software(7, r, EvidenceKind.UNHEALTHY, info, core.clock.wall())


async def started(core, **ft):
    cluster, coord = two_pods(), FakeCoordinator()
    core, clock = make_core(cluster, make_config(**{**FAST_ON, **ft}), coordinator=coord)
    await assemble(core, cluster)
    return core, clock, cluster, coord


def strategies(core, iid: int = 7) -> list[tuple[str, str]]:
    return [(t.strategy, t.outcome.split(":")[0]) for t in core.timelines.transactions(iid)]


async def test_retry_recovers_every_rank_in_place_and_publishes_again() -> None:
    core, _, cluster, coord = await started(None)
    all_unhealthy(core, cluster)
    await core.faults.evaluate_all()
    await drain_tasks(core)
    assert strategies(core) == [("fast_recovery", "succeeded")]
    applies = cluster.named("apply")
    # One retry per pod, every active rank a target, one request id, nothing removed.
    assert len(applies) == 2 and set(cluster.instructions) == {node_manager_pb2.INSTRUCTION_RETRY}
    assert len({a[2] for a in applies}) == 1 and applies[0][2].startswith("fr-7-")
    assert sorted(r for a in applies for r in a[6]) == [0, 1, 2, 3] and all(a[3] == () for a in applies)
    names = [c[0] for c in cluster.calls]
    assert names.index("guard") < names.index("apply") < names.index("finalize")
    assert "start_engines" not in names and "stop_engines" not in names
    # Committed with nothing retired; drained before the retry, published again after it.
    assert [c[3:] for c in cluster.named("finalize")] == [(True, ()), (True, ())]
    assert [e[0] for e in coord.events][-2:] == ["DEL", "ADD"] and coord.view == {7: [0, 1, 2, 3]}
    rt = core.runtimes.get(7)
    assert rt.phase is FtPhase.NORMAL and rt.dead_committed == frozenset() and rt.can_serve and rt.last_error is None
    # The evidence was superseded by the strategy's reads: nothing is left to decide.
    assert core.faults.evidence(7) == {}
    txn = core.timelines.transactions(7)[0]
    decision = next(e for e in txn.events if e.event_kind == controller_pb2.TIMELINE_EVENT_KIND_DECISION)
    assert decision.name == "fast_recovery" and list(decision.unhealthy_ranks) == [0, 1, 2, 3]
    phases = [e.name for e in txn.events if e.event_kind == controller_pb2.TIMELINE_EVENT_KIND_PHASE]
    assert phases == ["FAST_RECOVERING", "NORMAL"]


async def test_off_by_default_the_all_unhealthy_snapshot_waits_then_reconfigures() -> None:
    cluster = two_pods()
    core, clock = make_core(cluster)
    await assemble(core, cluster)
    assert not core.config.fault_tolerance_config.enable_fast_recovery
    all_unhealthy(core, cluster)
    await core.faults.evaluate_all()
    assert core.faults.running(7) is None and not cluster.named("guard")
    clock.advance(core.config.fault_tolerance_config.software_status_collection_timeout_sec)
    await core.faults.evaluate_all()
    await drain_tasks(core)
    assert strategies(core) == [("instance_reconfiguration", "succeeded")]
    assert not cluster.named("apply")


async def test_after_a_scale_down_the_retry_keeps_the_committed_ranks_out() -> None:
    core, _, cluster, coord = await started(None)
    cluster.fault(dead={1}, unhealthy={0, 2, 3})
    core.faults.report_software(7, 1, EvidenceKind.DEAD, "executor died", core.clock.wall())
    for r in (0, 2, 3):
        core.faults.report_software(7, r, EvidenceKind.UNHEALTHY, "", core.clock.wall())
    await core.faults.evaluate_all()
    await drain_tasks(core)
    assert core.runtimes.get(7).phase is FtPhase.SCALED_DOWN_RUNNING
    cluster.calls.clear()
    cluster.instructions.clear()
    all_unhealthy(core, cluster, ranks=(0, 2, 3))
    await core.faults.evaluate_all()
    await drain_tasks(core)
    assert strategies(core)[-1] == ("fast_recovery", "succeeded")
    applies = cluster.named("apply")
    assert sorted(r for a in applies for r in a[6]) == [0, 2, 3] and all(a[3] == (1,) for a in applies)
    rt = core.runtimes.get(7)
    assert rt.phase is FtPhase.SCALED_DOWN_RUNNING and rt.dead_committed == {1} and coord.view == {7: [0, 2, 3]}


async def test_a_retry_the_engine_fails_goes_straight_to_reconfiguration() -> None:
    core, _, cluster, _ = await started(None)

    def refuse_after_apply(polls: int) -> None:
        # vLLM answers 202 and then names the failure in status: unhealthy, ft_error, its request id.
        for eng in cluster.engines.values():
            if eng.polls_since_apply >= 0:
                eng.ft_state, eng.ft_error, eng.recover_after_polls = NONE, "[FT] retry failed", None

    cluster.on_status = refuse_after_apply
    all_unhealthy(core, cluster)
    await core.faults.evaluate_all()
    await drain_tasks(core)
    assert strategies(core) == [("fast_recovery", "failed"), ("instance_reconfiguration", "succeeded")]
    txn = core.timelines.transactions(7)[0]
    assert "ft_error='[FT] retry failed'" in txn.outcome
    # Exactly one retry per pod, never re-sent; the guards aborted before the fallback.
    assert len(cluster.named("apply")) == 2
    assert [c[3] for c in cluster.named("finalize")] == [False, False]


async def test_a_dead_rank_during_the_attempt_fails_it_without_a_scale_down() -> None:
    core, _, cluster, _ = await started(None)
    all_unhealthy(core, cluster)
    cluster.set(2, DEAD)  # the engines now say rank 2 died: the fault was not transient
    await core.faults.evaluate_all()
    await drain_tasks(core)
    assert strategies(core) == [("fast_recovery", "failed"), ("instance_reconfiguration", "succeeded")]
    assert not cluster.named("apply")
    assert "rank 2 (dead, -)" in core.timelines.transactions(7)[0].outcome


async def test_ranks_not_healthy_within_the_deadline_fail_the_attempt() -> None:
    core, clock, cluster, _ = await started(None, **{"fast_recovery_config.execution_deadline_sec": 3.0})
    for eng in cluster.engines.values():
        eng.recover_after_polls = None  # the rebuild never finishes
    all_unhealthy(core, cluster)
    await core.faults.evaluate_all()
    await drain_tasks(core)
    assert strategies(core) == [("fast_recovery", "failed"), ("instance_reconfiguration", "succeeded")]
    assert "not healthy after retry within 3s" in core.timelines.transactions(7)[0].outcome


async def test_an_apply_not_accepted_fails_the_attempt() -> None:
    core, _, cluster, _ = await started(None)
    cluster.apply_refused.add(3)
    all_unhealthy(core, cluster)
    await core.faults.evaluate_all()
    await drain_tasks(core)
    assert strategies(core) == [("fast_recovery", "failed"), ("instance_reconfiguration", "succeeded")]
    assert "apply not accepted" in core.timelines.transactions(7)[0].outcome


async def test_engines_healthy_before_the_retry_need_none() -> None:
    core, _, cluster, coord = await started(None)
    for r in range(4):
        core.faults.report_software(7, r, EvidenceKind.UNHEALTHY, "RuntimeError", core.clock.wall())
    # The reports are older than the engines' state: every engine reads healthy again.
    await core.faults.evaluate_all()
    await drain_tasks(core)
    assert strategies(core) == [("fast_recovery", "succeeded")]
    assert not cluster.named("apply") and coord.view == {7: [0, 1, 2, 3]}
    assert core.runtimes.get(7).phase is FtPhase.NORMAL


async def test_the_attempt_budget_bounds_repeated_transient_faults() -> None:
    core, clock, cluster, _ = await started(None, **{"fast_recovery_config.max_attempts": 2,
                                                     "fast_recovery_config.attempt_window_sec": 100.0,
                                                     "software_status_collection_timeout_sec": 5.0})
    for _ in range(2):
        all_unhealthy(core, cluster)
        await core.faults.evaluate_all()
        await drain_tasks(core)
        clock.advance(1.0)
    assert strategies(core) == [("fast_recovery", "succeeded")] * 2
    # A third within the window: not applicable, so the RFC's wait and then the reconfiguration.
    all_unhealthy(core, cluster)
    await core.faults.evaluate_all()
    assert core.faults.running(7) is None
    clock.advance(core.config.fault_tolerance_config.software_status_collection_timeout_sec)
    await core.faults.evaluate_all()
    await drain_tasks(core)
    assert strategies(core)[-1] == ("instance_reconfiguration", "succeeded")
    decision = next(e for e in core.timelines.transactions(7)[-1].events
                    if e.event_kind == controller_pb2.TIMELINE_EVENT_KIND_DECISION)
    assert decision.fallback_cause == controller_pb2.FALLBACK_CAUSE_ALL_UNHEALTHY_TIMEOUT
    # Once the window has passed, a retry is tried again.
    clock.advance(100.0)
    heartbeat_all(core, cluster)
    all_unhealthy(core, cluster)
    await core.faults.evaluate_all()
    await drain_tasks(core)
    assert strategies(core)[-1] == ("fast_recovery", "succeeded")


async def test_a_fault_info_the_policy_refuses_waits_instead() -> None:
    core, _, cluster, _ = await started(None, **{"fast_recovery_config.allowed_fault_infos": ["RuntimeError"]})
    all_unhealthy(core, cluster, info="status=unhealthy fault_info='ECC error'")
    await core.faults.evaluate_all()
    assert core.faults.running(7) is None and not cluster.named("guard")


async def test_engines_without_retry_are_not_retried() -> None:
    cluster = two_pods()
    core, _ = make_core(cluster, make_config(**FAST_ON))
    for address in cluster.pods:
        req = register_request(cluster, address)
        req.ft_capability.retry_supported = False
        await core.register(req)
    all_unhealthy(core, cluster)
    await core.faults.evaluate_all()
    assert core.faults.running(7) is None


async def test_a_stop_aborts_the_guards_before_anything_else_runs() -> None:
    core, _, cluster, _ = await started(None)
    for eng in cluster.engines.values():
        eng.recover_after_polls = None
    all_unhealthy(core, cluster)
    await core.faults.evaluate_all()
    await turns_until(lambda: len(cluster.named("apply")) == 2, 200, "the retries sent")
    strategy = core.faults.running(7)
    assert isinstance(strategy, FastRecoveryStrategy)
    await core.faults.center.stop_running(7)
    assert strategy.is_finished() and [c[3] for c in cluster.named("finalize")] == [False, False]
    assert not cluster.guard_holder


@pytest.mark.parametrize(
    ("status", "ft_state", "ft_error", "last_id", "verdict"),
    [
        (HEALTHY, NONE, "", "", Verdict.DONE),
        (UNHEALTHY, NONE, "", "", Verdict.WAIT),
        (UNHEALTHY, RECOVERING, "", "fr-1", Verdict.WAIT),
        (UNHEALTHY, NONE, "refused", "fr-1", Verdict.FAIL),
        (UNHEALTHY, NONE, "refused", "engine-made", Verdict.FAIL),
        # An ft_error of an earlier command is not this attempt's outcome.
        (UNHEALTHY, NONE, "old", "sd-7-old", Verdict.WAIT),
        (DEAD, NONE, "", "", Verdict.FAIL),
    ],
)
def test_retry_outcome_reads_the_attempts_own_request_ids(status, ft_state, ft_error, last_id, verdict) -> None:
    s = common_pb2.EngineFtStatus(id=0, status=status, ft_state=ft_state, ft_error=ft_error, last_ft_request_id=last_id)
    assert retry_outcome(s, frozenset({"fr-1", "engine-made"})) is verdict


async def test_fast_recovery_works_with_scale_down_off() -> None:
    core, _, cluster, coord = await started(None, enable_dp_scale_down=False)
    assert core.config.fault_tolerance_config.enable_dp_scale_down_proxy  # the proxy serves the retry
    all_unhealthy(core, cluster)
    await core.faults.evaluate_all()
    await drain_tasks(core)
    assert strategies(core) == [("fast_recovery", "succeeded")]
    assert core.runtimes.get(7).phase is FtPhase.DISABLED and coord.view == {7: [0, 1, 2, 3]}


@pytest.mark.parametrize(("allowed", "retried"), [([], False), (["0x80e18402"], True)])
async def test_a_mapped_hardware_fault_stops_the_retry_unless_its_code_is_allowed(allowed, retried) -> None:
    core, clock, cluster, _ = await started(None, **{"fast_recovery_config.allowed_hardware_fault_codes": allowed})
    fault = HardwareFault(node_name="node-127.0.0.2", npu_name="Ascend910-1", fault_codes=("80E18402",), level=L5,
                          fault_time_unix_sec=clock.wall())
    core.faults.report_hardware([fault])
    all_unhealthy(core, cluster)
    await core.faults.evaluate_all()
    await drain_tasks(core)
    assert (strategies(core) == [("fast_recovery", "succeeded")]) is retried
    assert bool(cluster.named("apply")) is retried
