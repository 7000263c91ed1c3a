"""DpScaleDownStrategy and FaultManager against in-memory NodeManager/Coordinator peers and a
manual clock: the RFC §5 round, absorption, failure paths, fallback, preemption and restart rules."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from gen.motor.v1 import common_pb2, controller_pb2
from motor.controller.fault_tolerance.context import ScaleDownContext
from motor.controller.fault_tolerance.evidence import EvidenceKind
from motor.controller.fault_tolerance.strategy.base import Outcome, Priority, Strategy
from motor.controller.fault_tolerance.strategy.dp_scale_down import DpScaleDownStrategy
from motor.controller.model.runtime import FtPhase
from motor.controller.persistence import MemoryRuntimeStore
from motor.testing.waits import turns_until

from .controller_fakes import (
    DEAD,
    NONE,
    UNHEALTHY,
    FakeCluster,
    FakeCoordinator,
    assemble,
    heartbeat_all,
    make_config,
    make_core,
    register_request,
    run_scale_down,
    scale_down_ctx,
    two_pods,
)


async def test_ordinary_rank_round_commits_once_and_publishes_survivors() -> None:
    cluster, coord = two_pods(), FakeCoordinator()
    core, _ = make_core(cluster, coordinator=coord)
    await assemble(core, cluster)
    assert coord.view == {7: [0, 1, 2, 3]}
    cluster.fault(dead={1}, unhealthy={0, 2, 3})
    strategy, outcome = await run_scale_down(core, {1}, {0, 2, 3})
    assert outcome.succeeded, outcome.detail
    rt = core.runtimes.get(7)
    assert rt.phase is FtPhase.SCALED_DOWN_RUNNING and rt.dead_committed == {1} and rt.alive_dp_ranks == [0, 2, 3]
    assert rt.serving_published and rt.can_serve and rt.last_error is None
    applies = cluster.named("apply")
    assert len(applies) == 2  # one per pod with survivors, one call each
    assert {a[2] for a in applies} == {strategy.request_id}
    assert all(a[3] == (1,) and a[4] == "127.0.0.2" and a[5] == 0 for a in applies)
    assert sorted(r for a in applies for r in a[6]) == [0, 2, 3]
    assert [c[0] for c in cluster.calls if c[0] in ("guard",)] == ["guard", "guard"]
    assert cluster.status_taken and not any(cluster.status_taken), "a round judges its reads: they are not evidence"
    commits = {c[1]: c[4] for c in cluster.named("finalize") if c[3]}
    assert commits == {"127.0.0.2:1": (1,), "127.0.0.3:1": ()}
    assert [e[0] for e in coord.events] == ["ADD", "DEL", "ADD"]
    assert coord.view == {7: [0, 2, 3]}
    phases = [e.name for e in strategy.txn.events if e.kind == "phase"]
    assert phases == ["DECIDING", "SCALING_DOWN", "POST_SCALE_CLEANUP", "SCALED_DOWN_RUNNING"]
    assert not cluster.guard_holder  # every guard released


async def test_consecutive_rounds_keep_original_ids_and_cumulative_removal() -> None:
    cluster, coord = two_pods(), FakeCoordinator()
    core, _ = make_core(cluster, coordinator=coord)
    await assemble(core, cluster)
    cluster.fault(dead={1}, unhealthy={0, 2, 3})
    assert (await run_scale_down(core, {1}, {0, 2, 3}))[1].succeeded
    cluster.fault(dead={3}, unhealthy={0, 2})
    strategy, outcome = await run_scale_down(core, {3}, {0, 2})
    assert outcome.succeeded, outcome.detail
    rt = core.runtimes.get(7)
    assert rt.alive_dp_ranks == [0, 2] and rt.dead_committed == {1, 3}
    second = [a for a in cluster.named("apply") if a[2] == strategy.request_id]
    assert all(a[3] == (1, 3) for a in second)
    # The drain of round two deletes exactly what round one published; the SET keeps 1 and 3 out.
    assert coord.events[-2] == ("DEL", {7: [0, 2, 3]})
    assert coord.view == {7: [0, 2]}
    await core.publish_all()
    assert coord.events[-1] == ("SET", {7: [0, 2]})


async def test_every_apply_names_this_rounds_ranks_beside_the_cumulative_list() -> None:
    # Engines that take only the ranks still expected (SGLang's manager) need them from the Controller:
    # a NodeManager restarted between two rounds knows no earlier round.
    cluster = two_pods()
    core, _ = make_core(cluster)
    await assemble(core, cluster)
    cluster.fault(dead={1}, unhealthy={0, 2, 3})
    assert (await run_scale_down(core, {1}, {0, 2, 3}))[1].succeeded
    cluster.fault(dead={0, 3}, unhealthy={2})
    assert (await run_scale_down(core, {0, 3}, {2}))[1].succeeded
    applies = [(a[3], removed) for a, removed in zip(cluster.named("apply"), cluster.round_removed, strict=True)]
    assert applies == [((1,), (1,)), ((1,), (1,)), ((0, 1, 3), (0, 3))]


async def test_a_pod_is_read_once_its_own_guard_holds_and_nothing_is_applied_before_every_guard() -> None:
    """The first status read rides on the guard fan-out: a pod's survivors are read right
    after its guard answers, while another pod's guard is still out; the apply waits for that guard."""
    cluster = two_pods()
    core, _ = make_core(cluster)
    await assemble(core, cluster)
    cluster.fault(dead={1}, unhealthy={0, 2, 3})
    slow = cluster.hold_guard["127.0.0.3:1"] = asyncio.Event()
    strategy = DpScaleDownStrategy(core.deps, scale_down_ctx(core, {1}, {0, 2, 3}))
    task = asyncio.create_task(strategy.run())
    await turns_until(lambda: cluster.named("status"), 10_000, f"a status read (calls before: {cluster.calls})")
    assert [c[1:3] for c in cluster.named("status")] == [("127.0.0.2:1", (0,))]
    assert len(cluster.named("guard")) == 2 and not cluster.named("apply")
    slow.set()
    outcome = await task
    assert outcome.succeeded, outcome.detail
    before_apply = cluster.calls[:min(i for i, c in enumerate(cluster.calls) if c[0] == "apply")]
    assert sorted(c[1] for c in before_apply if c[0] == "status") == ["127.0.0.2:1", "127.0.0.3:1"], \
        "one read per pod before the apply: no separate status fan-out after the guards"


