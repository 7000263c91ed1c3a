"""Glue between the in-memory runtime and the RuntimeStore: compare-and-set writes keyed on the
generation last written, retried in the background until the store holds what a failed write
carried, and the restart rule of RFC §5 (an interrupted round becomes RECONFIGURING; apply is never
replayed)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from tenacity import AsyncRetrying, RetryCallState, retry_if_exception_type, wait_exponential

from gen.motor.v1 import common_pb2
from motor.controller.clock import Clock
from motor.controller.instances import InstanceRegistry
from motor.controller.model.runtime import (
    FALLBACK_RECONFIGURATION,
    INTERRUPTED_PHASES,
    FtPhase,
    FtRuntime,
    FtRuntimeStore,
)
from motor.controller.persistence.base import RuntimeStore
from motor.controller.persistence.errors import FencedWriteError, StaleWriteError, StoreError
from motor.controller.persistence.records import PersistedInstance

log = logging.getLogger(__name__)

# Backoff of the retries of a failed write: doubling from the first delay, capped, for as long as the
# store fails (a write that only some later change would have repeated must not wait for one: after
# a round's commit nothing else changes the instance, and a restart would then find the round's
# phase before the commit and reconfigure a healthy scaled-down instance).
RETRY_FIRST_DELAY_SEC = 0.5
RETRY_MAX_DELAY_SEC = 10.0

# Why a write to retry failed and the last error persisting it set on the runtime (cleared once written).
_PERSIST_FAILED = "persisting runtime failed"


class RuntimePersister:
    def __init__(self, store: RuntimeStore, runtimes: FtRuntimeStore, registry: InstanceRegistry) -> None:
        self._store = store
        self._runtimes = runtimes
        self._registry = registry
        self._written: dict[int, int] = {}
        # The pod bindings last written per instance: a new binding is written even when the
        # generation stays (a pod bound after a restore must stay bound across the next one).
        self._written_bindings: dict[int, dict[str, str]] = {}
        # Instances whose last write failed: retry_unsaved writes them again until the store has them.
        self._unsaved: set[int] = set()
        self._unsaved_event = asyncio.Event()
        # One write at a time: a retry and a strategy's write must not race on the same expected generation.
        self._lock = asyncio.Lock()

    def reset(self) -> None:
        """Forgets what was written (a new leadership term restores everything again)."""
        self._written.clear()
        self._written_bindings.clear()
        self._unsaved.clear()

    def unsaved(self) -> list[int]:
        """Instances whose runtime a failed write left out of the store (retried in the background)."""
        return sorted(self._unsaved)

    async def persist_or_note(self, instance_id: int) -> None:
        """`persist`, a failure only noted in the runtime's last error (retry_unsaved writes it later)."""
        try:
            await self.persist(instance_id)
        except StoreError as exc:
            self._runtimes.set_error(instance_id, f"{_PERSIST_FAILED}: {exc}")

    async def persist(self, instance_id: int) -> None:
        """Writes the instance's record if its generation moved; StaleWriteError if another writer won.
        Any other StoreError is raised too, and the instance is retried by retry_unsaved."""
        async with self._lock:
            try:
                await self._persist(instance_id)
            except (StaleWriteError, FencedWriteError):
                self._unsaved.discard(instance_id)
                raise
            except StoreError:
                self._unsaved.add(instance_id)
                self._unsaved_event.set()
                raise
            self._unsaved.discard(instance_id)

    async def retry_unsaved(self, sleep: Callable[[float], Awaitable[None]]) -> None:
        """Runs while this replica acts: after every failed write, writes the unsaved instances again
        with a capped doubling backoff (`sleep`, the Controller's clock) until the store holds each
        one's current runtime. Never ends by itself (cancelled when the replica stops acting)."""
        retrying = AsyncRetrying(
            retry=retry_if_exception_type(StoreError), sleep=sleep, before_sleep=self._retry_failed,
            wait=wait_exponential(multiplier=RETRY_FIRST_DELAY_SEC, min=RETRY_FIRST_DELAY_SEC,
                                  max=RETRY_MAX_DELAY_SEC))
        while True:
            await self._unsaved_event.wait()
            self._unsaved_event.clear()
            await retrying(self._persist_unsaved)

    def _retry_failed(self, state: RetryCallState) -> None:
        error = state.outcome.exception() if state.outcome is not None else None
        log.warning("instances %s still not persisted (attempt %d), retrying in %.1fs: %s", self.unsaved(),
                    state.attempt_number, state.upcoming_sleep, error)

    async def _persist_unsaved(self) -> None:
        """One attempt at every unsaved instance; raises the last StoreError if any is still unsaved."""
        failed: StoreError | None = None
        for instance_id in self.unsaved():
            runtime = self._runtimes.find(instance_id)
            if runtime is None or self._registry.get(instance_id) is None:
                self._unsaved.discard(instance_id)
                continue
            try:
                await self.persist(instance_id)
            except (StaleWriteError, FencedWriteError) as exc:
                # Another writer holds the store (fencing deposes this replica): nothing to retry.
                log.error("instance=%d persisting runtime abandoned: %s", instance_id, exc)
                continue
            except StoreError as exc:
                failed = exc
                continue
            log.info("instance=%d runtime persisted on retry (generation %d)", instance_id, runtime.generation)
            if runtime.last_error and runtime.last_error.startswith(_PERSIST_FAILED):
                self._runtimes.set_error(instance_id, None)
        if failed is not None:
            raise failed

    async def _persist(self, instance_id: int) -> None:
        runtime = self._runtimes.get(instance_id)
        record = self._registry.get(instance_id)
        if record is None:
            return
        expected = self._written.get(instance_id)
        bindings = record.bindings()
        if expected == runtime.generation and self._written_bindings.get(instance_id) == bindings:
            return
        record_to_write = PersistedInstance(
            instance_id=instance_id,
            phase=str(runtime.phase),
            generation=runtime.generation,
            original_dp_ranks=runtime.original_dp_ranks,
            dead_committed=tuple(sorted(runtime.dead_committed)),
            fallback_strategy=runtime.fallback_strategy,
            topology=record.topology(with_bindings=True).SerializeToString(deterministic=True),
        )
        try:
            await self._store.put(record_to_write, expected)
        except (StaleWriteError, FencedWriteError):
            raise
        except StoreError as exc:
            # A write that timed out may still have landed; re-read so the next CAS expects the truth.
            stored = await self._store.load(instance_id)
            if stored is None or (stored.generation, stored.topology) != (runtime.generation, record_to_write.topology):
                raise exc
            log.info("instance=%d write of generation %d landed despite the error", instance_id, runtime.generation)
        self._written[instance_id] = runtime.generation
        self._written_bindings[instance_id] = bindings

    async def restore(self, clock: Clock) -> list[int]:
        """Loads every persisted instance; returns the ids whose interrupted round must fall back."""
        interrupted = []
        for item in await self._store.load_all():
            topology = common_pb2.Instance.FromString(item.topology)
            restored = self._registry.restore(topology, clock.monotonic())
            self._written_bindings[item.instance_id] = restored.bindings()
            phase = FtPhase(item.phase)
            dead = item.dead_committed
            if not self._runtimes.scale_down_enabled:
                phase, dead = FtPhase.DISABLED, ()
            elif phase is FtPhase.DISABLED:
                phase = FtPhase.NORMAL
            self._runtimes.create(
                item.instance_id,
                item.original_dp_ranks,
                item.fallback_strategy or FALLBACK_RECONFIGURATION,
                phase=phase,
                generation=item.generation,
                dead_committed=dead,
            )
            self._written[item.instance_id] = item.generation
            if phase in INTERRUPTED_PHASES:
                self._runtimes.set_phase(item.instance_id, FtPhase.RECONFIGURING)
                self._runtimes.set_error(
                    item.instance_id, f"controller restarted during {phase}: round abandoned, falling back"
                )
                interrupted.append(item.instance_id)
                log.warning("instance=%d restored in %s: interrupted round -> RECONFIGURING (apply is never replayed)",
                            item.instance_id, phase)
            else:
                log.info("instance=%d restored phase=%s generation=%d dead_committed=%s",
                         item.instance_id, phase, item.generation, list(dead))
                if phase is FtPhase.RECONFIGURING:
                    interrupted.append(item.instance_id)
        for instance_id in interrupted:
            await self.persist(instance_id)
        return interrupted


async def read_only_view(store: RuntimeStore, scale_down_enabled: bool) -> list[FtRuntime]:
    """What the store holds, as runtimes, without the restart rule and without writing anything: a
    standby replica's status (what the leader persisted; never published by this replica)."""
    runtimes = FtRuntimeStore(scale_down_enabled)
    for item in await store.load_all():
        phase = FtPhase(item.phase)
        dead = item.dead_committed
        if not scale_down_enabled:
            phase, dead = FtPhase.DISABLED, ()
        elif phase is FtPhase.DISABLED:
            phase = FtPhase.NORMAL
        runtimes.create(item.instance_id, item.original_dp_ranks, item.fallback_strategy or FALLBACK_RECONFIGURATION,
                        phase=phase, generation=item.generation, dead_committed=dead)
    return runtimes.all()
