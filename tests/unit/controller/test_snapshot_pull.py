"""Snapshot pulls: with fault evidence but no complete snapshot, the Controller reads the survivors'
status itself and does not wait for the NodeManagers' next polls (in-memory peers)."""

from __future__ import annotations

import asyncio


from motor.controller.fault_tolerance.engine_states import NO_VERDICT_STATES
from motor.controller.fault_tolerance.evidence import EvidenceKind
from motor.controller.fault_tolerance.strategy.dp_scale_down import DpScaleDownStrategy
from motor.testing.waits import async_wait_for

from .controller_fakes import DEAD, UNHEALTHY, assemble, make_core, two_pods

DIAGNOSING = 4


# Event waits, bounded generously: the pulls run on real time while the machine may be busy.
BOUND_SEC = 60.0


async def pulling_core(interval_sec: float):
    """Two pods, assembled, with snapshot pulls every `interval_sec`."""
    cluster = two_pods()
    core, _ = make_core(cluster)
    core.config = core.config.model_copy(update={"snapshot_pull_interval_sec": interval_sec})
    core.deps.config = core.config
    await assemble(core, cluster)
    return cluster, core


async def test_one_dead_report_is_enough_the_survivors_are_pulled() -> None:
    cluster, core = await pulling_core(0.01)
    cluster.fault(dead={1}, unhealthy={0, 2, 3})
    core.faults.report_software(7, 1, EvidenceKind.DEAD, "exit 9", core.clock.wall())
    await core.faults.evaluate_all()  # incomplete: waits, and starts pulling
    await async_wait_for(lambda: set(core.faults.evidence(7)) == {0, 1, 2, 3}, BOUND_SEC, "survivors' evidence pulled",
                         interval_sec=0.005)
    assert all("pulled by the Controller" in core.faults.evidence(7)[r].detail for r in (0, 2, 3))
    assert cluster.status_taken and all(cluster.status_taken), \
        "every pull asks the NodeManagers not to report what it took"
    await core.faults.evaluate_all()
    assert isinstance(core.faults.running(7), DpScaleDownStrategy)
    await core.faults.close()


async def test_diagnosing_and_healthy_answers_are_no_news_and_pulls_stop_with_the_window() -> None:
    cluster, core = await pulling_core(0.01)
    cluster.set(1, DEAD)
    cluster.set(2, DIAGNOSING)
    core.faults.report_software(7, 1, EvidenceKind.DEAD, "exit 9", core.clock.wall())
    await core.faults.evaluate_all()
    await async_wait_for(lambda: core.faults.puller.pulls >= 3, BOUND_SEC, "three pulls", interval_sec=0.005)
    assert set(core.faults.evidence(7)) == {1}
    cluster.set(1, 1)  # healthy again (e.g. restarted), and its NodeManager says so: the window closes
    core.faults.report_software(7, 1, EvidenceKind.RECOVERED, "", core.clock.wall())
    pulls = core.faults.puller.pulls
    await async_wait_for(lambda: all(t.done() for t in core.faults.puller._tasks.values()), BOUND_SEC, "puller ended",
                         interval_sec=0.005)
    assert core.faults.puller.pulls <= pulls + 1
    cluster.set(2, UNHEALTHY)
    await core.faults.close()


async def rank1_dead_survivors_diagnosing(interval_sec: float):
    """Rank 1 reported DEAD (evidence), ranks 0, 2 and 3 diagnosing; evaluated once."""
    cluster, core = await pulling_core(interval_sec)
    cluster.set(1, DEAD)
    for r in (0, 2, 3):
        cluster.set(r, DIAGNOSING)
    core.faults.report_software(7, 1, EvidenceKind.DEAD, "exit 9", core.clock.wall())
    await core.faults.evaluate_all()
    return cluster, core


async def test_pulls_are_off_with_interval_zero() -> None:
    cluster, core = await pulling_core(0.0)
    core.faults.report_software(7, 1, EvidenceKind.DEAD, "exit 9", core.clock.wall())
    await core.faults.evaluate_all()
    await asyncio.sleep(0.05)
    assert core.faults.puller.pulls == 0 and not cluster.named("status")