async def test_rank0_round_picks_new_master() -> None:
    cluster = two_pods()
    core, _ = make_core(cluster)
    await assemble(core, cluster)
    cluster.fault(dead={0}, unhealthy={1, 2, 3})
    _, outcome = await run_scale_down(core, {0}, {1, 2, 3})
    assert outcome.succeeded
    assert {(a[4], a[5]) for a in cluster.named("apply")} == {("127.0.0.2", 1)}


async def test_late_dead_survivor_is_absorbed_into_the_same_round() -> None:
    cluster = two_pods()
    core, _ = make_core(cluster)
    await assemble(core, cluster)
    cluster.fault(dead={1}, unhealthy={0, 2, 3})
    cluster.set(2, DEAD)  # died after the FaultManager froze its snapshot
    strategy, outcome = await run_scale_down(core, {1}, {0, 2, 3})
    assert outcome.succeeded, outcome.detail
    assert core.runtimes.get(7).dead_committed == {1, 2}
    applies = cluster.named("apply")
    assert all(a[3] == (1, 2) for a in applies) and sorted(r for a in applies for r in a[6]) == [0, 3]
    assert any(e.name == "absorb" for e in strategy.txn.events)


async def test_absorption_that_leaves_no_survivor_fails_to_fallback() -> None:
    cluster = two_pods()
    core, _ = make_core(cluster)
    await assemble(core, cluster)
    cluster.set(1, DEAD)
    for r in (0, 2, 3):
        cluster.set(r, DEAD)
    _, outcome = await run_scale_down(core, {1}, {0, 2, 3})
    assert not outcome.succeeded and "no survivor" in outcome.detail
    assert not cluster.named("apply")
    assert all(not c[3] for c in cluster.named("finalize"))  # aborts only


async def test_waits_while_survivors_healthy_then_times_out_without_apply() -> None:
    cluster = two_pods()
    core, clock = make_core(cluster)
    await assemble(core, cluster)
    cluster.set(1, DEAD)
    strategy, outcome = await run_scale_down(core, {1}, {0, 2, 3})
    assert not outcome.succeeded and "not apply-ready within 30s" in outcome.detail
    assert not cluster.named("apply")
    assert FtPhase.WAITING_ENGINE_FAULT in [e.name for e in strategy.txn.events if e.kind == "phase"]
    assert clock.monotonic() >= 30.0
    assert {c[1] for c in cluster.named("finalize") if not c[3]} == set(cluster.pods)


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        (lambda c: c.fail.update({("apply", "127.0.0.3:1"): grpc.StatusCode.UNAVAILABLE}), "apply not accepted"),
        (lambda c: c.apply_refused.add(2), "apply not accepted by 127.0.0.3:1"),
        (lambda c: setattr(c.engines[2], "fail_on_apply", "insufficient redundancy"), "insufficient redundancy"),
        (lambda c: setattr(c.engines[2], "recover_after_polls", None), "not healthy after apply within 30s"),
    ],
)
async def test_engine_failure_paths_abort_and_fall_back(setup, message) -> None:
    cluster = two_pods()
    core, _ = make_core(cluster)
    await assemble(core, cluster)
    cluster.fault(dead={1}, unhealthy={0, 2, 3})
    setup(cluster)
    _, outcome = await run_scale_down(core, {1}, {0, 2, 3})
    assert not outcome.succeeded and message in outcome.detail
    assert outcome.fallback == "instance_reconfiguration"
    rt = core.runtimes.get(7)
    assert rt.dead_committed == frozenset() and message in (rt.last_error or "")
    assert len({a[1] for a in cluster.named("apply")}) <= 2 and len(cluster.named("apply")) <= 2  # never retried
    assert all(not c[3] for c in cluster.named("finalize"))
    assert not cluster.guard_holder


async def test_status_query_error_fails_the_round() -> None:
    cluster = two_pods()
    core, _ = make_core(cluster)
    await assemble(core, cluster)
    cluster.set(1, DEAD)
    cluster.fail[("status", "127.0.0.3:1")] = grpc.StatusCode.FAILED_PRECONDITION
    _, outcome = await run_scale_down(core, {1}, {0, 2, 3})
    assert not outcome.succeeded and "status to 127.0.0.3:1 failed" in outcome.detail


async def test_gate_refusal_records_reasons_and_sends_nothing() -> None:
    cluster = two_pods()
    core, _ = make_core(cluster)
    await assemble(core, cluster, redundant=0)
    cluster.set(1, DEAD)
    _, outcome = await run_scale_down(core, {1}, {0, 2, 3})
    assert not outcome.succeeded and "EXPERT_REDUNDANCY_REQUIRED" in outcome.detail
    assert core.runtimes.get(7).gate.reason_codes == ("EXPERT_REDUNDANCY_REQUIRED",)
    assert not cluster.calls


