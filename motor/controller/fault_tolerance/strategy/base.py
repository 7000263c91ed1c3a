"""What every recovery strategy shares: the dependencies it acts through, its outcome, and the
stop / finished contract the FaultManager relies on for preemption."""

from __future__ import annotations

import asyncio
import logging
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import IntEnum

from motor.common.config import ControllerConfig
from motor.controller.clients import NodeManagerClients
from motor.controller.clock import Clock
from motor.controller.fault_tolerance.dp_scale_down import FtPhase, FtRuntimeStore, RankEvidence
from motor.controller.fault_tolerance.timeline import TimelineBook, TimelineEvent, Transaction
from motor.controller.instances import InstanceRegistry
from motor.controller.serving import EventPusher

log = logging.getLogger(__name__)

FALLBACK_RECONFIGURATION = "instance_reconfiguration"


class Priority(IntEnum):
    """Higher preempts lower. Fast recovery is never preempted by scale-down (RFC §4.3)."""

    RECONFIGURATION = 10
    DP_SCALE_DOWN = 20
    FAST_RECOVERY = 30
    # Slot for TokenReinference-like special strategies that outrank everything else.
    SPECIAL = 40


@dataclass
class ControllerDeps:
    """Everything a strategy acts through. `persist` writes one instance's runtime (CAS)."""

    config: ControllerConfig
    runtimes: FtRuntimeStore
    registry: InstanceRegistry
    nodemanagers: NodeManagerClients
    pusher: EventPusher
    timelines: TimelineBook
    clock: Clock
    persist: Callable[[int], Awaitable[None]]
    changed: Callable[[int], None]


@dataclass(frozen=True)
class Outcome:
    succeeded: bool
    detail: str
    # For a failed scale-down: the fallback to run next (frozen at decision time).
    fallback: str | None = None
    # Wall time of the last engine observation that proved the outcome (evidence older than this
    # is superseded).
    observed_at_sec: float = 0.0


class Strategy(ABC):
    name: str
    priority: Priority

    def __init__(self, deps: ControllerDeps, instance_id: int) -> None:
        self.deps = deps
        self.instance_id = instance_id
        self._finished = asyncio.Event()
        self._stop_requested = False
        self.txn: Transaction | None = None
        self.evidence: list[RankEvidence] = []

    def stop(self) -> None:
        """Asks the strategy to stop; the FaultManager cancels its task and waits for both."""
        self._stop_requested = True

    @property
    def stop_requested(self) -> bool:
        return self._stop_requested

    def is_finished(self) -> bool:
        return self._finished.is_set()

    async def run(self) -> Outcome:
        try:
            return await self.execute()
        finally:
            self._finished.set()

    @abstractmethod
    async def execute(self) -> Outcome: ...

    # Helpers shared by the executors.

    def begin_transaction(self, request_id: str) -> Transaction:
        """Opens the timeline, starting with the evidence that led here (NodeManager observation
        time; the detail says when the Controller received it)."""
        txn = self.deps.timelines.begin(self.instance_id, self.name, request_id, self.deps.clock.wall())
        for ev in self.evidence:
            txn.events.append(TimelineEvent(
                ev.observed_at_sec, "evidence", str(ev.kind), detail=f"rank={ev.rank} received_at={ev.received_at_sec:.6f} {ev.detail}"))
        self.txn = txn
        return txn

    def set_phase(self, phase: FtPhase, detail: str = "") -> None:
        runtime = self.deps.runtimes.set_phase(self.instance_id, phase)
        if self.txn is not None:
            self.txn.phase(str(phase), self.deps.clock.wall(), detail)
        log.info("instance=%d phase=%s request_id=%s %s", self.instance_id, runtime.phase, runtime.request_id, detail)
        self.deps.changed(self.instance_id)
