"""Whether fast recovery by `retry` fits a fault (the RFC's EngineFastRecoveryStrategy.is_applicable).
Pure: every input is in FaultFacts, every time is passed in.

All active ranks UNHEALTHY and none DEAD is only the structural precondition (the decision checks it
before asking); sufficiency is judged here, from the fault data the RFC leaves to the strategy:

1. the gate: fault tolerance and fast recovery on;
2. the engines: every pod declared engine FT and `retry` in one agreed FtCapability, and no
   engine-side auto recovery (it would race Motor's retry);
3. the sources: every UNHEALTHY rank's evidence came from its engine's FT status (kind UNHEALTHY),
   no rank is missing from its pod's heartbeats (a silent pod is no transient collective failure);
4. the codes: every UNHEALTHY rank's fault_info matches the policy (refused patterns first, then
   allowed ones; none allowed means any), and every mapped hardware fault on the instance (L4–L6
   only reach here) has only allowed codes;
5. the budget: fewer than max_attempts fast recoveries started within attempt_window_sec.

The first failing check names the refusal; the strategy centre then waits for a DEAD rank or the
collection timeout, as without fast recovery.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field

from motor.common.config.fast_recovery import FastRecoveryConfig, normalize_code
from motor.controller.fault_tolerance.evidence import EvidenceKind, RankEvidence
from motor.controller.model.capability import Capability


@dataclass(frozen=True)
class HardwareFact:
    """A mapped hardware fault on the instance, pending in its correlation window."""

    ranks: frozenset[int]
    level: int
    codes: tuple[str, ...]
    description: str


@dataclass(frozen=True)
class FaultFacts:
    """What is known of one instance's fault when the decision asks: the evidence per rank (its
    kind says its source, its detail the engine's fault_info), the mapped hardware faults, the
    ranks missing from heartbeats, and the agreed capability."""

    instance_id: int
    active_ranks: frozenset[int]
    unhealthy: frozenset[int]
    evidence: Mapping[int, RankEvidence] = field(default_factory=dict)
    hardware: tuple[HardwareFact, ...] = ()
    missing_heartbeat: frozenset[int] = frozenset()
    capability: Capability | None = None
    capability_note: str = ""
    now_sec: float = 0.0

    def describe(self) -> str:
        infos = sorted({ev.detail or "-" for r, ev in self.evidence.items() if r in self.unhealthy})
        hw = "; ".join(h.description for h in self.hardware) or "none"
        return f"unhealthy={sorted(self.unhealthy)} fault_info={infos} hardware={hw}"


@dataclass(frozen=True)
class Applicability:
    applicable: bool
    reason: str


def _matches(patterns: list[str], text: str) -> bool:
    return any(re.search(p, text) for p in patterns)


class AttemptBook:
    """Fast recoveries started per instance, within the sliding window (in memory: a restarted
    Controller starts counting anew)."""

    def __init__(self) -> None:
        self._started: dict[int, deque[float]] = {}

    def count(self, instance_id: int, now_sec: float, window_sec: float) -> int:
        started = self._started.get(instance_id)
        if not started:
            return 0
        while started and now_sec - started[0] >= window_sec:
            started.popleft()
        return len(started)

    def record(self, instance_id: int, now_sec: float, max_kept: int) -> None:
        started = self._started.setdefault(instance_id, deque())
        started.append(now_sec)
        while len(started) > max_kept:
            started.popleft()


def judge(facts: FaultFacts, *, enabled: bool, config: FastRecoveryConfig, attempts_in_window: int) -> Applicability:
    """Whether a retry fits the fault; the reason names the first check that fails (or what fits)."""
    if not enabled:
        return Applicability(False, "fast recovery disabled (enable_fast_recovery=false)")
    if not facts.unhealthy or facts.unhealthy != facts.active_ranks:
        return Applicability(False, f"ranks {sorted(facts.unhealthy)} are not every active rank "
                                    f"{sorted(facts.active_ranks)}")
    cap = facts.capability
    if cap is None:
        return Applicability(False, f"no agreed FT capability: {facts.capability_note or 'unknown'}")
    if not cap.engine_ft_enabled:
        return Applicability(False, "engines run without fault tolerance (engine_ft_enabled=false)")
    if not cap.retry_supported:
        return Applicability(False, "engines do not declare retry (ft_capability.retry_supported=false)")
    if cap.auto_recovery:
        return Applicability(False, "engine-side auto recovery is on (auto_recovery=true)")
    missing = sorted(facts.missing_heartbeat & facts.active_ranks)
    if missing:
        return Applicability(False, f"ranks {missing} are missing from their pods' heartbeats")
    for rank in sorted(facts.unhealthy):
        ev = facts.evidence.get(rank)
        if ev is None or ev.kind is not EvidenceKind.UNHEALTHY:
            kind = "no evidence" if ev is None else f"evidence {ev.kind}"
            return Applicability(False, f"rank {rank} has {kind}, not an UNHEALTHY engine FT status")
        info = ev.detail
        if _matches(config.refused_fault_infos, info):
            return Applicability(False, f"rank {rank} fault_info {info!r} matches refused_fault_infos")
        if config.allowed_fault_infos and not _matches(config.allowed_fault_infos, info):
            return Applicability(False, f"rank {rank} fault_info {info!r} matches no allowed_fault_infos")
    allowed_codes = set(config.allowed_hardware_fault_codes)
    for hw in facts.hardware:
        codes = {normalize_code(c) for c in hw.codes}
        if not codes or not codes <= allowed_codes:
            return Applicability(False, f"hardware fault on ranks {sorted(hw.ranks)} ({hw.description}) has codes "
                                        f"{sorted(codes - allowed_codes) or ['<none>']} not in "
                                        "allowed_hardware_fault_codes")
    if attempts_in_window >= config.max_attempts:
        return Applicability(False, f"{attempts_in_window} fast recoveries within {config.attempt_window_sec:g}s "
                                    f"(max_attempts={config.max_attempts})")
    return Applicability(True, f"transient fault: {facts.describe()}; attempt {attempts_in_window + 1} of "
                               f"{config.max_attempts}")


def collect_facts(*, instance_id: int, active_ranks: frozenset[int], unhealthy: frozenset[int],
                  evidence: Mapping[int, RankEvidence], pending_hardware, window_started_sec: float | None,
                  missing_since_sec: Mapping[int, float], capability: tuple[Capability | None, str],
                  now_sec: float) -> FaultFacts:
    """FaultFacts from the strategy centre's state. `pending_hardware`: correlation.PendingHardware
    entries; a matched entry of an earlier collection window is stale (the correlation ends it)
    and left out."""
    hardware = tuple(
        HardwareFact(p.ranks, p.level, p.codes, p.description) for p in pending_hardware
        if not p.matched or p.window_started_sec == window_started_sec)
    cap, note = capability
    return FaultFacts(instance_id=instance_id, active_ranks=active_ranks, unhealthy=unhealthy,
                      evidence=dict(evidence), hardware=hardware, missing_heartbeat=frozenset(missing_since_sec),
                      capability=cap, capability_note=note, now_sec=now_sec)