async def test_guard_conflict_fails_and_aborts_only_its_own() -> None:
    cluster = two_pods()
    cluster.guard_holder["127.0.0.3:1"] = "someone-else"
    core, _ = make_core(cluster)
    await assemble(core, cluster)
    cluster.set(1, DEAD)
    _, outcome = await run_scale_down(core, {1}, {0, 2, 3})
    assert not outcome.succeeded and "held by someone-else" in outcome.detail
    assert cluster.guard_holder == {"127.0.0.3:1": "someone-else"}  # the other transaction keeps its guard


async def test_post_commit_publish_failure_keeps_result_and_set_converges() -> None:
    cluster, coord = two_pods(), FakeCoordinator()
    core, _ = make_core(cluster, coordinator=coord)
    await assemble(core, cluster)
    cluster.fault(dead={1}, unhealthy={0, 2, 3})

    def coordinator_dies(poll: int) -> None:
        coord.down = poll >= 2  # after the drain

    cluster.on_status = coordinator_dies
    _, outcome = await run_scale_down(core, {1}, {0, 2, 3})
    assert outcome.succeeded
    rt = core.runtimes.get(7)
    assert rt.phase is FtPhase.SCALED_DOWN_RUNNING and rt.dead_committed == {1}
    assert not rt.serving_published and not rt.can_serve and "publish failed" in rt.last_error
    assert len(cluster.named("apply")) == 2
    coord.down = False
    await core.publish_all()
    assert rt.serving_published and rt.can_serve and rt.last_error is None
    assert coord.view == {7: [0, 2, 3]}


@pytest.mark.parametrize("scale_up", [False, True])
async def test_emptied_pod_stopped_once_only_with_scale_up(scale_up: bool) -> None:
    cluster = two_pods()
    core, _ = make_core(cluster, make_config(enable_dp_scale_up=scale_up))
    await assemble(core, cluster)
    cluster.set(0, DEAD)
    cluster.set(1, DEAD)
    cluster.set(2, UNHEALTHY)
    cluster.set(3, UNHEALTHY)
    cluster.fail[("stop_pod", "*")] = grpc.StatusCode.UNAVAILABLE
    _, outcome = await run_scale_down(core, {0, 1}, {2, 3})
    assert outcome.succeeded  # a failed stop never changes the result
    assert [c[1] for c in cluster.named("stop_pod")] == (["127.0.0.2:1"] if scale_up else [])


async def test_partly_emptied_pod_is_not_stopped() -> None:
    cluster = two_pods()
    core, _ = make_core(cluster, make_config(enable_dp_scale_up=True))
    await assemble(core, cluster)
    cluster.fault(dead={1}, unhealthy={0, 2, 3})
    assert (await run_scale_down(core, {1}, {0, 2, 3}))[1].succeeded
    assert not cluster.named("stop_pod")


async def test_dedupe_committed_candidates() -> None:
    cluster = two_pods()
    core, _ = make_core(cluster)
    await assemble(core, cluster)
    cluster.fault(dead={1}, unhealthy={0, 2, 3})
    assert (await run_scale_down(core, {1}, {0, 2, 3}))[1].succeeded
    calls = len(cluster.calls)
    strategy = DpScaleDownStrategy(core.deps, ScaleDownContext(7, (0, 1, 2, 3), frozenset(), frozenset({1}),
                                                               frozenset({0, 2, 3}), "instance_reconfiguration", 0.0))
    outcome = await strategy.run()
    assert outcome.succeeded and "already committed" in outcome.detail and len(cluster.calls) == calls


# ---- FaultManager ----------------------------------------------------------------------------------


async def drain_tasks(core) -> None:
    """Lets every running strategy end."""
    await turns_until(lambda: not any(core.faults.running(r.instance_id) for r in core.runtimes.all()), 200,
                      "every strategy ended")


async def test_fault_manager_complete_snapshot_runs_scale_down() -> None:
    cluster = two_pods()
    core, _ = make_core(cluster)
    await assemble(core, cluster)
    cluster.fault(dead={1}, unhealthy={0, 2, 3})
    core.faults.report_software(7, 1, EvidenceKind.DEAD, "executor died", core.clock.wall())
    await core.faults.evaluate_all()
    assert core.faults.running(7) is None  # incomplete: waits
    for r in (0, 2, 3):
        core.faults.report_software(7, r, EvidenceKind.UNHEALTHY, "peer failed", core.clock.wall())
    await core.faults.evaluate_all()
    assert isinstance(core.faults.running(7), DpScaleDownStrategy)
    await drain_tasks(core)
    assert core.runtimes.get(7).dead_committed == {1}
    assert not core.faults.evidence(7)  # superseded by the round's final observation


async def test_fault_manager_idle_death_times_out_to_reconfiguration() -> None:
    cluster = two_pods()
    core, clock = make_core(cluster)
    await assemble(core, cluster)
    core.faults.report_software(7, 1, EvidenceKind.ENGINE_DEAD, "exit -9", core.clock.wall())
    for _ in range(59):
        clock.advance(1.0)
        heartbeat_all(core, cluster, dead={1})
        await core.faults.evaluate_all()
    assert core.faults.running(7) is None and not cluster.calls
    clock.advance(1.0)
    heartbeat_all(core, cluster, dead={1})
    await core.faults.evaluate_all()
    await drain_tasks(core)
    names = [c[0] for c in cluster.calls]
    assert "apply" not in names and "guard" not in names
    assert names.count("stop_engines") == 2 and names.count("start_engines") == 2
    rt = core.runtimes.get(7)
    assert rt.phase is FtPhase.NORMAL and rt.alive_dp_ranks == [0, 1, 2, 3]