async def test_ranks_with_evidence_are_not_read_again_and_probes_read_one_rank() -> None:
    cluster, core = await rank1_dead_survivors_diagnosing(0.02)
    await async_wait_for(lambda: core.faults.puller.pulls >= 3, BOUND_SEC, "probes", interval_sec=0.005)
    core.clock.advance(5 * 0.02)  # the full read's time (the pulls run on the manual clock)
    await async_wait_for(lambda: {r for c in cluster.named("status") for r in c[2]} >= {0, 2, 3}, BOUND_SEC,
                         "a full read", interval_sec=0.005)
    reads = [ids for _, _, ids in cluster.named("status")]
    assert all(1 not in ids for ids in reads), "the rank with DEAD evidence is never read"
    assert len(reads[0]) == 1, "the window opens with a probe of one rank: the survivors are still diagnosing"
    full = next(i for i in range(len(reads) - 1) if set(reads[i]) | set(reads[i + 1]) == {0, 2, 3})
    assert all(len(ids) == 1 for ids in reads[:full]), "before the first full read (at the latest every five "\
        "intervals) only probes of one rank"
    # One survivor decides: the probe that finds it makes the next read a full one, and the snapshot completes.
    for r in (0, 2, 3):
        cluster.set(r, UNHEALTHY)
    await async_wait_for(lambda: set(core.faults.evidence(7)) == {0, 1, 2, 3}, BOUND_SEC,
                         "every survivor's verdict pulled", interval_sec=0.005)
    await async_wait_for(lambda: all(t.done() for t in core.faults.puller._tasks.values()), BOUND_SEC,
                         "puller ended: nothing left", interval_sec=0.005)
    await core.faults.close()


async def test_a_nodemanager_report_wakes_the_puller_before_its_next_probe() -> None:
    cluster, core = await rank1_dead_survivors_diagnosing(10.0)  # probes 2.5 s apart
    await async_wait_for(lambda: core.faults.puller.pulls >= 1, BOUND_SEC, "the first full read", interval_sec=0.005)
    for r in (0, 2, 3):
        cluster.set(r, UNHEALTHY)
    core.faults.report_software(7, 0, EvidenceKind.UNHEALTHY, "collective failed", core.clock.wall())
    await async_wait_for(lambda: set(core.faults.evidence(7)) == {0, 1, 2, 3}, BOUND_SEC,
                         "the others read after the report", interval_sec=0.005)
    assert core.faults.puller.woken == 1, "the report, not the probe tick, started the read"
    assert core.faults.puller.pulls == 2, "one full read of the ranks still lacking, no probe in between"
    await core.faults.close()


def test_rank_ranges_are_compact() -> None:
    from motor.common.text import rank_ranges
    assert rank_ranges([5, 0, 2, 3, 4, 7, 9, 8]) == "[0, 2-5, 7-9]"
    assert rank_ranges([]) == "[]"


async def test_a_pulled_verdict_says_when_the_engine_was_first_seen_diagnosing() -> None:
    cluster, core = await rank1_dead_survivors_diagnosing(0.01)
    await async_wait_for(lambda: core.faults.puller.pulls >= 2, BOUND_SEC, "probes", interval_sec=0.005)
    core.clock.advance(5 * 0.01)  # the full read's time (the pulls run on the manual clock)
    await async_wait_for(lambda: {r for c in cluster.named("status") for r in c[2]} >= {0, 2, 3}, BOUND_SEC,
                         "every survivor read while diagnosing (probes, then a full read)", interval_sec=0.005)
    for r in (0, 2, 3):
        cluster.set(r, UNHEALTHY)
    await async_wait_for(lambda: set(core.faults.evidence(7)) == {0, 1, 2, 3}, BOUND_SEC, "verdicts pulled",
                         interval_sec=0.005)
    assert all(core.faults.evidence(7)[r].diagnosing_at_sec > 0 for r in (0, 2, 3))
    await core.faults.close()


