"""Hardware evidence (RFC §4.4): de-duplication across sources, the level rule, mapping to original DP
ranks per instance, and what each mapped fault asks for — nothing (handled, ignored), the original
strategy at once (unmappable, feature off), or a correlation window. No I/O: the caller passes the
time and the facts it reads about the instances.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from motor.common.config.fault_tolerance import FaultToleranceConfig
from motor.controller.fault_tolerance.correlation import HardwareCorrelation
from motor.controller.fault_tolerance.decision import FallbackCause
from motor.controller.hardware.levels import is_severe, level_text
from motor.controller.hardware.model import HardwareFault
from motor.controller.hardware.resolver import InstanceMapping, InstanceTopology, TopologyResolver, Unmappable
from motor.controller.instances import InstanceRegistry
from motor.controller.model.runtime import SERVABLE_PHASES, FtPhase, FtRuntimeStore

log = logging.getLogger(__name__)

# Hardware faults remembered for de-duplication across sources (directory, Kubernetes, RPC).
_SEEN_HARDWARE_MAX = 4096


@dataclass(frozen=True)
class Forced:
    """The original strategy, asked for by a hardware fault that cannot take the scale-down path."""

    cause: FallbackCause
    reason: str


class HardwareIntake:
    def __init__(
        self,
        ft: FaultToleranceConfig,
        registry: InstanceRegistry,
        runtimes: FtRuntimeStore,
        correlation: HardwareCorrelation,
        resolver: TopologyResolver,
        *,
        busy: Callable[[int], bool],
        window_started: Callable[[int], float | None],
        on_busy_fault: Callable[[int, frozenset[int], str], None],
        on_fault: Callable[[str, bool], None] = lambda level, mapped: None,
    ) -> None:
        self._ft = ft
        self._registry = registry
        self._runtimes = runtimes
        self.correlation = correlation
        self.resolver = resolver
        # Whether a strategy runs on the instance, and when its open collection window started (None: none).
        self._busy = busy
        self._window_started = window_started
        # Called with (instance_id, ranks, description) so a running round takes the fault as evidence.
        self._on_busy_fault = on_busy_fault
        # Called with (level "L1".."L6", mapped to ranks of an instance) once per new fault: the metrics.
        self._on_fault = on_fault
        self._seen: dict[object, float] = {}
        self._notes: dict[object, str] = {}
        self._forced: dict[int, Forced] = {}
        # Faults that came while a strategy ran on the instance: evaluated again when it ends.
        # Faults kept while a strategy ran, with when each was received (monotonic seconds).
        self._deferred: dict[int, list[tuple[HardwareFault, float]]] = {}

    def report(self, faults: list[HardwareFault], now_sec: float) -> list[str]:
        """Returns what was done with each fault."""
        notes = []
        for fault in faults:
            note = self._one(fault, now_sec)
            self._notes[fault.key] = note
            notes.append(note)
        _trim(self._notes)
        return notes

    def last_note(self, key: object) -> str:
        return self._notes.get(key, "")

    def take_forced(self, instance_id: int) -> Forced | None:
        return self._forced.pop(instance_id, None)

    def replay(self, instance_id: int, now_sec: float, rebuilt_since_sec: float | None) -> list[str]:
        """The faults kept while a strategy ran, judged again now that it ended. A successful
        whole-instance rebuild that started the engines at `rebuilt_since_sec` handled the ones
        received before then (every rank was restarted since), not the ones received after."""
        kept = self._deferred.pop(instance_id, [])
        notes = []
        if rebuilt_since_sec is not None:
            # A fallback asked for before the rebuild (while a failed one waited to retry) is done too.
            self._forced.pop(instance_id, None)
            notes = [f"{f.describe()} (kept during the rebuild): handled by the whole-instance rebuild"
                     for f, at in kept if at <= rebuilt_since_sec]
            kept = [(f, at) for f, at in kept if at > rebuilt_since_sec]
        for fault, _ in kept:
            result = self.resolver.resolve(fault, [self._topology(instance_id)])
            notes += [f"{fault.describe()} (kept during the last strategy): {self._for_instance(fault, m, now_sec)}"
                      for m in result.mappings if m.instance_id == instance_id]
        for note in notes:
            log.info("instance=%d %s", instance_id, note)
        return notes

    def _topology(self, instance_id: int) -> InstanceTopology:
        record = self._registry.get(instance_id)
        return InstanceTopology(record.topology(), self._active(instance_id))

    def _one(self, fault: HardwareFault, now_sec: float) -> str:
        if self._seen.get(fault.key) == fault.fault_time_unix_sec:
            return f"{fault.describe()}: already seen"
        self._seen[fault.key] = fault.fault_time_unix_sec
        _trim(self._seen)
        if not is_severe(fault.level):
            self._on_fault(level_text(fault.level), False)
            return f"{fault.describe()}: {level_text(fault.level)} below L4, logged only"
        instances = [
            self._topology(record.instance_id)
            for record in self._registry.all()
            if record.assembled and self._runtimes.find(record.instance_id) is not None
        ]
        result = self.resolver.resolve(fault, instances)
        self._on_fault(level_text(fault.level), any(m.mapped for m in result.mappings))
        if result.ignored or not result.mappings:
            return f"{fault.describe()}: {result.describe()}"
        notes = [self._for_instance(fault, m, now_sec) for m in result.mappings]
        return f"{fault.describe()}: " + "; ".join(notes)

    def _active(self, instance_id: int) -> bool:
        runtime = self._runtimes.find(instance_id)
        if runtime is None:
            return False
        return self._busy(instance_id) or runtime.phase in SERVABLE_PHASES or runtime.phase is FtPhase.DISABLED

    def _for_instance(self, fault: HardwareFault, mapping: InstanceMapping, now_sec: float) -> str:
        iid = mapping.instance_id
        runtime = self._runtimes.get(iid)
        if mapping.reason is Unmappable.CARD_NOT_FOUND:
            return f"instance {iid}: card not used by the instance, ignored"
        if mapping.reason is Unmappable.INSTANCE_NOT_ACTIVE:
            # No correlation wait; the recovery already running is the original path.
            return f"instance {iid}: not ACTIVE (phase {runtime.phase}), left to the running recovery"
        if mapping.reason is not None:
            if self._busy(iid):
                # RFC §8: no scale-down in a round with an unmappable fault. Any rank may be hit, so the
                # running strategy takes it on every active rank (a round fails before it commits, its
                # fallback then runs once); judged again after it ends (a rebuild handles it).
                self._deferred.setdefault(iid, []).append((fault, now_sec))
                self._on_busy_fault(iid, runtime.active_ranks,
                                    f"{fault.describe()} (cannot be mapped: {mapping.reason.value})")
                return (f"instance {iid}: unmappable ({mapping.reason.value}) while a strategy is running: "
                        f"no scale-down in this round")
            reason = f"hardware fault {fault.describe()} cannot be mapped ({mapping.reason.value}): original strategy"
            self._forced[iid] = Forced(FallbackCause.HARDWARE_UNMAPPABLE, reason)
            log.warning("instance=%d %s", iid, reason)
            return f"instance {iid}: unmappable ({mapping.reason.value}), whole-instance reconfiguration"
        if self._busy(iid):
            # Never dropped: the running round takes it as evidence now, and it is judged again after.
            self._deferred.setdefault(iid, []).append((fault, now_sec))
            self._on_busy_fault(iid, mapping.ranks - runtime.dead_committed, fault.describe())
            return f"instance {iid}: a strategy is running; ranks {sorted(mapping.ranks)} kept as evidence for it"
        # Only the ranks not yet committed take part (RFC §4.4: committed ranks are already handled).
        ranks = mapping.ranks - runtime.dead_committed
        if not ranks:
            return f"instance {iid}: ranks {sorted(mapping.ranks)} already committed dead, handled"
        if not (self._ft.enable_fault_tolerance and self._ft.enable_dp_scale_down):
            self._forced[iid] = Forced(
                FallbackCause.HARDWARE_UNMAPPABLE,
                f"hardware fault {fault.describe()} on ranks {sorted(ranks)} (scale-down disabled)",
            )
            return f"instance {iid}: scale-down disabled, whole-instance reconfiguration"
        window_started_sec = self._window_started(iid)
        if window_started_sec is not None:
            # Software came first: the FT snapshot decides without waiting, and the fault is evidence for
            # that decision as it is for a running round (RFC §4.2): a survivor's card fault fails it.
            self.correlation.join(iid, fault.key, ranks, window_started_sec, fault.describe(), now_sec, fault.level,
                                  fault.fault_codes)
            return (f"instance {iid}: software evidence first, decided on the FT snapshot; ranks {sorted(ranks)} "
                    f"must be among its DEAD ranks")
        opened = self.correlation.open(iid, fault.key, ranks, now_sec, fault.describe(), fault.level,
                                       fault.fault_codes)
        log.info("instance=%d hardware fault on ranks %s: %s", iid, sorted(ranks),
                 "correlation window opened" if opened else "already waiting")
        return (f"instance {iid}: ranks {sorted(ranks)}, waiting up to "
                f"{self.correlation.window_sec:g}s for the FT framework")


def _trim(remembered: dict) -> None:
    while len(remembered) > _SEEN_HARDWARE_MAX:
        del remembered[next(iter(remembered))]
