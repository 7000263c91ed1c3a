"""FaultManager: the Controller's one entry point for fault evidence (RFC §4.3, §4.4). It wires the
three seams of the RFC together and adds only the clock reads and the wake-ups:

- `evidence_intake.EvidenceIntake`: software reports and heartbeats per instance (pure);
- `hardware_intake.HardwareIntake`: hardware faults → ranks → forced fallback or correlation (pure);
- `decision.decide` and `correlation.HardwareCorrelation`: the priority decision (pure);
- `strategy_center.StrategyCenter`: start, drive, escalate and stop strategies.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from motor.controller.fault_tolerance.correlation import HardwareCorrelation
from motor.controller.fault_tolerance.evidence import EvidenceKind, RankEvidence
from motor.controller.fault_tolerance.evidence_intake import EvidenceIntake
from motor.controller.fault_tolerance.hardware_intake import HardwareIntake
from motor.controller.fault_tolerance.idle_probe import IdleProbe
from motor.controller.fault_tolerance.snapshot_pull import SnapshotPuller
from motor.controller.fault_tolerance.strategy.base import ControllerDeps, Strategy
from motor.controller.fault_tolerance.strategy_center import FastRecovery, NoFastRecovery, StrategyCenter
from motor.controller.hardware.model import HardwareFault
from motor.controller.hardware.resolver import TopologyResolver

log = logging.getLogger(__name__)


class FaultManager:
    def __init__(self, deps: ControllerDeps, fast_recovery: FastRecovery | None = None) -> None:
        self.deps = deps
        ft = deps.config.fault_tolerance_config
        self.intake = EvidenceIntake()
        self.correlation = HardwareCorrelation(ft.hardware_ft_correlation_window_sec)
        self.hardware = HardwareIntake(
            ft, deps.registry, deps.runtimes, self.correlation,
            busy=lambda iid: self.center.running(iid) is not None,
            window_open=lambda iid: self.intake.of(iid).window_started_sec is not None,
        )
        # Card names: MindCluster's forms plus hardware_monitor.card_name_prefixes (RFC §4.2 mapping).
        self.hardware.resolver = TopologyResolver.from_config(deps.config.hardware_monitor)
        self.center = StrategyCenter(deps, self.intake, self.hardware, self.correlation,
                                     fast_recovery or NoFastRecovery())
        self.hardware.on_busy_fault = self._hardware_during_strategy
        self.puller = SnapshotPuller(deps, self.intake, self.report_software,
                                     busy=lambda iid: self.center.running(iid) is not None)
        self.center.on_waiting = self.puller.ensure
        self.idle_probe = self.center.idle_probe = IdleProbe(deps)

    def _hardware_during_strategy(self, instance_id: int, ranks: frozenset[int], description: str) -> None:
        running = self.center.running(instance_id)
        if running is not None:
            running.note_hardware(ranks, description)

    def report_software(
        self, instance_id: int, endpoint_id: int, kind: EvidenceKind, detail: str, observed_at_sec: float,
        diagnosing_at_sec: float = 0.0, *, pulled: bool = False,
    ) -> str:
        """Records one report; returns what was done. Raises UnknownInstanceError / NormalizationError.
        `pulled`: read by the snapshot puller, which logs one summary line per read (this one is DEBUG)
        and follows up its own finds; any other report wakes the puller."""
        runtime = self.deps.runtimes.get(instance_id)
        evidence = self.intake.record_software(runtime, endpoint_id, kind, detail, observed_at_sec,
                                               self.deps.clock.wall(), self.deps.clock.monotonic(),
                                               diagnosing_at_sec)
        if evidence is None:
            return f"rank {endpoint_id} is committed dead: ignored"
        log.log(logging.DEBUG if pulled else logging.INFO, "instance=%d rank=%d evidence=%s detail=%s", instance_id,
                endpoint_id, kind, detail)
        if not pulled:
            self.puller.poke(instance_id)
        self.notify()
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
