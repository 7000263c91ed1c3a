"""RFC §4.4 hardware rules in the FaultManager: the 5-second correlation window, committed ranks,
unmappable faults, software-first, with in-memory peers and a manual clock."""

from __future__ import annotations

import grpc

from gen.motor.v1 import controller_pb2
from motor.controller.fault_tolerance.evidence import EvidenceKind
from motor.controller.fault_tolerance.strategy.dp_scale_down import DpScaleDownStrategy
from motor.controller.hardware.model import HardwareFault
from motor.controller.model.runtime import FtPhase
from motor.testing.waits import turns_until

from .controller_fakes import (
    DEAD,
    HEALTHY,
    UNHEALTHY,
    FakeCoordinator,
    assemble,
    heartbeat_all,
    make_config,
    make_core,
    settle,
    two_pods,
)

L2, L5 = 2, 5


def card(node: str, npu: str, level: int = L5, code: str = "80E18402", t: float = 1.0) -> HardwareFault:
    return HardwareFault(node_name=node, npu_name=npu, fault_codes=(code,), level=level, fault_time_unix_sec=t,
                         source="test")


async def reconfiguration_cause(core) -> int:
    """Evaluates, lets the strategy end; the last transaction is a whole-instance reconfiguration:
    its decision's fallback cause."""
    await core.faults.evaluate_all()
    await settle(core)
    txn = core.timelines.transactions(7)[-1]
    assert txn.strategy == "instance_reconfiguration"
    return next(e for e in txn.events if e.event_kind == controller_pb2.TIMELINE_EVENT_KIND_DECISION).fallback_cause


async def reconfigured_at_the_windows_end(core, cluster, clock) -> None:
    """Nothing acts within the 5 s correlation window; at its end, a reconfiguration for no match."""
    for _ in range(4):
        clock.advance(1.0)
        heartbeat_all(core, cluster)
        await core.faults.evaluate_all()
    assert core.faults.running(7) is None
    clock.advance(1.0)
    heartbeat_all(core, cluster)
    assert await reconfiguration_cause(core) == controller_pb2.FALLBACK_CAUSE_HARDWARE_NOT_CORRELATED


def report_complete_snapshot(core, dead: set[int]) -> None:
    for r in range(4):
        kind = EvidenceKind.DEAD if r in dead else EvidenceKind.UNHEALTHY
        core.faults.report_software(7, r, kind, "", core.clock.wall())


async def test_hardware_first_then_matching_snapshot_scales_down_with_software_dead_set() -> None:
    cluster = two_pods()
    core, clock = make_core(cluster)
    await assemble(core, cluster)
    # Rank 1 is the second card on node-127.0.0.2.
    notes = core.faults.report_hardware([card("node-127.0.0.2", "Ascend910-1")])
    assert "waiting up to 5s" in notes[0]
    await core.faults.evaluate_all()
    assert core.faults.running(7) is None and not cluster.calls
    clock.advance(2.0)
    cluster.set(1, DEAD)
    for r in (0, 2, 3):
        cluster.set(r, UNHEALTHY)
    report_complete_snapshot(core, {1})
    await core.faults.evaluate_all()
    strategy = core.faults.running(7)
    assert isinstance(strategy, DpScaleDownStrategy)
    assert strategy.ctx.dead == {1} and strategy.ctx.hardware_ranks == {1}
    await settle(core)
    assert core.runtimes.get(7).dead_committed == {1}


async def test_hardware_first_without_ft_perception_reconfigures_after_the_window() -> None:
    cluster = two_pods()
    core, clock = make_core(cluster)
    await assemble(core, cluster)
    core.faults.report_hardware([card("node-127.0.0.3", "Ascend910-0")])
    await reconfigured_at_the_windows_end(core, cluster, clock)
    names = [c[0] for c in cluster.calls]
    assert "apply" not in names and names.count("start_engines") == 2


