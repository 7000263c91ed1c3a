"""Phases and the per-instance runtime of RFC §3.1 and §7: the one transition function, the serving
projection's rank rule, and FtRuntimeStore, the only writer of runtime fields. Pure: no I/O, no clock
reads (times are passed in).

Ranks are original global DP ranks everywhere; nothing here renumbers them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class FtPhase(StrEnum):
    DISABLED = "DISABLED"
    NORMAL = "NORMAL"
    DECIDING = "DECIDING"
    WAITING_ENGINE_FAULT = "WAITING_ENGINE_FAULT"
    SCALING_DOWN = "SCALING_DOWN"
    POST_SCALE_CLEANUP = "POST_SCALE_CLEANUP"
    SCALED_DOWN_RUNNING = "SCALED_DOWN_RUNNING"
    RECONFIGURING = "RECONFIGURING"
    FAST_RECOVERING = "FAST_RECOVERING"
    SCALING_UP = "SCALING_UP"


# The transaction window: the whole-instance shutdown on a partial loss is suppressed here.
TRANSACTION_PHASES = frozenset(
    {FtPhase.DECIDING, FtPhase.WAITING_ENGINE_FAULT, FtPhase.SCALING_DOWN, FtPhase.POST_SCALE_CLEANUP,
     FtPhase.FAST_RECOVERING, FtPhase.SCALING_UP}
)
# Found in one of these after a restart, a round was interrupted: it becomes RECONFIGURING and takes
# the fallback, never replaying apply. POST_SCALE_CLEANUP is the NodeManager-commit /
# Controller-commit window of RFC §5, handled the same way.
INTERRUPTED_PHASES = TRANSACTION_PHASES
SERVABLE_PHASES = frozenset({FtPhase.NORMAL, FtPhase.SCALED_DOWN_RUNNING})

# The fallback strategy every instance's runtime names (RFC §7 fallback_strategy): whole-instance
# reconfiguration.
FALLBACK_RECONFIGURATION = "instance_reconfiguration"

_TRANSITIONS: Mapping[FtPhase, frozenset[FtPhase]] = {
    FtPhase.DISABLED: frozenset(),
    FtPhase.NORMAL: frozenset({FtPhase.DECIDING, FtPhase.RECONFIGURING, FtPhase.FAST_RECOVERING}),
    # DECIDING → SCALING_DOWN: the first status round was already apply-ready (RFC §3.1).
    FtPhase.DECIDING: frozenset({FtPhase.WAITING_ENGINE_FAULT, FtPhase.SCALING_DOWN, FtPhase.RECONFIGURING}),
    FtPhase.WAITING_ENGINE_FAULT: frozenset({FtPhase.SCALING_DOWN, FtPhase.RECONFIGURING}),
    FtPhase.SCALING_DOWN: frozenset({FtPhase.POST_SCALE_CLEANUP, FtPhase.RECONFIGURING}),
    # A failure before the Controller's own commit (e.g. a NodeManager refused finalize) still falls
    # back; after it, nothing rolls back and the phase goes on to SCALED_DOWN_RUNNING.
    FtPhase.POST_SCALE_CLEANUP: frozenset({FtPhase.SCALED_DOWN_RUNNING, FtPhase.RECONFIGURING}),
    FtPhase.SCALED_DOWN_RUNNING: frozenset({FtPhase.DECIDING, FtPhase.RECONFIGURING, FtPhase.FAST_RECOVERING,
                                            FtPhase.SCALING_UP}),
    # A retry rebuilds the same group: back to the phase it left (no rank removed), or the fallback.
    FtPhase.FAST_RECOVERING: frozenset({FtPhase.NORMAL, FtPhase.SCALED_DOWN_RUNNING, FtPhase.RECONFIGURING}),
    # An elastic scale-up: every removed rank back (NORMAL), some still removed, or the planned
    # restoration it falls back to.
    FtPhase.SCALING_UP: frozenset({FtPhase.NORMAL, FtPhase.SCALED_DOWN_RUNNING, FtPhase.RECONFIGURING}),
    # A failed reconfiguration stays RECONFIGURING and is tried again; success serves all ranks.
    FtPhase.RECONFIGURING: frozenset({FtPhase.NORMAL, FtPhase.RECONFIGURING}),
}


class IllegalTransitionError(ValueError):
    pass


def transition(current: FtPhase, target: FtPhase) -> FtPhase:
    """The one place a phase changes; refuses anything RFC §3.1 does not draw."""
    if target not in _TRANSITIONS[current]:
        raise IllegalTransitionError(f"illegal phase transition {current} -> {target}")
    return target


def serving_ranks(original: Iterable[int], dead_committed: Iterable[int], pending: Iterable[int]) -> list[int]:
    """serving = original_dp_ranks − dead_committed − pending_removed_ranks (RFC §3.2)."""
    return sorted(set(original) - set(dead_committed) - set(pending))


@dataclass
class GateResult:
    allowed: bool = True
    reason_codes: tuple[str, ...] = ()


@dataclass
class FtRuntime:
    """The RFC §7 runtime of one instance. Mutated only through FtRuntimeStore."""

    instance_id: int
    original_dp_ranks: tuple[int, ...]
    phase: FtPhase
    fallback_strategy: str
    generation: int = 0
    dead_committed: frozenset[int] = frozenset()
    pending_removed_ranks: frozenset[int] = frozenset()
    request_id: str = ""
    gate: GateResult = field(default_factory=GateResult)
    # The last motor.v1.EngineFtStatus of each rank the current round polled.
    engine_statuses: dict[int, Any] = field(default_factory=dict)
    serving_published: bool = False
    last_error: str | None = None
    reconfiguration_attempts: int = 0
    reconfiguration_gave_up: bool = False
    # With the feature off the phase stays DISABLED whatever runs: whether a whole-instance
    # reconfiguration began and has not succeeded yet is kept here (RECONFIGURING says it otherwise).
    disabled_reconfiguring: bool = False
    # Re-inference: requests the Coordinator continued elsewhere during the current or last
    # transaction, and its cumulative count for the instance when last read (observed, not persisted).
    migrated_requests: int = 0
    reinference_seen: int | None = None
    # Idle-fault probe canaries of the current or last collection window.
    idle_fault_probes: int = 0
    # Capacity restoration (observed, not persisted): "" | "restore_pending" | "restoring", why a
    # pending one waits, the retired ranks with no ready place, and the last restoration's id.
    capacity_restore: str = ""
    restore_waiting_for: str = ""
    restore_unplaced_ranks: tuple[int, ...] = ()
    restore_request_id: str = ""

    @property
    def alive_dp_ranks(self) -> list[int]:
        return serving_ranks(self.original_dp_ranks, self.dead_committed, self.pending_removed_ranks)

    @property
    def active_ranks(self) -> frozenset[int]:
        """Ranks still part of the DP group (pending ones included until commit)."""
        return frozenset(self.original_dp_ranks) - self.dead_committed

    @property
    def reconfiguring(self) -> bool:
        """A whole-instance reconfiguration began and has not succeeded yet (RECONFIGURING, or the
        same under DISABLED)."""
        return self.phase is FtPhase.RECONFIGURING or self.disabled_reconfiguring

    @property
    def servable(self) -> bool:
        return servable(self.phase, self.reconfiguring)

    @property
    def can_serve(self) -> bool:
        return can_serve(self.phase, self.serving_published, self.reconfiguring)


def servable(phase: FtPhase, reconfiguring: bool) -> bool:
    """NORMAL / SCALED_DOWN_RUNNING (RFC §3.2), or DISABLED while no reconfiguration is under way:
    with the feature off the instance serves as the baseline does (RFC §8, feature off)."""
    return phase in SERVABLE_PHASES or (phase is FtPhase.DISABLED and not reconfiguring)


def can_serve(phase: FtPhase, serving_published: bool, reconfiguring: bool = False) -> bool:
    """Only in a servable phase and only once the serving view was acknowledged."""
    return servable(phase, reconfiguring) and serving_published


class UnknownInstanceError(KeyError):
    pass


class FtRuntimeStore:
    """In-memory runtime of every instance; the only writer of FtRuntime fields.

    Changes that must survive a restart (phase, generation, dead_committed) bump `generation`; the
    caller persists the new record with compare-and-set on the previous generation.
    """

    def __init__(self, scale_down_enabled: bool) -> None:
        self._scale_down_enabled = scale_down_enabled
        self._runtimes: dict[int, FtRuntime] = {}

    @property
    def scale_down_enabled(self) -> bool:
        return self._scale_down_enabled

    def initial_phase(self) -> FtPhase:
        return FtPhase.NORMAL if self._scale_down_enabled else FtPhase.DISABLED

    def create(
        self,
        instance_id: int,
        original_dp_ranks: Iterable[int],
        fallback_strategy: str,
        *,
        phase: FtPhase | None = None,
        generation: int = 0,
        dead_committed: Iterable[int] = (),
    ) -> FtRuntime:
        ranks = tuple(sorted(set(original_dp_ranks)))
        dead = frozenset(dead_committed)
        if not dead <= set(ranks):
            raise ValueError(f"instance {instance_id}: dead_committed {sorted(dead)} not within {list(ranks)}")
        runtime = FtRuntime(
            instance_id=instance_id,
            original_dp_ranks=ranks,
            phase=phase or self.initial_phase(),
            fallback_strategy=fallback_strategy,
            generation=generation,
            dead_committed=dead,
        )
        self._runtimes[instance_id] = runtime
        return runtime

    def get(self, instance_id: int) -> FtRuntime:
        try:
            return self._runtimes[instance_id]
        except KeyError:
            raise UnknownInstanceError(f"unknown instance {instance_id}") from None

    def find(self, instance_id: int) -> FtRuntime | None:
        return self._runtimes.get(instance_id)

    def all(self) -> list[FtRuntime]:
        return [self._runtimes[i] for i in sorted(self._runtimes)]

    def clear(self) -> None:
        """Forgets every instance (a Controller replica that stops leading starts again from the store)."""
        self._runtimes.clear()

    def set_phase(self, instance_id: int, target: FtPhase) -> FtRuntime:
        runtime = self.get(instance_id)
        if runtime.phase is FtPhase.DISABLED:
            # With the feature off the phase reads DISABLED whatever recovery runs (RFC §7); only
            # whether a reconfiguration is under way is kept (its retries are bounded all the same).
            runtime.disabled_reconfiguring = target is FtPhase.RECONFIGURING
            return runtime
        runtime.phase = transition(runtime.phase, target)
        runtime.generation += 1
        return runtime

    def begin_round(self, instance_id: int, request_id: str, pending: Iterable[int]) -> FtRuntime:
        runtime = self.get(instance_id)
        runtime.request_id = request_id
        runtime.pending_removed_ranks = frozenset(pending)
        runtime.engine_statuses = {}
        runtime.last_error = None
        return runtime

    def set_pending(self, instance_id: int, pending: Iterable[int]) -> None:
        runtime = self.get(instance_id)
        pending_set = frozenset(pending)
        if pending_set & runtime.dead_committed:
            raise ValueError(
                f"instance {instance_id}: pending {sorted(pending_set)} overlaps dead_committed "
                f"{sorted(runtime.dead_committed)}"
            )
        runtime.pending_removed_ranks = pending_set

    def set_gate(self, instance_id: int, gate: GateResult) -> None:
        self.get(instance_id).gate = gate

    def record_engine_status(self, instance_id: int, rank: int, status: Any) -> None:
        self.get(instance_id).engine_statuses[rank] = status

    def commit_round(self, instance_id: int, removed: Iterable[int]) -> FtRuntime:
        """dead_committed += removed; pending cleared. Ranks outside the instance are refused."""
        runtime = self.get(instance_id)
        removed_set = frozenset(removed)
        if not removed_set <= set(runtime.original_dp_ranks):
            raise ValueError(f"instance {instance_id}: cannot commit {sorted(removed_set)}: not original ranks")
        if runtime.active_ranks <= removed_set:
            raise ValueError(f"instance {instance_id}: committing {sorted(removed_set)} would remove every rank")
        runtime.dead_committed = runtime.dead_committed | removed_set
        runtime.pending_removed_ranks = frozenset()
        runtime.generation += 1
        return runtime

    def commit_scale_up(self, instance_id: int, added: Iterable[int]) -> FtRuntime:
        """dead_committed −= added (an elastic scale-up re-admitted them); only committed ranks."""
        runtime = self.get(instance_id)
        added_set = frozenset(added)
        if not added_set or not added_set <= runtime.dead_committed:
            raise ValueError(f"instance {instance_id}: cannot re-admit {sorted(added_set)}: not within "
                             f"dead_committed {sorted(runtime.dead_committed)}")
        runtime.dead_committed = runtime.dead_committed - added_set
        runtime.pending_removed_ranks = frozenset()
        runtime.generation += 1
        return runtime

    def clear_history(self, instance_id: int, gate: GateResult) -> FtRuntime:
        """After a successful whole-instance rebuild every original rank serves again and the runtime
        reads as after assembly: no request id of a round that is over, and `gate`, the static
        admission of the capability the pods report now."""
        runtime = self.get(instance_id)
        runtime.dead_committed = frozenset()
        runtime.pending_removed_ranks = frozenset()
        runtime.engine_statuses = {}
        runtime.request_id = ""
        runtime.gate = gate
        runtime.generation += 1
        return runtime

    def touch(self, instance_id: int) -> FtRuntime:
        """Something persisted beside the runtime changed (a replacement pod's topology): a new generation."""
        runtime = self.get(instance_id)
        runtime.generation += 1
        return runtime

    def set_published(self, instance_id: int, published: bool, error: str | None = None) -> None:
        runtime = self.get(instance_id)
        runtime.serving_published = published
        if error is not None:
            runtime.last_error = error

    def set_error(self, instance_id: int, error: str | None) -> None:
        self.get(instance_id).last_error = error

    def record_reinference(self, instance_id: int, cumulative: int) -> int:
        """The Coordinator's cumulative migration count for the instance → the migrations since the last
        reading (all of them at the first reading, or after the Coordinator restarted and counts anew)."""
        runtime = self.get(instance_id)
        seen = runtime.reinference_seen
        runtime.migrated_requests = cumulative - seen if seen is not None and cumulative >= seen else cumulative
        runtime.reinference_seen = cumulative
        return runtime.migrated_requests

    def set_restore(self, instance_id: int, state: str, waiting_for: str = "", unplaced: Iterable[int] = (),
                    request_id: str | None = None) -> bool:
        """The restoration's view of the instance; True when it changed."""
        runtime = self.get(instance_id)
        before = (runtime.capacity_restore, runtime.restore_waiting_for, runtime.restore_unplaced_ranks,
                  runtime.restore_request_id)
        runtime.capacity_restore, runtime.restore_waiting_for = state, waiting_for
        runtime.restore_unplaced_ranks = tuple(sorted(unplaced))
        if request_id is not None:
            runtime.restore_request_id = request_id
        return before != (runtime.capacity_restore, runtime.restore_waiting_for, runtime.restore_unplaced_ranks,
                          runtime.restore_request_id)

    def set_idle_fault_probes(self, instance_id: int, count: int) -> None:
        self.get(instance_id).idle_fault_probes = count
