"""What every recovery strategy shares: the dependencies it acts through, its outcome, and the
stop / finished contract the FaultManager relies on for preemption."""

from __future__ import annotations

import asyncio
import logging
import uuid
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, TypeVar

from motor.controller.clients import NodeManagerClients, PeerCallError
from motor.controller.clock import Clock
from motor.controller.config import ControllerConfig
from motor.controller.fault_tolerance.evidence import RankEvidence, RankRead
from motor.controller.fault_tolerance.timeline import TimelineBook, Transaction
from motor.controller.instances import InstanceRegistry
from motor.controller.model.runtime import FtPhase, FtRuntimeStore
from motor.controller.publishers.fanout import Publication
from motor.controller.serving import PublishError, project_serving_view

log = logging.getLogger(__name__)

T = TypeVar("T")


class Priority(IntEnum):
    """Higher preempts lower. Fast recovery is never preempted by scale-down (RFC §4.3)."""

    RECONFIGURATION = 10
    DP_SCALE_DOWN = 20
    FAST_RECOVERY = 30


def random_id() -> str:
    """12 hex digits of a uuid4: the unique part of a request id (`sd-<instance>-<hex>`)."""
    return uuid.uuid4().hex[:12]


@dataclass
class ControllerDeps:
    """Everything a strategy acts through. `persist` writes one instance's runtime (CAS); `new_id`
    names requests (rounds, reconfigurations, probes) uniquely."""

    config: ControllerConfig
    runtimes: FtRuntimeStore
    registry: InstanceRegistry
    nodemanagers: NodeManagerClients
    pusher: Publication
    timelines: TimelineBook
    clock: Clock
    persist: Callable[[int], Awaitable[None]]
    changed: Callable[[int], None]
    new_id: Callable[[], str] = random_id


Facts = Mapping[str, Any]


async def timed_call(
    txn: Transaction | None,
    clock: Clock,
    name: str,
    target: str,
    make: Callable[[], Awaitable[T]],
    facts: Facts | None = None,
    result_facts: Callable[[T], Facts] | None = None,
    split: Callable[[T], CallTail | None] | None = None,
) -> T:
    """Runs one remote call and records it in the timeline (start, duration, outcome and typed facts,
    `result_facts` computed from the answer); errors of the peer are recorded and re-raised. With
    `split`, an answer that carried a second call's work (a status read riding on a guard or an
    apply) is recorded as two calls: the second took the call's last `tail.duration_sec`."""
    wall, start = clock.wall(), clock.monotonic()
    try:
        result = await make()
    except (PeerCallError, PublishError) as exc:
        if txn is not None:
            txn.call(name, target, wall, clock.monotonic() - start, str(exc), **(facts or {}))
        raise
    if txn is not None:
        total = clock.monotonic() - start
        tail = split(result) if split is not None else None
        head = total if tail is None else max(0.0, total - tail.duration_sec)
        txn.call(name, target, wall, head, **(facts or {}), **(result_facts(result) if result_facts else {}))
        if tail is not None:
            txn.call(tail.name, target, wall + head, total - head, tail.error, **tail.facts)
    return result


@dataclass(frozen=True)
class CallTail:
    """The second call an answer carried: its timeline name, how long it took at the end of the
    call, its facts, and why it failed (empty: it did not)."""
    name: str
    duration_sec: float
    facts: Facts
    error: str = ""


async def publish_serving_view(deps: ControllerDeps, instance_id: int, txn: Transaction | None = None) -> None:
    """ADD of the instance's projected view; serving_published follows the publishers' answers.
    A failure only sets last_error: the periodic SET converges later (RFC §5)."""
    record = deps.registry.get(instance_id)
    if record is None:
        return
    if not deps.pusher.enabled:
        deps.runtimes.set_published(instance_id, True)
        return
    view = project_serving_view(record.topology(), deps.runtimes.get(instance_id))
    try:
        ids = [e.id for e in view.endpoints]
        await timed_call(txn, deps.clock, "publish", deps.pusher.target, lambda: deps.pusher.add(view),
                         {"endpoint_ids": ids, "detail": f"ADD endpoints={ids}"})
    except PublishError as exc:
        deps.runtimes.set_published(instance_id, False, f"publish failed: {exc}")
        log.warning("instance=%d publish failed; a later SET converges: %s", instance_id, exc)
        return
    deps.runtimes.set_published(instance_id, True)


@dataclass(frozen=True)
class Prelude:
    """What led to a strategy, the first entries of its timeline: the evidence in observation order,
    and the idle-fault probe canaries (idle_probe.ProbeRecord) of the collection window."""

    evidence: tuple[RankEvidence, ...] = ()
    probes: tuple[Any, ...] = ()


@dataclass(frozen=True)
class Outcome:
    succeeded: bool
    detail: str
    # For a failed scale-down: the fallback to run next (frozen at decision time).
    fallback: str | None = None
    # Controller monotonic time of the last engine observation that proved the outcome (evidence
    # received before it is superseded).
    observed_mono_sec: float = 0.0
    # The last read of each rank the strategy read, when it read ranks one by one (a survivor seen
    # healthy after apply is not read again): a rank's evidence is superseded only by its own read.
    last_reads: Mapping[int, RankRead] = field(default_factory=dict)
    # For a failed strategy with a fallback of its own (a failed scale-up's planned restoration): the
    # strategy the centre starts next, in place of the whole-instance reconfiguration.
    next_strategy: Strategy | None = None