async def test_snapshot_without_the_hardware_rank_is_not_a_match() -> None:
    cluster = two_pods()
    core, clock = make_core(cluster)
    await assemble(core, cluster)
    core.faults.report_hardware([card("node-127.0.0.3", "Ascend910-1")])  # rank 3
    report_complete_snapshot(core, {1})  # but software says rank 1 died
    await core.faults.evaluate_all()
    assert core.faults.running(7) is None
    clock.advance(5.0)
    heartbeat_all(core, cluster)
    await core.faults.evaluate_all()
    await settle(core)
    assert core.timelines.transactions(7)[-1].strategy == "instance_reconfiguration"
    assert not [c for c in cluster.calls if c[0] == "apply"]


async def test_hardware_on_a_committed_rank_is_marked_handled() -> None:
    cluster = two_pods()
    core, _ = make_core(cluster)
    await assemble(core, cluster)
    core.runtimes.commit_round(7, [1])
    notes = core.faults.report_hardware([card("node-127.0.0.2", "Ascend910-1")])
    assert "already committed dead, handled" in notes[0]
    await core.faults.evaluate_all()
    assert core.faults.running(7) is None and not cluster.calls


async def test_unknown_card_format_takes_the_original_strategy_at_once() -> None:
    cluster = two_pods()
    core, _ = make_core(cluster)
    await assemble(core, cluster)
    notes = core.faults.report_hardware([card("node-127.0.0.2", "npu-weird-1")])
    assert "whole-instance reconfiguration" in notes[0]
    await core.faults.evaluate_all()
    await settle(core)
    assert [c[0] for c in cluster.calls].count("start_engines") == 2


async def test_low_levels_and_foreign_nodes_are_only_logged() -> None:
    cluster = two_pods()
    core, _ = make_core(cluster)
    await assemble(core, cluster)
    notes = core.faults.report_hardware([card("node-127.0.0.2", "Ascend910-1", level=L2),
                                         card("node-elsewhere", "Ascend910-1")])
    assert "below L4" in notes[0]
    await core.faults.evaluate_all()
    assert core.faults.running(7) is None and not cluster.calls
    assert not core.faults.correlation.pending(7)


async def test_software_first_does_not_wait_for_hardware() -> None:
    cluster = two_pods()
    core, _ = make_core(cluster)
    await assemble(core, cluster)
    core.faults.report_software(7, 1, EvidenceKind.DEAD, "", core.clock.wall())
    notes = core.faults.report_hardware([card("node-127.0.0.2", "Ascend910-1")])
    assert "software evidence first" in notes[0]
    assert not core.faults.correlation.deadlines()
    assert [p.matched for p in core.faults.correlation.pending(7)] == [True]


async def test_whole_node_fault_maps_every_rank_on_the_node_and_duplicates_are_dropped() -> None:
    cluster = two_pods()
    core, _ = make_core(cluster)
    await assemble(core, cluster)
    fault = card("node-127.0.0.3", "")
    core.faults.report_hardware([fault])
    assert core.faults.correlation.pending(7)[0].ranks == {2, 3}
    assert "already seen" in core.faults.report_hardware([fault])[0]


async def test_feature_off_hardware_fault_reconfigures() -> None:
    cluster = two_pods()
    core2, _ = make_core(cluster, config=make_config(enable_dp_scale_down=False))
    await assemble(core2, cluster)
    assert core2.runtimes.get(7).phase is FtPhase.DISABLED
    notes = core2.faults.report_hardware([card("node-127.0.0.2", "Ascend910-1")])
    assert "scale-down disabled" in notes[0]
    await core2.faults.evaluate_all()
    await settle(core2)
    assert [c[0] for c in cluster.calls].count("start_engines") == 2


def commit_rank(core, rank: int) -> None:
    for phase in (FtPhase.DECIDING, FtPhase.SCALING_DOWN, FtPhase.POST_SCALE_CLEANUP):
        core.runtimes.set_phase(7, phase)
    core.runtimes.commit_round(7, [rank])
    core.runtimes.set_phase(7, FtPhase.SCALED_DOWN_RUNNING)