async def test_fault_manager_failed_round_falls_back_to_reconfiguration() -> None:
    cluster = two_pods()
    core, _ = make_core(cluster)
    await assemble(core, cluster)
    cluster.fault(dead={1}, unhealthy={0, 2, 3})
    cluster.apply_refused.add(0)
    for r, kind in ((1, EvidenceKind.DEAD), (0, EvidenceKind.UNHEALTHY), (2, EvidenceKind.UNHEALTHY), (3, EvidenceKind.UNHEALTHY)):
        core.faults.report_software(7, r, kind, "", core.clock.wall())
    await core.faults.evaluate_all()
    await drain_tasks(core)
    names = [c[0] for c in cluster.calls]
    assert names.count("apply") == 2
    assert names.index("start_engines") > names.index("apply")
    txns = core.timelines.transactions(7)
    assert [t.strategy for t in txns] == ["dp_scale_down", "instance_reconfiguration"]
    assert txns[0].outcome.startswith("failed") and txns[1].outcome == "succeeded"
    assert core.runtimes.get(7).phase is FtPhase.NORMAL


class FakeFastRecovery:
    """A fast-recovery plug-in whose applicability and result the test decides."""

    def __init__(self, applicable: bool, succeeds: bool) -> None:
        self.applicable, self.succeeds, self.started = applicable, succeeds, 0
        self.release = asyncio.Event()

    def is_applicable(self, facts) -> bool:
        return self.applicable

    def create(self, deps, facts) -> Strategy:
        instance_id = facts.instance_id
        plugin = self

        class _Fast(Strategy):
            name = "fast_recovery"
            priority = Priority.FAST_RECOVERY

            async def execute(self) -> Outcome:
                plugin.started += 1
                await plugin.release.wait()
                return Outcome(plugin.succeeds, "fast recovery " + ("ok" if plugin.succeeds else "failed"))

        return _Fast(deps, instance_id)


@pytest.mark.parametrize("succeeds", [True, False])
async def test_fast_recovery_is_not_preempted_and_its_failure_goes_to_reconfiguration(succeeds: bool) -> None:
    cluster = two_pods()
    fast = FakeFastRecovery(applicable=True, succeeds=succeeds)
    core, _ = make_core(cluster, fast_recovery=fast)
    await assemble(core, cluster)
    for r in range(4):
        core.faults.report_software(7, r, EvidenceKind.UNHEALTHY, "", core.clock.wall())
    await core.faults.evaluate_all()
    await asyncio.sleep(0)
    assert fast.started == 1
    # A DEAD arriving now would make a complete U+D, but fast recovery is never preempted by scale-down.
    core.faults.report_software(7, 1, EvidenceKind.DEAD, "", core.clock.wall())
    await core.faults.evaluate_all()
    assert core.faults.running(7).name == "fast_recovery"
    fast.release.set()
    await drain_tasks(core)
    names = [c[0] for c in cluster.calls]
    assert "apply" not in names and "guard" not in names
    assert ("start_engines" in names) is (not succeeds)


async def test_preemption_waits_for_abort_before_the_next_strategy() -> None:
    cluster = two_pods()
    core, _ = make_core(cluster)
    await assemble(core, cluster)
    cluster.set(1, DEAD)  # survivors stay healthy: the round keeps polling
    strategy = DpScaleDownStrategy(core.deps, scale_down_ctx(core, {1}, {0, 2, 3}))
    core.faults.center.start_strategy(7, strategy)
    for _ in range(20):
        await asyncio.sleep(0)
    assert cluster.named("guard")
    await core.faults.center.stop_running(7)
    assert strategy.is_finished() and core.faults.running(7) is None
    aborts = cluster.named("finalize")
    assert len(aborts) == 2 and all(not c[3] for c in aborts)
    assert not cluster.guard_holder
    await drain_tasks(core)


async def test_partial_loss_suppressed_in_transaction_window_not_when_running() -> None:
    cluster = two_pods()
    core, clock = make_core(cluster)
    await assemble(core, cluster)
    core.runtimes.set_phase(7, FtPhase.DECIDING)
    core.faults.observe_heartbeat(7, {2, 3}, {2, 3}, {2})
    clock.advance(11.0)
    loss = core.faults.intake.partial_loss
    grace = core.config.heartbeat_timeout_sec
    assert loss(7, FtPhase.DECIDING, frozenset(), clock.monotonic(), grace) == ""
    assert "ranks [3] missing" in loss(7, FtPhase.SCALED_DOWN_RUNNING, frozenset(), clock.monotonic(), grace)
    assert loss(7, FtPhase.SCALED_DOWN_RUNNING, frozenset({3}), clock.monotonic(), grace) == ""


async def test_restart_during_scaling_down_becomes_reconfiguring_without_apply() -> None:
    cluster = two_pods()
    store = MemoryRuntimeStore()
    core, _ = make_core(cluster, store=store)
    await assemble(core, cluster)
    for phase in (FtPhase.DECIDING, FtPhase.SCALING_DOWN):
        core.runtimes.set_phase(7, phase)
        await core.persister.persist(7)
    # A new controller on the same store.
    fresh = FakeCluster(pods=dict(cluster.pods))
    core2, _ = make_core(fresh, store=store)
    await core2.persister.restore(core2.clock)
    rt = core2.runtimes.get(7)
    assert rt.phase is FtPhase.RECONFIGURING and "restarted during SCALING_DOWN" in rt.last_error
    await core2.faults.evaluate_all()
    await drain_tasks(core2)
    names = [c[0] for c in fresh.calls]
    assert "apply" not in names and names.count("start_engines") == 2
    assert core2.runtimes.get(7).phase is FtPhase.NORMAL
    persisted = await store.load_all()
    assert persisted[0].phase == "NORMAL" and persisted[0].dead_committed == ()


async def test_retired_ranks_unknown_to_controller_force_fallback() -> None:
    cluster = two_pods()
    core, _ = make_core(cluster)
    await assemble(core, cluster)
    req = register_request(cluster, "127.0.0.2:1")
    req.retired_ids.append(1)
    await core.register(req)
    assert core.runtimes.get(7).phase is FtPhase.RECONFIGURING


