"""Snapshot pulls: once an instance has fault evidence but no complete snapshot, the Controller reads
every active rank's FT status itself (one Status RPC per pod, at a short interval) instead of waiting
for each NodeManager's next 1 Hz poll. Detection then follows the engines' own pace (their
`diagnosing` phase, their collective timeout) rather than the poll period, and the steady state costs
nothing: pulls run only while a collection window is open.

Bounded: one puller per instance, at most collection-timeout / interval pulls, ended by a strategy
starting, the evidence clearing, the window closing, or the Controller stopping. What it reads is
fed through the same intake as a NodeManager's report (DEAD and UNHEALTHY only: a healthy or
diagnosing answer is no news), so the decision never depends on who saw the fault first.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from gen.motor.v1 import common_pb2
from motor.controller.clients import PeerCallError
from motor.controller.fault_tolerance.evidence import EvidenceKind, Health
from motor.controller.fault_tolerance.evidence_intake import EvidenceIntake
from motor.controller.fault_tolerance.strategy.base import ControllerDeps

log = logging.getLogger(__name__)

_KIND = {common_pb2.ENGINE_HEALTH_UNHEALTHY: EvidenceKind.UNHEALTHY, common_pb2.ENGINE_HEALTH_DEAD: EvidenceKind.DEAD}
_HEALTH = {EvidenceKind.UNHEALTHY: Health.UNHEALTHY, EvidenceKind.DEAD: Health.DEAD}

# (instance_id, endpoint_id, kind, detail, observed_at_sec) → what was done, as FaultManager.report_software.
Report = Callable[[int, int, EvidenceKind, str, float], str]


class SnapshotPuller:
    def __init__(self, deps: ControllerDeps, intake: EvidenceIntake, report: Report,
                 busy: Callable[[int], bool]) -> None:
        self._deps = deps
        self._intake = intake
        self._report = report
        self._busy = busy
        self._tasks: dict[int, asyncio.Task[None]] = {}
        self.pulls = 0

    @property
    def interval_sec(self) -> float:
        return self._deps.config.snapshot_pull_interval_sec

    def ensure(self, instance_id: int) -> None:
        """Starts pulling for the instance unless it already is (or pulls are off)."""
        task = self._tasks.get(instance_id)
        if self.interval_sec <= 0 or (task is not None and not task.done()):
            return
        self._tasks[instance_id] = asyncio.create_task(self._run(instance_id), name=f"snapshot-pull-{instance_id}")

    async def close(self) -> None:
        tasks, self._tasks = list(self._tasks.values()), {}
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _targets(self, instance_id: int) -> dict[str, list[int]]:
        """Per NodeManager address: the active, routable ranks of the instance (retired and headless
        ones have no status to read)."""
        record = self._deps.registry.get(instance_id)
        runtime = self._deps.runtimes.find(instance_id)
        if record is None or runtime is None:
            return {}
        endpoints = record.endpoint_infos()
        out: dict[str, list[int]] = {}
        for pod in record.pod_infos():
            ranks = [r for r in pod.ranks if r in runtime.active_ranks and not endpoints[r].headless]
            if ranks:
                out[pod.node_manager_address] = ranks
        return out

    def _window_open(self, instance_id: int) -> bool:
        return self._intake.of(instance_id).window_started_sec is not None

    async def _run(self, instance_id: int) -> None:
        ft = self._deps.config.fault_tolerance_config
        bound = max(1, int(ft.software_status_collection_timeout_sec / self.interval_sec))
        for _ in range(bound):
            if self._busy(instance_id) or not self._window_open(instance_id):
                return
            await self._pull_once(instance_id)
            await asyncio.sleep(self.interval_sec)

    async def _pull_once(self, instance_id: int) -> None:
        targets = self._targets(instance_id)

        async def one(address: str, ranks: list[int]) -> list[common_pb2.EngineFtStatus]:
            try:
                return await self._deps.nodemanagers.get(address).status(instance_id, "", ranks)
            except PeerCallError as exc:
                # The NodeManager's own poll and the process watch still report; a pull is a shortcut.
                log.debug("instance=%d snapshot pull from %s failed: %s", instance_id, address, exc)
                return []

        self.pulls += 1
        answers = await asyncio.gather(*(one(a, r) for a, r in targets.items()))
        if self._busy(instance_id):
            return
        evidence = self._intake.of(instance_id).evidence
        wall = self._deps.clock.wall()
        for entry in (e for entries in answers for e in entries):
            kind = _KIND.get(entry.status)
            known = evidence.get(entry.id)
            if kind is None or (known is not None and known.health is _HEALTH[kind]):
                continue
            note = self._report(instance_id, entry.id, kind, f"pulled by the Controller: {entry.fault_info}", wall)
            log.info("instance=%d rank=%d snapshot pull: %s", instance_id, entry.id, note)