async def test_node_fault_on_partly_committed_node_matches_on_the_uncommitted_ranks_only() -> None:
    """Node fault → {2, 3} after 3 was committed; only rank 2 takes part."""
    cluster = two_pods()
    core, clock = make_core(cluster)
    await assemble(core, cluster)
    commit_rank(core, 3)
    notes = core.faults.report_hardware([card("node-127.0.0.3", "")])
    assert core.faults.correlation.pending(7)[0].ranks == {2}, notes
    clock.advance(1.0)
    cluster.fault(dead={2}, unhealthy={0, 1})
    for r, kind in ((2, EvidenceKind.DEAD), (0, EvidenceKind.UNHEALTHY), (1, EvidenceKind.UNHEALTHY)):
        core.faults.report_software(7, r, kind, "", core.clock.wall())
    await core.faults.evaluate_all()
    strategy = core.faults.running(7)
    assert isinstance(strategy, DpScaleDownStrategy), core.timelines.transactions(7)[-1].strategy
    assert strategy.ctx.dead == {2} and strategy.ctx.hardware_ranks == {2}
    await settle(core)
    assert core.runtimes.get(7).dead_committed == {2, 3}


async def test_node_fault_whose_ranks_are_all_committed_is_handled() -> None:
    cluster = two_pods()
    core, _ = make_core(cluster)
    await assemble(core, cluster)
    commit_rank(core, 3)
    core.runtimes.set_phase(7, FtPhase.DECIDING)
    core.runtimes.set_phase(7, FtPhase.SCALING_DOWN)
    core.runtimes.set_phase(7, FtPhase.POST_SCALE_CLEANUP)
    core.runtimes.commit_round(7, [2])
    core.runtimes.set_phase(7, FtPhase.SCALED_DOWN_RUNNING)
    notes = core.faults.report_hardware([card("node-127.0.0.3", "")])
    assert "already committed dead, handled" in notes[0] and not core.faults.correlation.pending(7)


async def test_hardware_first_then_all_unhealthy_waits_for_the_collection_timeout_not_the_window() -> None:
    """All-UNHEALTHY within the window goes to is_applicable (false here) and then
    waits for a DEAD up to the software collection timeout."""
    cluster = two_pods()
    core, clock = make_core(cluster)
    await assemble(core, cluster)
    core.faults.report_hardware([card("node-127.0.0.2", "Ascend910-1")])
    clock.advance(1.0)
    for r in range(4):
        core.faults.report_software(7, r, EvidenceKind.UNHEALTHY, "", core.clock.wall())
    await core.faults.evaluate_all()
    clock.advance(10.0)  # well past the 5 s window
    heartbeat_all(core, cluster)
    await core.faults.evaluate_all()
    assert core.faults.running(7) is None and not core.timelines.transactions(7)
    clock.advance(core.config.fault_tolerance_config.software_status_collection_timeout_sec)
    heartbeat_all(core, cluster)
    assert await reconfiguration_cause(core) == controller_pb2.FALLBACK_CAUSE_ALL_UNHEALTHY_TIMEOUT


async def test_hardware_first_then_its_dead_in_an_incomplete_snapshot_reconfigures_when_the_window_ends() -> None:
    """The hardware rank's DEAD is in but the survivors' UNHEALTHY are not: no matching FT snapshot
    within the correlation window, so the window (not the collection timeout) decides."""
    cluster = two_pods()
    core, clock = make_core(cluster)
    await assemble(core, cluster)
    window = core.config.fault_tolerance_config.hardware_ft_correlation_window_sec
    core.faults.report_hardware([card("node-127.0.0.2", "Ascend910-1")])
    cluster.fault(dead={1}, unhealthy={0, 2, 3})
    core.faults.report_software(7, 1, EvidenceKind.DEAD, "", core.clock.wall())
    core.faults.report_software(7, 0, EvidenceKind.UNHEALTHY, "", core.clock.wall())
    await core.faults.evaluate_all()
    assert core.faults.running(7) is None
    clock.advance(window / 2)
    heartbeat_all(core, cluster, dead={1})
    await core.faults.evaluate_all()
    assert core.faults.running(7) is None and not core.timelines.transactions(7)
    clock.advance(window / 2)
    heartbeat_all(core, cluster, dead={1})
    assert await reconfiguration_cause(core) == controller_pb2.FALLBACK_CAUSE_HARDWARE_NOT_CORRELATED
    assert not cluster.named("apply")