async def test_retired_ranks_of_a_pod_that_registered_before_assembly_are_decided_at_assembly() -> None:
    """The pod holding the retired rank registers first; the instance must not come
    up NORMAL and publish a stopped rank."""
    cluster, coord = two_pods(), FakeCoordinator()
    core, _ = make_core(cluster, coordinator=coord)
    first = register_request(cluster, "127.0.0.2:1")
    first.retired_ids.append(1)
    await core.register(first)
    assert core.runtimes.find(7) is None  # not assembled yet
    await core.register(register_request(cluster, "127.0.0.3:1"))
    rt = core.runtimes.get(7)
    assert rt.phase is FtPhase.RECONFIGURING and "pod 127.0.0.2 retired ranks [1]" in rt.last_error
    assert 1 not in coord.view.get(7, [])


async def test_stale_writer_cannot_overwrite() -> None:
    cluster = two_pods()
    store = MemoryRuntimeStore()
    core_a, _ = make_core(cluster, store=store)
    core_b, _ = make_core(FakeCluster(pods=dict(cluster.pods)), store=store)
    await assemble(core_a, cluster)
    await core_b.persister.restore(core_b.clock)
    core_b.runtimes.set_phase(7, FtPhase.DECIDING)
    await core_b.persister.persist(7)
    core_a.runtimes.set_phase(7, FtPhase.RECONFIGURING)
    from motor.controller.persistence import StaleWriteError

    with pytest.raises(StaleWriteError):
        await core_a.persister.persist(7)


def test_poll_delay_doubles_from_50ms_and_never_exceeds_the_interval() -> None:
    from motor.controller.fault_tolerance.engine_states import poll_delay_sec

    assert [poll_delay_sec(n, 1.0) for n in range(6)] == [0.05, 0.1, 0.2, 0.4, 0.8, 1.0]
    assert poll_delay_sec(100, 1.0) == 1.0
    assert poll_delay_sec(0, 0.01) == 0.01


async def test_inconsistent_capability_fails_closed_at_assembly_and_in_the_round() -> None:
    cluster = two_pods()
    core, _ = make_core(cluster)
    await core.register(register_request(cluster, "127.0.0.2:1", redundant=8))
    await core.register(register_request(cluster, "127.0.0.3:1", redundant=4))
    gate = core.runtimes.get(7).gate
    assert not gate.allowed and "EXPERT_REDUNDANCY_REQUIRED" in gate.reason_codes
    cluster.set(1, DEAD)
    _, outcome = await run_scale_down(core, {1}, {0, 2, 3})
    assert not outcome.succeeded and "pods reported different FT capabilities" in outcome.detail
    assert not cluster.calls


async def test_missing_capability_fails_closed() -> None:
    cluster = two_pods()
    core, _ = make_core(cluster)
    await core.register(register_request(cluster, "127.0.0.2:1"))
    await core.register(register_request(cluster, "127.0.0.3:1", capability=False))
    _, outcome = await run_scale_down(core, {1}, {0, 2, 3})
    assert not outcome.succeeded and "reported no FT capability" in outcome.detail


DIAGNOSING = common_pb2.ENGINE_HEALTH_DIAGNOSING


async def test_diagnosing_survivor_is_waited_for_before_apply_not_a_failure() -> None:
    cluster = two_pods()
    core, _ = make_core(cluster)
    await assemble(core, cluster)
    cluster.fault(dead={1}, unhealthy={0, 2})
    cluster.set(3, DIAGNOSING)

    def settle_after_two_polls(polls: int) -> None:
        if polls == 3:
            cluster.set(3, UNHEALTHY)

    cluster.on_status = settle_after_two_polls
    strategy, outcome = await run_scale_down(core, {1}, {0, 2})
    assert outcome.succeeded, outcome.detail
    assert len(cluster.named("apply")) == 2
    seen = [s.status for e in strategy.txn.events for s in e.engine_statuses if s.id == 3]
    assert seen[0] == DIAGNOSING and UNHEALTHY in seen


async def test_diagnosing_after_apply_waits_for_the_engine_outcome() -> None:
    cluster = two_pods()
    core, _ = make_core(cluster)
    await assemble(core, cluster)
    cluster.fault(dead={1}, unhealthy={0, 2, 3})
    cluster.engines[2].recover_after_polls = 3
    applied = {"polls": None}

    def diagnose_right_after_apply(polls: int) -> None:
        if cluster.named("apply") and applied["polls"] is None:
            applied["polls"] = polls
            cluster.set(2, DIAGNOSING)

    cluster.on_status = diagnose_right_after_apply
    _, outcome = await run_scale_down(core, {1}, {0, 2, 3})
    assert outcome.succeeded, outcome.detail
    assert core.runtimes.get(7).dead_committed == {1}


async def test_survivor_dead_after_apply_fails_the_round_with_the_engine_message() -> None:
    cluster = two_pods()
    core, _ = make_core(cluster)
    await assemble(core, cluster)
    cluster.fault(dead={1}, unhealthy={0, 2, 3})
    for r in (0, 2, 3):
        cluster.engines[r].recover_after_polls = None

    def vote_failed(polls: int) -> None:
        if cluster.named("apply"):
            for r in (0, 2, 3):
                cluster.engines[r].polls_since_apply = -1
                cluster.engines[r].status, cluster.engines[r].ft_state = DEAD, NONE
                cluster.engines[r].fault_info = "Recovery failed; full restart required"

    cluster.on_status = vote_failed
    _, outcome = await run_scale_down(core, {1}, {0, 2, 3})
    assert not outcome.succeeded
    assert len(cluster.named("apply")) == 2 and not [c for c in cluster.named("finalize") if c[3]]
    assert "Recovery failed; full restart required" in core.runtimes.get(7).last_error
    assert core.runtimes.get(7).dead_committed == frozenset()


