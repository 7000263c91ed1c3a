"""Evidence against time: what a round read of a rank supersedes only what was received before that
read of that rank, and an older observation never replaces a newer one of the same rank, whoever
(a NodeManager's report or a snapshot pull) delivered it (in-memory peers, manual clock)."""

from __future__ import annotations

import asyncio

from controller_fakes import DEAD, HEALTHY, UNHEALTHY, assemble, make_core, two_pods

from motor.controller.fault_tolerance.evidence import EvidenceKind, Health
from motor.controller.fault_tolerance.strategy.dp_scale_down import DpScaleDownStrategy
from motor.controller.fault_tolerance.strategy.reconfiguration import ReconfigurationStrategy
from motor.controller.model.runtime import FtPhase


async def drain_tasks(core) -> None:
    for _ in range(500):
        if not any(core.faults.running(r.instance_id) for r in core.runtimes.all()):
            return
        await asyncio.sleep(0)
    raise AssertionError("strategy still running")


async def test_a_survivor_dying_after_its_healthy_read_starts_a_second_round_not_a_reconfiguration() -> None:
    """Rank 0 is seen healthy after apply (and not read again) while rank 3 still rebuilds; then its
    process exits and its NodeManager reports ENGINE_DEAD. The round commits; the report came after
    the last read of rank 0, so it survives the commit and the scaled-down instance decides again
    (RFC §3.1: a survivor fault in SCALED_DOWN_RUNNING goes to DECIDING)."""
    cluster = two_pods()
    core, clock = make_core(cluster)
    await assemble(core, cluster)
    cluster.fault(dead={1}, unhealthy={0, 2, 3})
    cluster.engines[3].recover_after_polls = 3
    died: list[float] = []
    healthy_at_call: list[int] = []

    def rank0_dies_after_its_healthy_read(calls: int) -> None:
        # Each poll calls each pod with survivors to read; the poll after the one that saw rank 0
        # healthy reads only rank 3, and rank 0 dies before it.
        e0, e3 = cluster.engines[0], cluster.engines[3]
        if not healthy_at_call and e0.last_request_id and e0.status == HEALTHY and e3.polls_since_apply >= 0:
            healthy_at_call.append(calls)
        if not died and healthy_at_call and calls >= healthy_at_call[0] + 1 and e3.polls_since_apply >= 0:
            cluster.set(0, DEAD)
            died.append(clock.monotonic())
            core.faults.report_software(7, 0, EvidenceKind.ENGINE_DEAD, "engine exited (code 9)", clock.wall())

    cluster.on_status = rank0_dies_after_its_healthy_read
    for r in range(4):
        core.faults.report_software(7, r, EvidenceKind.DEAD if r == 1 else EvidenceKind.UNHEALTHY, "", clock.wall())
    await core.faults.evaluate_all()
    assert isinstance(core.faults.running(7), DpScaleDownStrategy)
    await drain_tasks(core)
    runtime = core.runtimes.get(7)
    assert died, "rank 0 died during the recovery poll"
    assert runtime.phase is FtPhase.SCALED_DOWN_RUNNING and runtime.dead_committed == {1}
    held = core.faults.evidence(7)
    assert set(held) == {0} and held[0].health is Health.DEAD, \
        "the ENGINE_DEAD received after rank 0's last read survives the commit"
    # The survivors' collective fails with rank 0: their verdicts complete the snapshot.
    cluster.set(2, UNHEALTHY)
    cluster.set(3, UNHEALTHY)
    for r in (2, 3):
        core.faults.report_software(7, r, EvidenceKind.UNHEALTHY, "peer failed", clock.wall())
    await core.faults.evaluate_all()
    second = core.faults.running(7)
    assert isinstance(second, DpScaleDownStrategy) and second.ctx.dead == {0}
    await drain_tasks(core)
    assert core.runtimes.get(7).dead_committed == {0, 1}
    transactions = core.timelines.transactions(7)
    assert [t.strategy for t in transactions] == ["dp_scale_down", "dp_scale_down"]
    phases = [e.name for e in transactions[-1].events if e.kind == "phase"]
    assert phases[0] == "DECIDING"
    assert not isinstance(core.faults.running(7), ReconfigurationStrategy)