async def test_hardware_first_then_its_dead_and_the_survivors_within_the_window_scale_down() -> None:
    cluster = two_pods()
    core, clock = make_core(cluster)
    await assemble(core, cluster)
    core.faults.report_hardware([card("node-127.0.0.2", "Ascend910-1")])
    cluster.fault(dead={1}, unhealthy={0, 2, 3})
    core.faults.report_software(7, 1, EvidenceKind.DEAD, "", core.clock.wall())
    core.faults.report_software(7, 0, EvidenceKind.UNHEALTHY, "", core.clock.wall())
    await core.faults.evaluate_all()
    clock.advance(core.config.fault_tolerance_config.hardware_ft_correlation_window_sec / 2)
    heartbeat_all(core, cluster, dead={1})
    for r in (2, 3):
        core.faults.report_software(7, r, EvidenceKind.UNHEALTHY, "", core.clock.wall())
    await core.faults.evaluate_all()
    strategy = core.faults.running(7)
    assert isinstance(strategy, DpScaleDownStrategy) and strategy.ctx.hardware_ranks == {1}
    await settle(core)
    assert core.runtimes.get(7).dead_committed == {1}


async def test_hardware_fault_on_a_survivor_during_a_round_fails_it_and_is_not_dropped() -> None:
    """An L5 on a survivor while the round runs is evidence for the round."""
    cluster = two_pods()
    core, _ = make_core(cluster)
    await assemble(core, cluster)
    cluster.fault(dead={1}, unhealthy={0, 2})  # rank 3 still healthy: the round waits for it
    notes: list[str] = []

    def fault_mid_round(polls: int) -> None:
        if polls == 2:
            notes.extend(core.faults.report_hardware([card("node-127.0.0.3", "Ascend910-1")]))  # rank 3

    cluster.on_status = fault_mid_round
    report_complete_snapshot(core, {1})
    await core.faults.evaluate_all()
    first = core.faults.running(7)
    assert isinstance(first, DpScaleDownStrategy)
    await turns_until(lambda: core.faults.running(7) is not first, 300, "the first round ended by the hardware fault")
    assert "kept as evidence" in notes[0]
    txns = core.timelines.transactions(7)
    assert txns[0].strategy == "dp_scale_down" and "hardware fault" in txns[0].outcome
    assert any(e.name == "hardware_fault" and list(e.hardware_ranks) == [3] for e in txns[0].events)
    assert not cluster.named("apply")
    await settle(core)
    assert core.timelines.transactions(7)[-1].strategy == "instance_reconfiguration"


async def test_hardware_fault_on_a_survivor_after_software_evidence_reconfigures_without_a_round() -> None:
    """Software came first (rank 1 DEAD), then an L5 on rank 3's card before the decision: the fault
    is evidence for the decision, and rank 3 is no apply target, so it ends as the same fault during
    the round does: a whole-instance reconfiguration, nothing applied."""
    cluster = two_pods()
    core, _ = make_core(cluster)
    await assemble(core, cluster)
    cluster.fault(dead={1}, unhealthy={0, 2, 3})
    core.faults.report_software(7, 1, EvidenceKind.DEAD, "", core.clock.wall())
    notes = core.faults.report_hardware([card("node-127.0.0.3", "Ascend910-1")])  # rank 3
    assert "software evidence first" in notes[0]
    for r in (0, 2, 3):
        core.faults.report_software(7, r, EvidenceKind.UNHEALTHY, "", core.clock.wall())
    assert await reconfiguration_cause(core) == controller_pb2.FALLBACK_CAUSE_HARDWARE_NOT_CORRELATED
    assert not cluster.named("apply") and not cluster.named("guard")