async def test_apply_skew_is_recorded_from_the_send_times_of_every_survivor() -> None:
    cluster = two_pods()
    core, _ = make_core(cluster)
    await assemble(core, cluster)
    cluster.fault(dead={1}, unhealthy={0, 2, 3})
    cluster.apply_sent_at = {0: 1000.0, 2: 1000.25, 3: 1000.5}
    strategy, outcome = await run_scale_down(core, {1}, {0, 2, 3})
    assert outcome.succeeded, outcome.detail
    skew = next(e for e in strategy.txn.events if e.name == "apply_skew")
    assert skew.skew_sec == pytest.approx(0.5) and list(skew.endpoint_ids) == [0, 2, 3]


@pytest.mark.parametrize("stray", [[3], [0]])
async def test_status_entries_for_ids_not_asked_are_a_protocol_error(stray: list[int]) -> None:
    """A stray entry (another pod's rank, or a duplicate) fails the round; a stray
    DEAD is never absorbed."""
    cluster = two_pods()
    core, _ = make_core(cluster)
    await assemble(core, cluster)
    cluster.fault(dead={1}, unhealthy={0, 2, 3})
    cluster.engines[3].status = DEAD if stray == [3] else UNHEALTHY
    cluster.extra_status = {"127.0.0.2:1": stray}
    strategy, outcome = await run_scale_down(core, {1}, {0, 2, 3})
    assert not outcome.succeeded and "protocol error" in outcome.detail and "asked for [0]" in outcome.detail
    assert not cluster.named("apply") and core.runtimes.get(7).dead_committed == frozenset()


async def test_clock_skewed_nodemanager_evidence_is_superseded_after_a_round() -> None:
    """A NodeManager whose wall clock runs an hour ahead; the Controller compares
    its own receipt times, so the round's last status read supersedes the reports."""
    cluster = two_pods()
    core, _ = make_core(cluster)
    await assemble(core, cluster)
    cluster.fault(dead={1}, unhealthy={0, 2, 3})
    ahead = core.clock.wall() + 3600.0
    for r in range(4):
        core.faults.report_software(7, r, EvidenceKind.DEAD if r == 1 else EvidenceKind.UNHEALTHY, "", ahead)
    await core.faults.evaluate_all()
    await drain_tasks(core)
    assert core.runtimes.get(7).dead_committed == {1}
    assert core.faults.evidence(7) == {}
    heartbeat_all(core, cluster)
    await core.faults.evaluate_all()
    assert core.faults.running(7) is None and [t.strategy for t in core.timelines.transactions(7)] == ["dp_scale_down"]


async def test_heartbeat_reporting_a_committed_rank_alive_breaks_the_exact_set() -> None:
    """The RFC's heartbeat contract is an exact set. A committed rank reported alive
    is an inconsistency: last_error says so at once, and if it outlasts the heartbeat grace the
    instance is reconfigured like a partial loss."""
    cluster = two_pods()
    core, clock = make_core(cluster)
    await assemble(core, cluster)
    cluster.fault(dead={1}, unhealthy={0, 2, 3})
    await run_scale_down(core, {1}, {0, 2, 3})
    assert core.runtimes.get(7).dead_committed == {1}
    core.heartbeat(controller_pb2.HeartbeatRequest(pod_ip="127.0.0.2", instance_id=7,
                                                   alive_endpoint_ids=[0, 1], seq=1))
    assert "reports ranks [1] alive" in core.runtimes.get(7).last_error
    await core.faults.evaluate_all()
    assert core.faults.running(7) is None  # within the grace
    core.heartbeat(controller_pb2.HeartbeatRequest(pod_ip="127.0.0.2", instance_id=7,
                                                   alive_endpoint_ids=[0], seq=1))
    assert core.runtimes.get(7).last_error is None  # consistent again: a stale heartbeat is forgiven
    core.heartbeat(controller_pb2.HeartbeatRequest(pod_ip="127.0.0.2", instance_id=7,
                                                   alive_endpoint_ids=[0, 1], seq=1))
    clock.advance(core.config.heartbeat_timeout_sec)
    core.heartbeat(controller_pb2.HeartbeatRequest(pod_ip="127.0.0.2", instance_id=7,
                                                   alive_endpoint_ids=[0, 1], seq=2))
    core.heartbeat(controller_pb2.HeartbeatRequest(pod_ip="127.0.0.3", instance_id=7,
                                                   alive_endpoint_ids=[2, 3], seq=2))
    await core.faults.evaluate_all()
    running = core.faults.running(7)
    assert running is not None and running.name == "instance_reconfiguration"
    assert "exact-set broken" in running.reason
    await drain_tasks(core)


async def test_failed_reconfiguration_retries_are_bounded_with_backoff_and_surface_in_status() -> None:
    """Retried after check_interval, doubling, at most reconfiguration_max_attempts;
    then the instance waits (status says so) until one of its pods registers again."""
    cluster = two_pods()
    config = make_config()
    core, clock = make_core(cluster, config=config)
    await assemble(core, cluster)
    cluster.fail[("start_engines", "*")] = grpc.StatusCode.UNAVAILABLE
    for r in range(4):
        core.faults.report_software(7, r, EvidenceKind.DEAD, "", core.clock.wall())
    interval = config.fault_tolerance_config.strategy_center_check_interval
    starts: list[float] = []
    for _ in range(40):
        heartbeat_all(core, cluster)
        await core.faults.evaluate_all()
        if core.faults.running(7) is not None:
            starts.append(clock.monotonic())
            await drain_tasks(core)
        clock.advance(interval / 2)
    rt = core.runtimes.get(7)
    assert len(starts) == config.reconfiguration_max_attempts == rt.reconfiguration_attempts
    gaps = [b - a for a, b in zip(starts, starts[1:])]
    assert gaps == sorted(gaps) and gaps[-1] >= 4 * gaps[0]  # doubling backoff
    assert rt.reconfiguration_gave_up and "gave up after 5 attempts" in rt.last_error
    assert rt.phase is FtPhase.RECONFIGURING
    del cluster.fail[("start_engines", "*")]
    await core.register(register_request(cluster, "127.0.0.2:1"))
    heartbeat_all(core, cluster)
    await core.faults.evaluate_all()
    await drain_tasks(core)
    rt = core.runtimes.get(7)
    assert rt.phase is FtPhase.NORMAL and rt.reconfiguration_attempts == 0 and not rt.reconfiguration_gave_up


