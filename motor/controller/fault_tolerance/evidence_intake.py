"""Software and heartbeat evidence per instance: the inputs of the RFC §4.3 decision. Pure: every time
is passed in (monotonic seconds for comparisons, wall seconds only for the timeline).

Evidence is in-process only (first-seen times, collection windows, missing heartbeats), never
persisted: a restarted Controller rebuilds it from the next reports.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from motor.controller.fault_tolerance.evidence import EvidenceKind, FaultNormalizer, Health, RankEvidence, RankRead
from motor.controller.model.runtime import TRANSACTION_PHASES, FtPhase, FtRuntime


@dataclass
class InstanceEvidence:
    evidence: dict[int, RankEvidence] = field(default_factory=dict)
    first_seen_sec: dict[int, float] = field(default_factory=dict)
    # The collection window opens at the first UNHEALTHY/DEAD of a round; later reports do not extend it.
    window_started_sec: float | None = None
    missing_since_sec: dict[int, float] = field(default_factory=dict)
    # Ranks a heartbeat reports alive that it must not (committed dead, or not the pod's): the RFC's
    # exact-set contract is broken, handled like a partial loss once it outlasts the grace.
    unexpected_since_sec: dict[int, float] = field(default_factory=dict)

    def health(self) -> dict[int, Health]:
        return {rank: ev.health for rank, ev in self.evidence.items()}


class OlderObservationError(ValueError):
    """A report observed before the evidence held for its rank: the newer observation stands."""

    def __init__(self, incoming: RankEvidence, held: RankEvidence) -> None:
        super().__init__(f"rank {incoming.rank} {incoming.kind} observed at {incoming.observed_at_sec:.3f} is older "
                         f"than the {held.kind} observed at {held.observed_at_sec:.3f}")
        self.held = held


class EvidenceIntake:
    def __init__(self) -> None:
        self._by_instance: dict[int, InstanceEvidence] = {}

    def of(self, instance_id: int) -> InstanceEvidence:
        return self._by_instance.setdefault(instance_id, InstanceEvidence())

    def window_open(self, instance_id: int) -> bool:
        """Whether a collection window is open on the instance (RFC §4.3)."""
        return self.of(instance_id).window_started_sec is not None

    def instances(self) -> list[InstanceEvidence]:
        return list(self._by_instance.values())

    def record_software(
        self, runtime: FtRuntime, endpoint_id: int, kind: EvidenceKind, detail: str, observed_at_sec: float,
        received_at_sec: float, now_sec: float, diagnosing_at_sec: float = 0.0,
    ) -> RankEvidence | None:
        """The recorded evidence, or None for a committed dead rank. Raises NormalizationError, and
        OlderObservationError for a report observed before the evidence held for its rank.

        Evidence of a rank is ordered by when it was observed, not when it arrived: a NodeManager's
        queued report can arrive after a snapshot pull read something newer, and a pull's answer
        after a report of something newer. Both times of one rank are its NodeManager's wall clock
        (the report's observation, the pull's engine read), so they compare without skew. On a tie
        the later arrival wins."""
        evidence = FaultNormalizer(runtime.original_dp_ranks).normalize(
            endpoint_id, kind, detail, observed_at_sec, runtime.dead_committed
        )
        if evidence is None:
            return None
        evidence = dataclasses.replace(evidence, received_at_sec=received_at_sec, received_mono_sec=now_sec,
                                       diagnosing_at_sec=diagnosing_at_sec)
        state = self.of(runtime.instance_id)
        held = state.evidence.get(endpoint_id)
        if held is not None and evidence.observed_at_sec < held.observed_at_sec:
            raise OlderObservationError(evidence, held)
        if evidence.health is Health.HEALTHY:
            state.evidence.pop(endpoint_id, None)
            state.first_seen_sec.pop(endpoint_id, None)
            if not state.evidence:
                state.window_started_sec = None
        else:
            state.evidence[endpoint_id] = evidence
            state.first_seen_sec.setdefault(endpoint_id, now_sec)
            if state.window_started_sec is None:
                state.window_started_sec = now_sec
        return evidence

    def observe_heartbeat(self, instance_id: int, pod_ranks: Iterable[int], expected: Iterable[int],
                          alive: Iterable[int], now_sec: float) -> tuple[frozenset[int], frozenset[int]]:
        """Tracks ranks a pod's heartbeat leaves out, and ranks it reports that it must not; returns
        both as they are now (missing, unexpected)."""
        state = self.of(instance_id)
        expected_set, alive_set = set(expected), set(alive)
        missing = frozenset(expected_set - alive_set)
        unexpected = frozenset(alive_set - expected_set)
        for rank in expected_set:
            if rank in missing:
                state.missing_since_sec.setdefault(rank, now_sec)
            else:
                state.missing_since_sec.pop(rank, None)
        for rank in set(pod_ranks) - unexpected:
            state.unexpected_since_sec.pop(rank, None)
        for rank in unexpected:
            state.unexpected_since_sec.setdefault(rank, now_sec)
        return missing, unexpected

    def mark_silent(self, instance_id: int, ranks: Iterable[int], since_sec: float) -> None:
        """A pod whose heartbeats stopped counts as missing every rank it should report."""
        state = self.of(instance_id)
        for rank in ranks:
            state.missing_since_sec.setdefault(rank, since_sec)

    def partial_loss(self, instance_id: int, phase: FtPhase, dead_committed: frozenset[int], now_sec: float,
                     grace_sec: float) -> str:
        """The baseline partial-loss whole-instance shutdown; suppressed in the transaction window
        and never driven by ranks that already have software DEAD evidence (that path decides)."""
        if phase in TRANSACTION_PHASES:
            return ""
        state = self.of(instance_id)
        lost = sorted(
            rank
            for rank, since in state.missing_since_sec.items()
            if rank not in dead_committed
            and now_sec - since >= grace_sec
            and not (rank in state.evidence and state.evidence[rank].health is Health.DEAD)
        )
        if lost:
            return f"partial loss: ranks {lost} missing from heartbeats for {grace_sec:g}s"
        extra = sorted(r for r, since in state.unexpected_since_sec.items() if now_sec - since >= grace_sec)
        if extra:
            return (f"heartbeat exact-set broken: ranks {extra} reported alive for {grace_sec:g}s although "
                    f"committed dead or not the pod's (dead_committed {sorted(dead_committed)})")
        return ""

    def settle(self, instance_id: int, dead_committed: frozenset[int], observed_mono_sec: float,
               whole_rebuild: bool, last_reads: Mapping[int, RankRead] | None = None) -> None:
        """After a successful strategy: committed ranks are done, a whole rebuild forgets every missing
        heartbeat, and the strategy's engine observations supersede the reports they are newer than.

        A rank the strategy read on its own (`last_reads`: a round's status reads, a rebuild's start
        of the rank's engines) is superseded only by its own last read: a survivor seen healthy after
        apply is not read again, and a rebuilt engine is not read after it started, so a death
        reported after that read is news for the next decision, not something the strategy saw.
        Receipt times are compared with when the read was asked for (a report received at that
        instant is older than the read), on the Controller's monotonic clock (the NodeManagers' wall
        clocks may be skewed); a report received later but observed, on its NodeManager's clock, no
        later than that NodeManager's read (or its spawn of the new engines) is superseded too. Any
        other rank is superseded by `observed_mono_sec`, the strategy's last observation."""
        state = self.of(instance_id)
        reads = last_reads or {}
        for rank, ev in list(state.evidence.items()):
            read = reads.get(rank)
            if read is None:
                superseded = ev.received_mono_sec <= observed_mono_sec
            else:
                superseded = ev.received_mono_sec <= read.mono_sec or 0 < ev.observed_at_sec <= read.observed_at_sec
            if rank in dead_committed or superseded:
                del state.evidence[rank]
                state.first_seen_sec.pop(rank, None)
        for rank in list(state.missing_since_sec):
            if rank in dead_committed or whole_rebuild:
                del state.missing_since_sec[rank]
        if whole_rebuild:
            state.unexpected_since_sec.clear()
        state.window_started_sec = min(state.first_seen_sec.values(), default=None)

    def deadlines(self, collection_timeout_sec: float, grace_sec: float) -> list[float]:
        out = []
        for state in self._by_instance.values():
            if state.window_started_sec is not None:
                out.append(state.window_started_sec + collection_timeout_sec)
            out.extend(t + grace_sec for t in state.missing_since_sec.values())
            out.extend(t + grace_sec for t in state.unexpected_since_sec.values())
        return out