async def test_hardware_fault_on_the_software_dead_rank_confirms_the_scale_down() -> None:
    cluster = two_pods()
    core, _ = make_core(cluster)
    await assemble(core, cluster)
    cluster.fault(dead={1}, unhealthy={0, 2, 3})
    core.faults.report_software(7, 1, EvidenceKind.DEAD, "", core.clock.wall())
    core.faults.report_hardware([card("node-127.0.0.2", "Ascend910-1")])  # rank 1 itself
    for r in (0, 2, 3):
        core.faults.report_software(7, r, EvidenceKind.UNHEALTHY, "", core.clock.wall())
    await core.faults.evaluate_all()
    strategy = core.faults.running(7)
    assert isinstance(strategy, DpScaleDownStrategy) and strategy.ctx.hardware_ranks == {1}
    await settle(core)
    assert core.runtimes.get(7).dead_committed == {1}


async def test_unmappable_hardware_fault_during_a_round_fails_it_before_apply_and_reconfigures_once() -> None:
    """RFC §8: an unmappable hardware event in the same round means no scale-down; one fallback."""
    cluster = two_pods()
    core, clock = make_core(cluster)
    await assemble(core, cluster)
    cluster.fault(dead={1}, unhealthy={0, 2, 3})

    def fault_before_apply(polls: int) -> None:
        if polls == 1:
            core.faults.report_hardware([card("node-127.0.0.2", "npu-weird-1")])

    cluster.on_status = fault_before_apply
    report_complete_snapshot(core, {1})
    await core.faults.evaluate_all()
    assert isinstance(core.faults.running(7), DpScaleDownStrategy)
    await turns_until(lambda: len(core.timelines.transactions(7)) == 2 and core.faults.running(7) is None,
                      10_000, "the round's fallback did not finish")
    for _ in range(3):
        clock.advance(1.0)
        heartbeat_all(core, cluster)
        await core.faults.evaluate_all()
        await settle(core)
    assert not cluster.named("apply")
    assert [t.strategy for t in core.timelines.transactions(7)] == ["dp_scale_down", "instance_reconfiguration"]
    assert len(cluster.named("start_engines")) == 2


async def test_unmappable_hardware_fault_during_a_reconfiguration_is_handled_by_it() -> None:
    cluster = two_pods()
    core, clock = make_core(cluster)
    await assemble(core, cluster)
    core.faults.report_hardware([card("node-127.0.0.2", "npu-weird-1")])
    await core.faults.evaluate_all()
    assert core.faults.running(7) is not None
    notes = core.faults.report_hardware([card("node-127.0.0.3", "npu-weird-0", t=2.0)])
    assert "running" in notes[0], notes
    await settle(core)
    for _ in range(3):
        clock.advance(1.0)
        heartbeat_all(core, cluster)
        await core.faults.evaluate_all()
        await settle(core)
    assert [t.strategy for t in core.timelines.transactions(7)] == ["instance_reconfiguration"]
    assert len(cluster.named("start_engines")) == 2


async def _matched_by_all_unhealthy(core, cluster) -> None:
    """Hardware first on rank 1, then all-UNHEALTHY: the FT framework saw it (a matched window)."""
    core.faults.report_hardware([card("node-127.0.0.2", "Ascend910-1")])
    cluster.fault(dead=set(), unhealthy={0, 1, 2, 3})
    for r in range(4):
        core.faults.report_software(7, r, EvidenceKind.UNHEALTHY, "", core.clock.wall())
    await core.faults.evaluate_all()
    assert core.faults.running(7) is None and [p.matched for p in core.faults.correlation.pending(7)] == [True]


async def test_snapshot_pulls_and_the_idle_probe_run_while_a_matched_window_is_open() -> None:
    cluster, coordinator = two_pods(), FakeCoordinator()
    core, _ = make_core(cluster, config=make_config(idle_fault_probe=True), coordinator=coordinator)
    core.config = core.config.model_copy(update={"snapshot_pull_interval_sec": 0.01})
    core.deps.config = core.config
    await assemble(core, cluster)
    await _matched_by_all_unhealthy(core, cluster)
    # The survivors' collective error healed; rank 1 died: a DEAD with quiet survivors.
    cluster.set(1, DEAD)
    for r in (0, 2, 3):
        cluster.set(r, HEALTHY)
        core.faults.report_software(7, r, EvidenceKind.RECOVERED, "", core.clock.wall())
    core.faults.report_software(7, 1, EvidenceKind.DEAD, "", core.clock.wall())
    pulls = core.faults.puller.pulls
    await core.faults.evaluate_all()
    await turns_until(lambda: core.faults.puller.pulls > pulls and coordinator.canaries,
                      10_000, "no snapshot pull or canary while the matched window is open")
    await core.faults.close()