async def test_drain_failure_is_recorded_and_the_round_still_commits() -> None:
    """Decision: a failed DEL does not fail the round (see Strategy.drain)."""
    cluster, coord = two_pods(), FakeCoordinator()
    core, _ = make_core(cluster, coordinator=coord)
    await assemble(core, cluster)
    coord.refuse_del = True
    cluster.fault(dead={1}, unhealthy={0, 2, 3})
    strategy, outcome = await run_scale_down(core, {1}, {0, 2, 3})
    assert outcome.succeeded, outcome.detail
    drain = next(e for e in strategy.txn.events if e.name == "drain")
    assert "injected DEL failure" in drain.error
    assert len(cluster.named("apply")) == 2 and coord.view == {7: [0, 2, 3]}
    assert core.runtimes.get(7).serving_published


async def test_no_engine_relaunch_fallback_a_rebuild_restarts_every_original_rank_and_clears_history() -> None:
    """Decision: after a committed round, the fallback is the whole rebuild: every
    original rank restarts, dead_committed is cleared and all ranks are published again."""
    cluster, coord = two_pods(), FakeCoordinator()
    core, _ = make_core(cluster, coordinator=coord)
    await assemble(core, cluster)
    cluster.fault(dead={1}, unhealthy={0, 2, 3})
    await run_scale_down(core, {1}, {0, 2, 3})
    assert core.runtimes.get(7).dead_committed == {1} and coord.view == {7: [0, 2, 3]}
    for r in (0, 2, 3):
        core.faults.report_software(7, r, EvidenceKind.DEAD, "", core.clock.wall())
    await core.faults.evaluate_all()
    await drain_tasks(core)
    rt = core.runtimes.get(7)
    assert [c[0] for c in cluster.calls].count("start_engines") == 2
    assert rt.phase is FtPhase.NORMAL and rt.dead_committed == frozenset() and coord.view == {7: [0, 1, 2, 3]}


async def test_periodic_set_right_after_the_success_add_never_withdraws_the_survivors() -> None:
    """A SET waiting on the publication lock while the round's ADD is sent runs
    while the strategy's task is still finishing; it must keep the survivors it just published."""
    cluster, coord = two_pods(), FakeCoordinator()
    core, _ = make_core(cluster, coordinator=coord)
    await assemble(core, cluster)
    sets: list[asyncio.Task] = []

    def set_during_add(event: str) -> None:
        if event == "ADD" and core.faults.running(7) is not None and not sets:
            sets.append(asyncio.get_running_loop().create_task(core.publish_all()))

    coord.on_refresh = set_during_add
    cluster.fault(dead={1}, unhealthy={0, 2, 3})
    report = [(r, EvidenceKind.DEAD if r == 1 else EvidenceKind.UNHEALTHY) for r in range(4)]
    for r, kind in report:
        core.faults.report_software(7, r, kind, "", core.clock.wall())
    await core.faults.evaluate_all()
    await drain_tasks(core)
    await asyncio.gather(*sets)
    assert sets and coord.events[-1][0] == "SET"
    assert coord.view == {7: [0, 2, 3]}
    assert core.runtimes.get(7).can_serve


async def test_can_serve_follows_what_the_coordinator_acknowledged_in_a_set() -> None:
    cluster, coord = two_pods(), FakeCoordinator()
    core, _ = make_core(cluster, coordinator=coord)
    await assemble(core, cluster)
    assert core.runtimes.get(7).can_serve
    core.runtimes.get(7).phase = FtPhase.RECONFIGURING  # e.g. restored from etcd mid-recovery
    await core.publish_all()
    assert coord.view == {} and not core.runtimes.get(7).serving_published and not core.runtimes.get(7).can_serve


@pytest.mark.parametrize(("dead", "want"), [({1}, {(0, 31001)}), ({0, 1}, {(2, 42002)})])
async def test_every_apply_of_a_round_carries_the_store_port_of_the_new_masters_pod(dead, want) -> None:
    """Pods configured with different store port bases; the Controller chooses the
    round's port from the new master's NodeManager and every apply carries that one."""
    cluster = two_pods()
    core, _ = make_core(cluster)
    await core.register(register_request(cluster, "127.0.0.2:1", store_port_base=31000))
    await core.register(register_request(cluster, "127.0.0.3:1", store_port_base=42000))
    cluster.fault(dead=dead, unhealthy={0, 1, 2, 3} - dead)
    _, outcome = await run_scale_down(core, dead, {0, 1, 2, 3} - dead)
    assert outcome.succeeded, outcome.detail
    applies = cluster.named("apply")
    assert {(a[5], a[7]) for a in applies} == want and len(applies) == (2 if dead == {1} else 1)
    restored = core.registry.get(7).topology()
    assert sorted(p.dp_store_port_base for p in restored.pods) == [31000, 42000]