class Strategy(ABC):
    name: str
    priority: Priority

    def __init__(self, deps: ControllerDeps, instance_id: int) -> None:
        self.deps = deps
        self.instance_id = instance_id
        self._finished = asyncio.Event()
        self._stop_requested = False
        self.txn: Transaction | None = None
        self._prelude = Prelude()
        # Mapped hardware faults that arrived while this strategy ran: (ranks, description).
        self.hardware_faults: list[tuple[frozenset[int], str]] = []

    def note_hardware(self, ranks: frozenset[int], description: str) -> None:
        """A hardware fault on the instance while this strategy runs: evidence it must take into account."""
        self.hardware_faults.append((frozenset(ranks), description))
        if self.txn is not None:
            self.txn.note("hardware_fault", self.deps.clock.wall(), description, hardware_ranks=sorted(ranks))

    def stop(self) -> None:
        """Asks the strategy to stop; the FaultManager cancels its task and waits for both."""
        self._stop_requested = True

    @property
    def stop_requested(self) -> bool:
        return self._stop_requested

    def is_finished(self) -> bool:
        return self._finished.is_set()

    async def run(self, prelude: Prelude = Prelude()) -> Outcome:
        """Executes once; `prelude` opens the transaction's timeline (begin_transaction)."""
        self._prelude = prelude
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
        for ev in self._prelude.evidence:
            txn.evidence(ev)
        for probe in self._prelude.probes:
            error = probe.detail if probe.outcome == "error" else ""
            txn.call("canary", probe.target, probe.at_wall_sec, probe.duration_sec, error,
                     **({} if error else {"outcome": probe.outcome}),
                     endpoint_ids=[probe.endpoint_id] if probe.endpoint_id >= 0 else [],
                     request_id=probe.request_id, detail=f"idle-fault probe to {list(probe.candidates)}: "
                                                          f"{probe.outcome}: {probe.detail}")
        self.txn = txn
        return txn

    async def note_reinference(self) -> None:
        """Records how many requests the Coordinator continued elsewhere (re-inference) since the last
        transaction of the instance: a `reinference` note and the runtime's migrated_requests. One
        bounded read; a failure is only logged."""
        client = self.deps.pusher.coordinator
        if client is None:
            return
        try:
            listed = await client.list_instances()
        except PeerCallError as exc:
            log.warning("instance=%d reading the Coordinator's re-inference counts failed: %s", self.instance_id, exc)
            return
        total = next((r.migrated_requests for r in listed.reinference if r.instance_id == self.instance_id), 0)
        migrated = self.deps.runtimes.record_reinference(self.instance_id, total)
        if self.txn is not None:
            self.txn.note("reinference", self.deps.clock.wall(),
                          f"{migrated} requests continued elsewhere by the Coordinator (re-inference)",
                          migrated_requests=migrated)
        log.info("instance=%d %d requests continued elsewhere by the Coordinator during the transaction",
                 self.instance_id, migrated)

    async def timed_call(self, name: str, target: str, make: Callable[[], Awaitable[T]], facts: Facts | None = None,
                         result_facts: Callable[[T], Facts] | None = None,
                         split: Callable[[T], CallTail | None] | None = None) -> T:
        return await timed_call(self.txn, self.deps.clock, name, target, make, facts, result_facts, split)

    async def drain(self) -> None:
        """DEL of exactly the published view, waited for (RFC: the drain is synchronous).

        Decision: a failed DEL is recorded in the timeline and the round goes on, unlike
        the vendor's implementation, which fails the round. Failing would turn a one-second
        scale-down into a whole-instance reconfiguration (minutes) because the Coordinator blinked,
        and it buys no safety: the survivors answer 503 until they are rebuilt and the Coordinator
        retries elsewhere before the first byte; the publish after the commit and the periodic SET
        converge the Coordinator's view.

        Decision: with nothing acknowledged as published (the first ADD and every SET since failed)
        there is nothing to DEL: no call is made, a note says so and the round goes on, drain then
        apply holding with an empty view. An ADD the Coordinator applied without its answer arriving
        leaves it routing a view the Controller does not know of, the case of a failed DEL above."""
        deps = self.deps
        record = deps.registry.get(self.instance_id)
        if record is not None and deps.pusher.enabled:
            wall, start = deps.clock.wall(), deps.clock.monotonic()
            try:
                ids = await deps.pusher.drain(record.topology())
            except PublishError as exc:
                if self.txn is not None:
                    self.txn.call("drain", deps.pusher.target, wall, deps.clock.monotonic() - start, str(exc))
                log.warning("instance=%d drain failed (continuing): %s", self.instance_id, exc)
            else:
                if ids is None:
                    if self.txn is not None:
                        self.txn.note("drain", wall, "nothing published: no DEL sent")
                    log.info("instance=%d nothing published: no DEL sent", self.instance_id)
                elif self.txn is not None:
                    self.txn.call("drain", deps.pusher.target, wall, deps.clock.monotonic() - start,
                                  endpoint_ids=list(ids), detail=f"DEL endpoints={list(ids)}")
        deps.runtimes.set_published(self.instance_id, False)

    async def publish(self) -> None:
        await publish_serving_view(self.deps, self.instance_id, self.txn)

    def set_phase(self, phase: FtPhase, detail: str = "") -> None:
        runtime = self.deps.runtimes.set_phase(self.instance_id, phase)
        if self.txn is not None:
            self.txn.phase(phase, self.deps.clock.wall(), detail)
        log.info("instance=%d phase=%s request_id=%s %s", self.instance_id, runtime.phase, runtime.request_id, detail)
        self.deps.changed(self.instance_id)
