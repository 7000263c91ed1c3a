"""Glue between the in-memory runtime and the RuntimeStore: compare-and-set writes keyed on the
generation last written, and the restart rule of RFC §5 (an interrupted round becomes
RECONFIGURING; apply is never replayed)."""

from __future__ import annotations

import logging

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


class RuntimePersister:
    def __init__(self, store: RuntimeStore, runtimes: FtRuntimeStore, registry: InstanceRegistry) -> None:
        self._store = store
        self._runtimes = runtimes
        self._registry = registry
        self._written: dict[int, int] = {}

    def reset(self) -> None:
        """Forgets what was written (a new leadership term restores everything again)."""
        self._written.clear()

    async def persist(self, instance_id: int) -> None:
        """Writes the instance's record if its generation moved; StaleWriteError if another writer won."""
        runtime = self._runtimes.get(instance_id)
        record = self._registry.get(instance_id)
        if record is None:
            return
        expected = self._written.get(instance_id)
        if expected == runtime.generation:
            return
        record_to_write = PersistedInstance(
            instance_id=instance_id,
            phase=str(runtime.phase),
            generation=runtime.generation,
            original_dp_ranks=runtime.original_dp_ranks,
            dead_committed=tuple(sorted(runtime.dead_committed)),
            fallback_strategy=runtime.fallback_strategy,
            topology=record.topology().SerializeToString(deterministic=True),
        )
        try:
            await self._store.put(record_to_write, expected)
        except (StaleWriteError, FencedWriteError):
            raise
        except StoreError as exc:
            # A write that timed out may still have landed; re-read so the next CAS expects the truth.
            stored = await self._store.load(instance_id)
            if stored is None or stored.generation != runtime.generation:
                raise exc
            log.info("instance=%d write of generation %d landed despite the error", instance_id, runtime.generation)
        self._written[instance_id] = runtime.generation

    async def restore(self, clock: Clock) -> list[int]:
        """Loads every persisted instance; returns the ids whose interrupted round must fall back."""
        interrupted = []
        for item in await self._store.load_all():
            topology = common_pb2.Instance.FromString(item.topology)
            self._registry.restore(topology, clock.monotonic())
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