async def test_a_round_slower_than_the_guard_lease_renews_it_and_commits_on_a_live_lease() -> None:
    """The NodeManagers refuse finalize(commit) on an expired lease; the Controller
    renews the guard (same request_id) while the round runs."""
    cluster = two_pods()
    core, clock = make_core(cluster)
    await assemble(core, cluster)
    cluster.fault(dead={1}, unhealthy={0, 2, 3})
    lease = core.config.fault_tolerance_config.guard_lease_sec
    slow = {"done": False}

    def slow_apply() -> None:
        if not slow["done"]:
            slow["done"] = True
            clock.advance(lease + 1.0)  # one NodeManager took longer than the whole lease

    cluster.on_apply = slow_apply
    strategy, outcome = await run_scale_down(core, {1}, {0, 2, 3})
    assert outcome.succeeded, outcome.detail
    renewals = [e for e in strategy.txn.events if e.name == "guard" and e.detail == "renew"]
    assert len(renewals) == 2 and all(e.lease_sec == lease for e in renewals)
    assert len([c for c in cluster.named("finalize") if c[3]]) == 2


async def test_one_nodemanager_fails_finalize_commit_while_the_other_committed() -> None:
    """The vendor's half-applied defect. Pod .2 retires rank 1, pod .3 refuses
    its commit: the Controller does not commit, falls back to the whole rebuild, and no publication
    ever routes to a retired rank nor leaves a serving rank retired."""
    cluster, coord = two_pods(), FakeCoordinator()
    core, _ = make_core(cluster, coordinator=coord)
    await assemble(core, cluster)
    violations: list[str] = []

    def check_publication(event: str) -> None:
        retired = set().union(*cluster.retired.values()) if cluster.retired else set()
        routed = set(coord.view.get(7, []))
        if routed & retired:
            violations.append(f"{event}: routes to retired {sorted(routed & retired)}")

    coord.on_refresh = check_publication
    cluster.fail[("finalize", "127.0.0.3:1")] = grpc.StatusCode.UNAVAILABLE
    cluster.fault(dead={1}, unhealthy={0, 2, 3})
    for r in range(4):
        core.faults.report_software(7, r, EvidenceKind.DEAD if r == 1 else EvidenceKind.UNHEALTHY, "", core.clock.wall())
    await core.faults.evaluate_all()
    await drain_tasks(core)
    del cluster.fail[("finalize", "127.0.0.3:1")]
    txns = core.timelines.transactions(7)
    assert [t.strategy for t in txns] == ["dp_scale_down", "instance_reconfiguration"]
    assert txns[0].outcome.startswith("failed") and txns[1].outcome == "succeeded"
    assert not violations
    rt = core.runtimes.get(7)
    assert rt.phase is FtPhase.NORMAL and rt.dead_committed == frozenset()
    assert not cluster.retired.get("127.0.0.2:1") and coord.view == {7: [0, 1, 2, 3]}


async def test_survivors_healthy_after_apply_are_not_read_again() -> None:
    cluster = two_pods()
    core, _ = make_core(cluster)
    await assemble(core, cluster)
    cluster.fault(dead={1}, unhealthy={0, 2, 3})
    cluster.engines[3].recover_after_polls = 3  # ranks 0 and 2 are healthy at the second poll, 3 later
    _, outcome = await run_scale_down(core, {1}, {0, 2, 3})
    assert outcome.succeeded, outcome.detail
    after_apply = cluster.calls[min(i for i, c in enumerate(cluster.calls) if c[0] == "apply") + 1:]
    reads = [r for c in after_apply if c[0] == "status" for r in c[2]]
    assert reads.count(3) > reads.count(0) and reads.count(0) == reads.count(2) == 2, reads


@pytest.mark.parametrize("long_poll", [True, False])
async def test_status_polls_are_long_polls_that_wait_out_what_the_verdicts_call_wait(long_poll: bool) -> None:
    """Before apply the NodeManagers are asked to wait out the apply-ready WAIT states, after it the
    recovery WAIT states, for poll_interval_sec. A NodeManager that held its answer is
    asked again at once; one that answered at once (no long poll) gets the backoff delay first."""
    from motor.controller.fault_tolerance.engine_states import APPLY_WAIT_STATES, RECOVERY_WAIT_STATES

    cluster = two_pods()
    cluster.long_poll = long_poll
    core, _ = make_core(cluster)
    await assemble(core, cluster)
    cluster.fault(dead={1}, unhealthy={0, 2, 3})
    cluster.engines[3].recover_after_polls = 3
    _, outcome = await run_scale_down(core, {1}, {0, 2, 3})
    assert outcome.succeeded, outcome.detail
    statuses = [i for i, c in enumerate(cluster.calls) if c[0] == "status"]
    first_apply = min(i for i, c in enumerate(cluster.calls) if c[0] == "apply")
    before = sum(1 for i in statuses if i < first_apply)
    asked = cluster.status_settles
    assert [w for w, _, _ in asked[:before]] == [APPLY_WAIT_STATES] * before
    assert [w for w, _, _ in asked[before:]] == [RECOVERY_WAIT_STATES] * (len(asked) - before)
    assert {s for _, s, _ in asked} == {1.0}  # poll_interval_sec, well inside the 30 s deadline
    # After apply rank 3 is the one still rebuilding; the spacing of the polls that read it, on the manual clock:
    at = [t for i, (_, _, t) in zip(statuses[before:], asked[before:], strict=True) if 3 in cluster.calls[i][2]]
    gaps = [round(b - a, 6) for a, b in zip(at, at[1:], strict=False)]
    assert gaps, asked
    if long_poll:
        assert gaps == [1.0] * len(gaps)  # the hold, and nothing added
    else:
        assert gaps == [round(0.05 * 2**n, 6) for n in range(len(gaps))]  # the backoff after each immediate answer
