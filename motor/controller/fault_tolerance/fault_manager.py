"""FaultManager: the Controller's one entry point for fault evidence (RFC §4.3, §4.4). It builds the
three seams of the RFC, each collaborator through its constructor and in dependency order, and adds
only the clock reads and the wake-ups:

- `evidence_intake.EvidenceIntake`: software reports and heartbeats per instance (pure);
- `hardware_intake.HardwareIntake`: hardware faults → ranks → forced fallback or correlation (pure);
- `decision.decide` and `correlation.HardwareCorrelation`: the priority decision (pure);
- `strategy_center.StrategyCenter`: start, drive, escalate and stop strategies.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable

from motor.controller.fault_tolerance.correlation import HardwareCorrelation
from motor.controller.fault_tolerance.evidence import EvidenceKind, RankEvidence
from motor.controller.fault_tolerance.evidence_intake import EvidenceIntake, OlderObservationError
from motor.controller.fault_tolerance.hardware_intake import HardwareIntake
from motor.controller.fault_tolerance.idle_probe import IdleProbe
from motor.controller.fault_tolerance.running import RunningStrategies
from motor.controller.fault_tolerance.snapshot_pull import SnapshotPuller
from motor.controller.fault_tolerance.strategy.base import ControllerDeps, Strategy
from motor.controller.fault_tolerance.strategy.fast_recovery import RetryFastRecovery
from motor.controller.fault_tolerance.strategy_center import FastRecovery, StrategyCenter
from motor.controller.hardware.model import HardwareFault
from motor.controller.hardware.resolver import TopologyResolver

log = logging.getLogger(__name__)


class SoftwareReports:
    """Software reports into the evidence intake, with the clock reads; every recorded one wakes the
    strategy centre."""

    def __init__(self, deps: ControllerDeps, intake: EvidenceIntake, wake: Callable[[], None]) -> None:
        self._deps = deps
        self._intake = intake
        self._wake = wake

    def record(
        self, instance_id: int, endpoint_id: int, kind: EvidenceKind, detail: str, observed_at_sec: float,
        diagnosing_at_sec: float = 0.0, *, pulled: bool = False,
    ) -> RankEvidence | None:
        """The evidence recorded (None: the rank is committed dead). Raises UnknownInstanceError /
        NormalizationError / OlderObservationError (newer evidence of the rank is held). `pulled`:
        read by the snapshot puller, which logs one summary line per read (this one is DEBUG)."""
        runtime = self._deps.runtimes.get(instance_id)
        evidence = self._intake.record_software(runtime, endpoint_id, kind, detail, observed_at_sec,
                                                self._deps.clock.wall(), self._deps.clock.monotonic(),
                                                diagnosing_at_sec)
        if evidence is None:
            return None
        log.log(logging.DEBUG if pulled else logging.INFO, "instance=%d rank=%d evidence=%s detail=%s", instance_id,
                endpoint_id, kind, detail)
        self._wake()
        return evidence


class FaultManager:
    def __init__(self, deps: ControllerDeps, fast_recovery: FastRecovery | None = None,
                 on_hardware_fault: Callable[[str, bool], None] = lambda level, mapped: None) -> None:
        """`on_hardware_fault`: (level "L1".."L6", mapped to ranks of an instance) once per new
        hardware fault (the metrics)."""
        self.deps = deps
        ft = deps.config.fault_tolerance_config
        self.intake = EvidenceIntake()
        self.correlation = HardwareCorrelation(ft.hardware_ft_correlation_window_sec)
        running = RunningStrategies()
        self.hardware = HardwareIntake(
            ft, deps.registry, deps.runtimes, self.correlation,
            # Card names: MindCluster's forms plus hardware_monitor.card_name_prefixes (RFC §4.2 mapping).
            TopologyResolver.from_config(deps.config.hardware_monitor),
            busy=running.busy, window_started=lambda iid: self.intake.of(iid).window_started_sec,
            on_busy_fault=running.note_hardware,
            on_fault=on_hardware_fault,
        )
        wake = asyncio.Event()
        self.reports = SoftwareReports(deps, self.intake, wake.set)
        self.puller = SnapshotPuller(deps, self.intake, self.reports.record, busy=running.busy)
        self.idle_probe = IdleProbe(deps)
        self.center = StrategyCenter(deps, self.intake, self.hardware, self.correlation, running,
                                     fast_recovery or RetryFastRecovery(ft), wake=wake, on_waiting=self.puller.ensure,
                                     on_started=self.puller.poke,
                                     idle_probe=self.idle_probe)

    def report_software(
        self, instance_id: int, endpoint_id: int, kind: EvidenceKind, detail: str, observed_at_sec: float,
        diagnosing_at_sec: float = 0.0,
    ) -> str:
        """Records one report; returns what was done. Raises UnknownInstanceError / NormalizationError.
        A recorded report also wakes the snapshot puller of its instance (its own finds it follows up)."""
        try:
            evidence = self.reports.record(instance_id, endpoint_id, kind, detail, observed_at_sec, diagnosing_at_sec)
        except OlderObservationError as exc:
            log.info("instance=%d %s: the newer evidence stands", instance_id, exc)
            return f"rank {endpoint_id} {kind} is older than the {exc.held.kind} held: ignored"
        if evidence is None:
            return f"rank {endpoint_id} is committed dead: ignored"
        self.puller.poke(instance_id)
        return f"rank {endpoint_id} {evidence.health}"

    def observe_heartbeat(self, instance_id: int, pod_ranks: Iterable[int], expected: Iterable[int],
                          alive: Iterable[int]) -> tuple[frozenset[int], frozenset[int]]:
        """(missing, unexpected) ranks of one pod's heartbeat against the exact set it must report."""
        missing, unexpected = self.intake.observe_heartbeat(instance_id, pod_ranks, expected, alive,
                                                            self.deps.clock.monotonic())
        if missing or unexpected:
            self.notify()
        return missing, unexpected

    def report_hardware(self, faults: list[HardwareFault]) -> list[str]:
        """RFC §4.4 rules for hardware evidence; returns what was done with each fault."""
        notes = self.hardware.report(faults, self.deps.clock.monotonic())
        self.notify()
        return notes

    def last_hardware_note(self, key: object) -> str:
        return self.hardware.last_note(key)

    def evidence(self, instance_id: int) -> dict[int, RankEvidence]:
        return dict(self.intake.of(instance_id).evidence)

    def running(self, instance_id: int) -> Strategy | None:
        return self.center.running(instance_id)

    def waits(self, instance_id: int) -> list[tuple[str, float, str]]:
        """What the instance waits for: (what, until in monotonic seconds, detail), soonest first —
        the open collection window, each hardware fault's correlation window, the reconfiguration
        backoff. Read-only (the operator console shows it)."""
        ft = self.deps.config.fault_tolerance_config
        out: list[tuple[str, float, str]] = []
        started = self.intake.of(instance_id).window_started_sec
        if started is not None:
            out.append(("collection_timeout", started + ft.software_status_collection_timeout_sec,
                        "a complete snapshot of every rank's evidence, or the collection timeout"))
        for p in self.correlation.pending(instance_id):
            if not p.matched:
                out.append(("correlation_window", p.deadline_sec,
                            f"the FT framework to see the hardware fault ({p.description}) on ranks {sorted(p.ranks)}"))
        retry_at, reason = self.center.retry_after(instance_id)
        if retry_at is not None:
            out.append(("backoff", retry_at, reason or "the next reconfiguration attempt"))
        return sorted(out, key=lambda w: w[1])

    def notify(self) -> None:
        self.center.notify()

    def pod_registered(self, instance_id: int) -> None:
        self.center.resume_reconfiguration(instance_id)

    def start(self) -> None:
        self.center.start()

    async def close(self) -> None:
        await self.puller.close()
        await self.idle_probe.close()
        await self.center.close()

    async def evaluate_all(self) -> None:
        await self.center.evaluate_all()