async def test_a_rank_whose_pulled_answer_was_lost_is_read_again_though_an_older_report_of_it_came_in() -> None:
    """Rank 0's NodeManager reads it dead for a pull and counts that as reported, but the answer is
    lost; meanwhile its earlier UNHEALTHY report arrives. The death reaches the Controller only if
    the puller asks rank 0 again: it is owed a read until an answer of it arrives."""
    cluster, core = await pulling_core(0.02)
    address0 = next(a for a, ranks in cluster.pods.items() if 0 in ranks)
    cluster.set(1, DEAD)
    cluster.set(0, DEAD)
    core.faults.report_software(7, 1, EvidenceKind.DEAD, "exit 9", core.clock.wall())
    reported_before_the_death = core.clock.wall()
    cluster.lose_next_answer.add(address0)

    def older_report_arrives(polls: int) -> None:
        if polls == 1:
            core.faults.report_software(7, 0, EvidenceKind.UNHEALTHY, "collective timed out",
                                        reported_before_the_death)

    cluster.on_status = older_report_arrives
    await core.faults.evaluate_all()
    await async_wait_for(lambda: not cluster.lose_next_answer and core.faults.puller.pulls >= 4, BOUND_SEC,
                         "the lost answer and three reads after it", interval_sec=0.005)
    assert core.faults.evidence(7)[0].kind is EvidenceKind.DEAD, core.faults.evidence(7)[0]
    reads = [ids for address, ids in ((c[1], c[2]) for c in cluster.named("status")) if address == address0]
    assert sum(0 in ids for ids in reads) >= 2, reads
    await core.faults.close()


async def test_a_probe_is_one_long_poll_reread_at_the_probe_pace() -> None:
    """Between full reads the probe of one rank is a single Status long poll, held at the
    NodeManager until the rank reads a verdict, re-read there as often as the probe ticks were
    (a quarter of the pull interval), instead of one call per tick."""
    cluster, core = await rank1_dead_survivors_diagnosing(0.2)
    cluster.hold_long_polls = asyncio.Event()
    await async_wait_for(lambda: any(settle > 0 for _, settle, _ in cluster.status_settles), BOUND_SEC,
                         "a probe", interval_sec=0.005)
    probe = next(i for i, (_, settle, _) in enumerate(cluster.status_settles) if settle > 0)
    assert probe == 1, "the window opens with a probe: one read of one rank, then long polls of one rank"
    assert len(cluster.named("status")[0][2]) == 1 and cluster.status_settles[0][1] == 0.0
    assert len(cluster.named("status")[probe][2]) == 1
    assert cluster.status_settles[probe][0] == NO_VERDICT_STATES
    assert cluster.status_reread_caps[probe] == 0.05
    for _ in range(20):
        await asyncio.sleep(0)
    assert len(cluster.named("status")) == probe + 1, "no call while the probe is held"
    cluster.hold_long_polls.set()
    await core.faults.close()


async def test_a_report_ends_an_outstanding_probe_and_its_rank_is_read_again() -> None:
    """A report arrives while a probe is held at its NodeManager: the probe is cancelled and the ranks
    still lacking evidence are read at once, the probed one among them, since the NodeManager may have
    taken a verdict whose answer the cancellation lost."""
    cluster, core = await rank1_dead_survivors_diagnosing(0.2)
    cluster.hold_long_polls = asyncio.Event()
    await async_wait_for(lambda: any(settle > 0 for _, settle, _ in cluster.status_settles), BOUND_SEC,
                         "a probe held", interval_sec=0.005)
    probe = next(i for i, (_, settle, _) in enumerate(cluster.status_settles) if settle > 0)
    (probed,) = cluster.named("status")[probe][2]
    reported = next(r for r in (0, 2, 3) if r != probed)
    for r in (0, 2, 3):
        cluster.set(r, UNHEALTHY)
    core.faults.report_software(7, reported, EvidenceKind.UNHEALTHY, "collective failed", core.clock.wall())
    await async_wait_for(lambda: set(core.faults.evidence(7)) == {0, 1, 2, 3}, BOUND_SEC,
                         "the others read after the report", interval_sec=0.005)
    assert cluster.status_cancelled == 1 and core.faults.puller.woken >= 1
    assert "pulled by the Controller" in core.faults.evidence(7)[probed].detail
    await core.faults.close()
