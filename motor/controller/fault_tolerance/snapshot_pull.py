"""Snapshot pulls: once an instance has fault evidence but no complete snapshot, the Controller reads
the FT status of the active ranks still without evidence itself (Status RPCs to their NodeManagers)
instead of waiting for each NodeManager's next 1 Hz poll. Detection then follows the engines' own
pace (their `diagnosing` phase, their collective timeout) rather than the poll period, and the steady
state costs nothing: pulls run only while a collection window is open.

Cheap at scale (pulling every rank of 16 instances of 256 ranks every 0.2 s would read 20,000
statuses a second and stall every round): a rank that already has UNHEALTHY or DEAD evidence is
never read again (the round's own status polls absorb a later death), and between full reads of the
ranks still lacking evidence (and before the first) only one of them is probed, rotating over pods.
The probe is one Status long poll (`wait_while` the states that are no verdict), which its
NodeManager answers when the rank reads a verdict or the time to the next full read has passed,
re-reading it at least every quarter of `snapshot_pull_interval_sec`: a verdict is seen as soon as a
probe call per quarter interval would see it, for one call instead of one per quarter (a pod serving
a gRPC call costs more than reading a local engine). A full read follows at once when anything new came in (a probe's find or a
NodeManager's report: the survivors flip together, their verdicts arrive together), and at the
latest every `_FULL_EVERY` intervals. A NodeManager's report, or a strategy starting, wakes the
puller at once (`poke`): an outstanding probe is cancelled (its rank is then owed a read, below), so
a round's snapshot wait does not grow by a probe's slice. One summary log line per read that found
something, never one per rank.

Every pull is flagged `taken_as_evidence`: the NodeManagers count the verdicts it read as reported
and do not send them again, so a survivor's verdict reaches the Controller once. The NodeManager
cannot tell that its answer was lost on the way, so a rank whose answer was lost (or dropped for a
protocol error) is owed a read: it is asked again, with the ranks still lacking evidence, until an
answer of it arrives, even if a report of it came in meanwhile (that report can be older than what
the lost answer held: an UNHEALTHY sent before the engine died, the death the pull read and the
NodeManager will not report). An answer that arrives after a strategy started is dropped, since the
round reads every survivor itself.

Bounded: one puller per instance, ended by a strategy starting, the snapshot being complete (no rank
left to read), the evidence clearing, the window closing, the collection timeout, or the Controller
stopping. What it reads is fed through the same intake as a NodeManager's report (DEAD and UNHEALTHY
only: a healthy or diagnosing answer is no news), so the decision never depends on who saw the fault
first.

Each verdict is dated by when the NodeManager read the engine (the entry's observed_at_unix_sec,
its own clock, as its reports are), or, when the answer carries no time, by the Controller's wall
clock when the pull was sent (the earliest the engine can have been read): the intake keeps the
newer observation of a rank, so neither a report that arrived while the pull was out nor a queued
older report after it is overwritten by the other. An answer with an entry for an id not asked for
breaks the identity contract (RFC §4.1): that read is dropped and logged, its ranks stay without
evidence, and the puller goes on.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from gen.motor.v1 import common_pb2
from motor.common.text import rank_ranges
from motor.common.waiting import wait_set
from motor.controller.clients import PeerCallError
from motor.controller.fault_tolerance.evidence import EvidenceKind, Health
from motor.controller.fault_tolerance.engine_states import NO_VERDICT_STATES
from motor.controller.fault_tolerance.evidence_intake import EvidenceIntake, OlderObservationError
from motor.controller.fault_tolerance.strategy.base import ControllerDeps

log = logging.getLogger(__name__)

_KIND = {common_pb2.ENGINE_HEALTH_UNHEALTHY: EvidenceKind.UNHEALTHY, common_pb2.ENGINE_HEALTH_DEAD: EvidenceKind.DEAD}
_HEALTH = {EvidenceKind.UNHEALTHY: Health.UNHEALTHY, EvidenceKind.DEAD: Health.DEAD}

# Probes between two reads of every rank still lacking evidence, and the longest gap between two
# such full reads, in snapshot_pull_interval_sec.
_PROBES_PER_INTERVAL = 4
_FULL_EVERY = 5
# StatusRequest.reread_max_sec's range: a probe's re-reads at the NodeManager are as often as the
# probe ticks were, within it.
_REREAD_CAP_MIN_SEC = 0.01
_REREAD_CAP_MAX_SEC = 0.2

# (instance_id, endpoint_id, kind, detail, observed_at_sec, diagnosing_at_sec, pulled=True): records
# a verdict read, as fault_manager.SoftwareReports.record.
Report = Callable[..., object]


class SnapshotPuller:
    def __init__(self, deps: ControllerDeps, intake: EvidenceIntake, report: Report,
                 busy: Callable[[int], bool]) -> None:
        self._deps = deps
        self._intake = intake
        self._report = report
        self._busy = busy
        self._tasks: dict[int, asyncio.Task[None]] = {}
        self._news: dict[int, asyncio.Event] = {}
        self.pulls = 0
        self.reads = 0  # rank statuses read, over every pull
        self.woken = 0  # waits ended by a poke rather than the probe tick
        # (instance, rank) → when a pull first saw the engine diagnosing, told with its verdict.
        self._diagnosing: dict[tuple[int, int], float] = {}
        # instance → ranks whose last pulled answer never arrived: the NodeManager took what it read.
        self._owed: dict[int, set[int]] = {}

    @property
    def interval_sec(self) -> float:
        return self._deps.config.snapshot_pull_interval_sec

    def ensure(self, instance_id: int) -> None:
        """Starts pulling for the instance unless it already is (or pulls are off)."""
        task = self._tasks.get(instance_id)
        if self.interval_sec <= 0 or (task is not None and not task.done()):
            return
        self._news[instance_id] = asyncio.Event()
        self._tasks[instance_id] = asyncio.create_task(self._run(instance_id), name=f"snapshot-pull-{instance_id}")

    def poke(self, instance_id: int) -> None:
        """New evidence came in from elsewhere: a pulling instance reads at once, not at its next tick."""
        news = self._news.get(instance_id)
        if news is not None:
            news.set()

    async def close(self) -> None:
        tasks, self._tasks = list(self._tasks.values()), {}
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _lacking(self, instance_id: int) -> dict[str, list[int]]:
        """Per NodeManager address: the active, routable ranks of the instance without UNHEALTHY/DEAD
        evidence yet, or short of DEAD and owed a read (retired and headless ones have no status
        to read)."""
        record = self._deps.registry.get(instance_id)
        runtime = self._deps.runtimes.find(instance_id)
        if record is None or runtime is None:
            return {}
        evidence = self._intake.of(instance_id).evidence
        owed = self._owed.get(instance_id, set())
        endpoints = record.endpoint_infos()
        active = runtime.active_ranks

        def lacking(rank: int) -> bool:
            held = evidence.get(rank)
            return held is None or (rank in owed and held.health is not Health.DEAD)

        out: dict[str, list[int]] = {}
        for pod in record.pod_infos():
            ranks = [r for r in pod.ranks if r in active and not endpoints[r].headless and lacking(r)]
            if ranks:
                out[pod.node_manager_address] = ranks
        return out

    async def _run(self, instance_id: int) -> None:
        ft = self._deps.config.fault_tolerance_config
        clock = self._deps.clock
        probe_sec = self.interval_sec / _PROBES_PER_INTERVAL
        deadline = clock.monotonic() + ft.software_status_collection_timeout_sec
        # A tick or a poke ends each wait, and pokes coalesce while a read runs: at most two per tick.
        bound = 2 * (max(1, int(ft.software_status_collection_timeout_sec / probe_sec)) + 1)
        news = self._news[instance_id]
        # The window opens with a probe, not a full read: the survivors are still deciding (vLLM's
        # diagnosing phase, where a full read finds nothing) or decided together, which the probe
        # sees at once, and a full read follows.
        full_due = clock.monotonic() + _FULL_EVERY * self.interval_sec
        seen = len(self._intake.of(instance_id).evidence)  # evidence entries before the last full read: more is news
        probe_turn = 0
        for _ in range(bound):
            if self._busy(instance_id) or not self._intake.window_open(instance_id) or clock.monotonic() >= deadline:
                return
            lacking = self._lacking(instance_id)
            if not lacking:
                return  # every active rank has evidence: the decision has what it needs
            known = len(self._intake.of(instance_id).evidence)
            if known != seen or clock.monotonic() >= full_due:
                seen = known
                await self._pull_once(instance_id, lacking)
                full_due = clock.monotonic() + _FULL_EVERY * self.interval_sec
            else:
                address = sorted(lacking)[probe_turn % len(lacking)]
                ranks = lacking[address]
                # The window's first probe is one read, not a long poll: a survivor still diagnosing
                # is seen so, and its verdict says since when (a long poll waits that out unseen).
                slice_sec = min(full_due, deadline) - clock.monotonic() if probe_turn else 0.0
                probe_turn += 1
                if await self._probe(instance_id, address, ranks[probe_turn % len(ranks)], slice_sec, probe_sec, news):
                    self.woken += 1
                    news.clear()
                    continue  # a report came in, or a strategy started: judge afresh
                if len(self._intake.of(instance_id).evidence) != known or clock.monotonic() >= full_due:
                    continue  # a verdict (the others follow: read them at once), or the slice is over
            if await wait_set(news, probe_sec):
                self.woken += 1
            news.clear()

    async def _probe(self, instance_id: int, address: str, rank: int, slice_sec: float, reread_sec: float,
                     news: asyncio.Event) -> bool:
        """Long-polls one rank at its NodeManager until it reads a verdict or `slice_sec` passes,
        read again at least every `reread_sec` there (one call instead of a call per probe tick).
        True when news (a report, a strategy starting) ended it first: the poll is then cancelled, and
        the rank is owed a read, since the NodeManager may have taken a verdict whose answer is lost."""
        settle_sec = max(0.0, slice_sec)
        reread_max_sec = min(_REREAD_CAP_MAX_SEC, max(_REREAD_CAP_MIN_SEC, reread_sec))
        poll = asyncio.create_task(self._pull_once(instance_id, {address: [rank]}, NO_VERDICT_STATES, settle_sec,
                                                   reread_max_sec), name=f"snapshot-probe-{instance_id}-{rank}")
        woken = asyncio.create_task(news.wait())
        try:
            await asyncio.wait({poll, woken}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            woken.cancel()
            cut = not poll.done()
            if cut:
                poll.cancel()
                self._owed.setdefault(instance_id, set()).add(rank)
            await asyncio.gather(poll, woken, return_exceptions=True)
        if not cut:
            poll.result()  # a bug in the read is raised, as an awaited read's would be
        return cut

    async def _pull_once(self, instance_id: int, targets: dict[str, list[int]],
                         wait_while: frozenset[tuple[int, int]] = frozenset(), settle_sec: float = 0.0,
                         reread_max_sec: float = 0.0) -> None:
        async def one(address: str, ranks: list[int]) -> list[common_pb2.EngineFtStatus]:
            try:
                entries = await self._deps.nodemanagers.get(address).status(
                    instance_id, "", ranks, wait_while, settle_sec, taken_as_evidence=True,
                    reread_max_sec=reread_max_sec)
            except PeerCallError as exc:
                # The NodeManager may have read and taken them: they are owed a read. Its own poll and
                # process watch still report what it did not count as taken.
                log.debug("instance=%d snapshot pull from %s failed: %s", instance_id, address, exc)
                owed.update(ranks)
                return []
            ids = [e.id for e in entries]
            if len(ids) != len(set(ids)) or not set(ids) <= set(ranks):
                log.warning("instance=%d snapshot pull from %s: protocol error, answered endpoint ids %s, asked for "
                            "%s: read dropped", instance_id, address, ids, ranks)
                owed.update(ranks)
                return []
            owed.difference_update(ranks)
            return list(entries)

        owed = self._owed.setdefault(instance_id, set())

        self.pulls += 1
        self.reads += sum(len(r) for r in targets.values())
        sent_wall = self._deps.clock.wall()
        answers = await asyncio.gather(*(one(a, r) for a, r in targets.items()))
        if self._busy(instance_id):
            return
        evidence = self._intake.of(instance_id).evidence
        wall = self._deps.clock.wall()
        found: dict[str, list[int]] = {}
        for entry in (e for entries in answers for e in entries):
            if entry.status == common_pb2.ENGINE_HEALTH_DIAGNOSING:
                self._diagnosing.setdefault((instance_id, entry.id), wall)
                continue
            kind = _KIND.get(entry.status)
            known = evidence.get(entry.id)
            if kind is None or (known is not None and known.health is _HEALTH[kind]):
                continue
            diagnosing_at = self._diagnosing.pop((instance_id, entry.id), 0.0)
            try:
                self._report(instance_id, entry.id, kind, f"pulled by the Controller: {entry.fault_info}",
                             entry.observed_at_unix_sec or sent_wall, diagnosing_at, pulled=True)
            except OlderObservationError as exc:
                log.debug("instance=%d snapshot pull: %s: the newer evidence stands", instance_id, exc)
                continue
            found.setdefault(str(kind), []).append(entry.id)
        if found:
            asked = sum(len(r) for r in targets.values())
            log.info("instance=%d snapshot pull of %d ranks: %s", instance_id, asked,
                     "; ".join(f"{kind} {rank_ranges(ranks)}" for kind, ranks in sorted(found.items())))