async def test_a_matched_window_ends_with_its_evidence_and_a_later_unrelated_fault_scales_down() -> None:
    cluster = two_pods()
    core, clock = make_core(cluster)
    await assemble(core, cluster)
    await _matched_by_all_unhealthy(core, cluster)
    cluster.fault(dead=set(), unhealthy=set())
    for r in range(4):
        cluster.set(r, HEALTHY)
        core.faults.report_software(7, r, EvidenceKind.RECOVERED, "", core.clock.wall())
    await core.faults.evaluate_all()
    assert core.faults.running(7) is None and not core.timelines.transactions(7)
    clock.advance(100.0)
    heartbeat_all(core, cluster)
    cluster.fault(dead={2}, unhealthy={0, 1, 3})
    report_complete_snapshot(core, {2})
    await core.faults.evaluate_all()
    strategy = core.faults.running(7)
    assert isinstance(strategy, DpScaleDownStrategy), strategy
    assert strategy.ctx.dead == {2} and strategy.ctx.hardware_ranks == frozenset()
    await settle(core)
    assert core.runtimes.get(7).dead_committed == {2}


async def test_unmappable_hardware_fault_while_a_failed_reconfiguration_waits_is_handled_by_its_retry() -> None:
    cluster = two_pods()
    core, clock = make_core(cluster)
    await assemble(core, cluster)
    cluster.fail[("start_engines", "*")] = grpc.StatusCode.UNAVAILABLE
    core.faults.report_hardware([card("node-127.0.0.2", "npu-weird-1")])
    await core.faults.evaluate_all()
    await settle(core)
    assert core.runtimes.get(7).reconfiguring and core.faults.running(7) is None
    notes = core.faults.report_hardware([card("node-127.0.0.3", "npu-weird-0", t=2.0)])
    assert "whole-instance reconfiguration" in notes[0], notes
    del cluster.fail[("start_engines", "*")]
    for _ in range(4):
        clock.advance(core.config.reconfiguration_max_backoff_sec)
        heartbeat_all(core, cluster)
        await core.faults.evaluate_all()
        await settle(core)
    assert [t.strategy for t in core.timelines.transactions(7)] == ["instance_reconfiguration"] * 2
    assert not core.runtimes.get(7).reconfiguring


async def test_a_card_fault_that_joined_another_ranks_window_still_waits_after_that_rank_recovers() -> None:
    """Rank 3's status times out (DEAD evidence: a window opens); rank 2's card fails (it joins that
    window); rank 3 recovers, which closes the window. The FT framework never saw rank 2: its card
    fault waits as a hardware fault at rest and, with no matching snapshot, reconfigures at the end
    of the window counted from its arrival."""
    cluster = two_pods()
    core, clock = make_core(cluster)
    await assemble(core, cluster)
    cluster.set(3, DEAD)
    core.faults.report_software(7, 3, EvidenceKind.DEAD, "status did not answer", core.clock.wall())
    await core.faults.evaluate_all()
    notes = core.faults.report_hardware([card("node-127.0.0.3", "Ascend910-0", level=4)])
    assert "software evidence first" in notes[0], notes
    clock.advance(0.2)
    cluster.set(3, HEALTHY)
    core.faults.report_software(7, 3, EvidenceKind.RECOVERED, "", core.clock.wall())
    await core.faults.evaluate_all()
    assert core.faults.running(7) is None
    assert [(p.ranks, p.matched) for p in core.faults.correlation.pending(7)] == [(frozenset({2}), False)]
    await reconfigured_at_the_windows_end(core, cluster, clock)
