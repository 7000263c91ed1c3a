"""Evidence against time: what a round read of a rank supersedes only what was received before that
read of that rank, and an older observation never replaces a newer one of the same rank, whoever
(a NodeManager's report or a snapshot pull) delivered it (in-memory peers, manual clock)."""

from __future__ import annotations

import asyncio

import pytest
from .controller_fakes import DEAD, HEALTHY, UNHEALTHY, Engine, FakeCoordinator, assemble, make_core, two_pods

from motor.controller.fault_tolerance.decision import FallbackCause
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


async def pulling_core(interval_sec: float = 0.01):
    """Two pods, assembled, with snapshot pulls every `interval_sec`."""
    cluster = two_pods()
    core, clock = make_core(cluster)
    core.config = core.config.model_copy(update={"snapshot_pull_interval_sec": interval_sec})
    core.deps.config = core.config
    await assemble(core, cluster)
    return cluster, core, clock


async def wait_for(predicate, what: str, bound_sec: float = 20.0) -> None:
    """An event wait (bounded generously: the pulls run on real time while the machine may be busy)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + bound_sec
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError(f"{what} not reached")
        await asyncio.sleep(0.005)


@pytest.mark.parametrize("stamped", [True, False], ids=["read-time-in-answer", "no-time-in-answer"])
async def test_an_engine_dead_that_arrives_while_a_pull_is_out_is_not_replaced_by_its_older_read(stamped) -> None:
    """The pull reads rank 2 UNHEALTHY; before its answer is back the NodeManager's process watch
    reports rank 2 ENGINE_DEAD. The death is the newer observation and stays; the snapshot is
    complete with ranks 1 and 2 dead."""
    cluster, core, clock = await pulling_core()
    cluster.fault(dead={1}, unhealthy={0, 2, 3})
    if stamped:
        for engine in cluster.engines.values():
            engine.observed_at_unix_sec = clock.wall()
    core.faults.report_software(7, 1, EvidenceKind.DEAD, "exit 9", clock.wall())

    def rank2_dies_while_the_pull_is_out(_polls: int) -> None:
        if 2 not in core.faults.evidence(7):
            clock.advance(0.5)
            core.faults.report_software(7, 2, EvidenceKind.ENGINE_DEAD, "engine exited (code 9)", clock.wall())

    cluster.on_status = rank2_dies_while_the_pull_is_out
    await core.faults.evaluate_all()
    await wait_for(lambda: set(core.faults.evidence(7)) == {0, 1, 2, 3}, "survivors' evidence pulled")
    cluster.on_status = None
    held = core.faults.evidence(7)
    assert held[2].kind is EvidenceKind.ENGINE_DEAD, held[2]
    await core.faults.evaluate_all()
    running = core.faults.running(7)
    assert isinstance(running, DpScaleDownStrategy) and running.ctx.dead == {1, 2}
    await core.faults.close()


@pytest.mark.parametrize("stamped", [True, False], ids=["read-time-in-answer", "no-time-in-answer"])
@pytest.mark.parametrize("late", [EvidenceKind.UNHEALTHY, EvidenceKind.RECOVERED])
async def test_a_queued_older_report_delivered_after_a_pull_read_dead_does_not_overwrite_it(stamped, late) -> None:
    """The NodeManager's poll saw rank 2 unhealthy (or recovering) and queued the report; then a pull
    read rank 2 DEAD (taken: the NodeManager never sends that DEAD itself). The queued report comes
    in last but was observed first: the DEAD stands and the round removes rank 2."""
    cluster, core, clock = await pulling_core()
    core.faults.report_software(7, 1, EvidenceKind.DEAD, "exit 9", clock.wall())
    queued_at = clock.wall()
    clock.advance(0.5)
    cluster.fault(dead={1, 2}, unhealthy={0, 3})
    if stamped:
        for engine in cluster.engines.values():
            engine.observed_at_unix_sec = clock.wall()
    await core.faults.evaluate_all()
    await wait_for(lambda: set(core.faults.evidence(7)) == {0, 1, 2, 3}, "survivors' evidence pulled")
    assert core.faults.evidence(7)[2].health is Health.DEAD
    answer = core.faults.report_software(7, 2, late, "collective failed", queued_at)
    assert answer.endswith("ignored"), answer
    held = core.faults.evidence(7)
    assert held[2].health is Health.DEAD and "pulled by the Controller" in held[2].detail
    await core.faults.evaluate_all()
    running = core.faults.running(7)
    assert isinstance(running, DpScaleDownStrategy) and running.ctx.dead == {1, 2}
    await core.faults.close()


def test_a_report_observed_at_the_same_time_as_the_held_evidence_replaces_it() -> None:
    """Two observations of one rank at the same time: the later arrival stands."""
    from motor.controller.fault_tolerance.evidence_intake import EvidenceIntake
    from motor.controller.model.runtime import FtRuntimeStore

    runtime = FtRuntimeStore(True).create(7, (0, 1, 2, 3), "reconfiguration")
    intake = EvidenceIntake()
    intake.record_software(runtime, 2, EvidenceKind.UNHEALTHY, "", 100.0, 100.0, 1.0)
    intake.record_software(runtime, 2, EvidenceKind.DEAD, "", 100.0, 100.0, 2.0)
    assert intake.of(7).evidence[2].health is Health.DEAD


@pytest.mark.parametrize("foreign", [[9], [0]], ids=["not-a-rank-of-the-instance", "another-pods-rank"])
async def test_a_pull_answer_with_ids_not_asked_for_is_dropped_and_the_puller_keeps_running(foreign) -> None:
    """Pod 127.0.0.3 is asked for ranks 2 and 3 and answers an entry it was not asked for as well (a
    rank of no pod, or rank 0 of the other pod, which reads DEAD): that read breaks the identity
    contract, so it is dropped (ranks 2 and 3 stay without evidence, no stray verdict is recorded)
    and logged; the puller goes on and reads the pod again once its answers are right."""
    cluster, core, clock = await pulling_core()
    cluster.fault(dead={1}, unhealthy={2, 3})
    core.faults.report_software(7, 1, EvidenceKind.DEAD, "exit 9", clock.wall())
    core.faults.report_software(7, 0, EvidenceKind.UNHEALTHY, "peer failed", clock.wall())
    cluster.engines[0].status = DEAD  # what a stray entry for rank 0 says
    cluster.engines[9] = Engine(9, status=DEAD)
    cluster.extra_status = {"127.0.0.3:1": foreign}
    await core.faults.evaluate_all()
    await wait_for(lambda: core.faults.puller.pulls >= 3, "pulls after the bad answer")
    assert not core.faults.puller._tasks[7].done(), "the puller is still running"
    assert {r: ev.health for r, ev in core.faults.evidence(7).items()} == {0: Health.UNHEALTHY, 1: Health.DEAD}
    cluster.extra_status = {}
    await wait_for(lambda: set(core.faults.evidence(7)) == {0, 1, 2, 3}, "the pod read again")
    assert {r: ev.health for r, ev in core.faults.evidence(7).items()} == {
        0: Health.UNHEALTHY, 1: Health.DEAD, 2: Health.UNHEALTHY, 3: Health.UNHEALTHY}
    await core.faults.close()


async def test_an_engine_dead_received_after_the_rebuild_started_the_engines_survives_the_rebuild() -> None:
    """The rebuild's last look at the engines is the NodeManagers' start answers: a new engine that
    dies while the rebuilt view is being published is news for the next decision (its evidence is
    kept), while what was reported about the old engines is handled by the rebuild."""
    cluster = two_pods()
    coordinator = FakeCoordinator()
    core, clock = make_core(cluster, coordinator=coordinator)
    await assemble(core, cluster)
    core.faults.report_software(7, 1, EvidenceKind.ENGINE_DEAD, "old engine exited (code 9)", clock.wall())
    clock.advance(1.0)
    reported: list[str] = []

    def rank0_dies_while_published(event: str) -> None:
        if event == "ADD" and any(c[0] == "start_engines" for c in cluster.calls) and not reported:
            clock.advance(1.0)
            cluster.set(0, DEAD)
            core.faults.report_software(7, 0, EvidenceKind.ENGINE_DEAD, "new engine exited (code 9)", clock.wall())
            reported.append(event)

    coordinator.on_refresh = rank0_dies_while_published
    strategy = ReconfigurationStrategy(core.deps, 7, "test", FallbackCause.STRATEGY_FAILED)
    outcome = await strategy.run()
    assert outcome.succeeded and reported, "the rebuild published its view after starting the engines"
    core.faults.intake.settle(7, frozenset(), outcome.observed_mono_sec, True, outcome.last_reads)
    held = core.faults.evidence(7)
    assert set(held) == {0} and held[0].health is Health.DEAD


async def test_an_old_engines_death_delivered_after_the_rebuild_asked_for_the_start_is_handled_by_it() -> None:
    """Rank 0's old engine died before the rebuild stopped it; its NodeManager's report is still on
    its way when the rebuild asks that pod to start the new engines. It was observed before the pod
    spawned them, so the rebuild handled it: no evidence is left to rebuild the instance again."""
    cluster = two_pods()
    core, clock = make_core(cluster)
    await assemble(core, cluster)
    core.faults.report_software(7, 1, EvidenceKind.ENGINE_DEAD, "old engine exited (code 9)", clock.wall())
    old_death_observed_at = clock.wall() + 0.2
    clock.advance(1.0)
    delivered: list[str] = []

    def late_report(address: str) -> None:
        if address in cluster.named("start_engines")[0][1] and not delivered:
            clock.advance(0.5)
            core.faults.report_software(7, 0, EvidenceKind.ENGINE_DEAD, "old engine exited (code 9)",
                                        old_death_observed_at)
            delivered.append(address)

    cluster.on_start = late_report
    strategy = ReconfigurationStrategy(core.deps, 7, "test", FallbackCause.STRATEGY_FAILED)
    outcome = await strategy.run()
    assert outcome.succeeded and delivered
    core.faults.intake.settle(7, frozenset(), outcome.observed_mono_sec, True, outcome.last_reads)
    assert core.faults.evidence(7) == {}
