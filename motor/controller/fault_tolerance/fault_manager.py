"""FaultManager: aggregates fault evidence, decides by priority, and starts, preempts and escalates
recovery strategies (RFC §4.3, §4.4). It never executes a transaction itself.

Evidence is in-process only (first-seen times, collection windows, missing heartbeats): never
persisted. Every report wakes the strategy centre; it also scans every
`strategy_center_check_interval`, and sooner when a collection window or a heartbeat grace ends.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol

from motor.controller.fault_tolerance.context import ScaleDownContext
from motor.controller.fault_tolerance.correlation import HardwareCorrelation
from motor.controller.fault_tolerance.decision import Action, decide
from motor.controller.fault_tolerance.evidence import (
    EvidenceKind,
    FaultNormalizer,
    Health,
    RankEvidence,
)
from motor.controller.fault_tolerance.runtime import (
    SERVABLE_PHASES,
    TRANSACTION_PHASES,
    FtPhase,
)
from motor.controller.fault_tolerance.strategy.base import (
    FALLBACK_RECONFIGURATION,
    ControllerDeps,
    Outcome,
    Strategy,
)
from motor.controller.fault_tolerance.strategy.dp_scale_down import DpScaleDownStrategy
from motor.controller.fault_tolerance.strategy.reconfiguration import (
    ReconfigurationStrategy,
)
from motor.controller.hardware.levels import is_severe, level_text
from motor.controller.hardware.model import HardwareFault
from motor.controller.hardware.resolver import (
    InstanceTopology,
    TopologyResolver,
    Unmappable,
)

log = logging.getLogger(__name__)

_MIN_WAKE_SEC = 0.05
# Hardware faults remembered for de-duplication across sources (directory, Kubernetes, RPC).
_SEEN_HARDWARE_MAX = 4096


class FastRecovery(Protocol):
    """EngineFastRecoveryStrategy's entry points. All-UNHEALTHY-no-DEAD is only its structural
    precondition; sufficiency (device type, error codes) is the implementation's own call."""

    def is_applicable(self, instance_id: int, unhealthy: frozenset[int]) -> bool: ...

    def create(self, deps: ControllerDeps, instance_id: int) -> Strategy: ...


class NoFastRecovery:
    """Today's placeholder: never applicable, so all-UNHEALTHY waits for a DEAD rank or the timeout."""

    def is_applicable(self, instance_id: int, unhealthy: frozenset[int]) -> bool:
        return False

    def create(self, deps: ControllerDeps, instance_id: int) -> Strategy:
        raise RuntimeError("fast recovery is not applicable")


@dataclass
class _InstanceFaults:
    evidence: dict[int, RankEvidence] = field(default_factory=dict)
    first_seen_sec: dict[int, float] = field(default_factory=dict)
    window_started_sec: float | None = None
    missing_since_sec: dict[int, float] = field(default_factory=dict)
    strategy: Strategy | None = None
    strategy_task: asyncio.Task[Outcome] | None = None
    driver: asyncio.Task[None] | None = None
    reconfigure_after_sec: float | None = None
    reconfigure_reason: str = ""
    # The original strategy asked for by a hardware fault that cannot take the scale-down path.
    forced_reason: str = ""


def should_preempt(running: Strategy, new_priority: int) -> bool:
    return new_priority > running.priority


class FaultManager:
    def __init__(self, deps: ControllerDeps, fast_recovery: FastRecovery | None = None) -> None:
        self.deps = deps
        self.fast_recovery = fast_recovery or NoFastRecovery()
        self._faults: dict[int, _InstanceFaults] = {}
        self._wake = asyncio.Event()
        self._loop_task: asyncio.Task[None] | None = None
        self._closing = False
        self.correlation = HardwareCorrelation(deps.config.fault_tolerance_config.hardware_ft_correlation_window_sec)
        self.resolver = TopologyResolver()
        self._seen_hardware: dict[object, float] = {}
        self._hardware_notes: dict[object, str] = {}

    # ---- intake ------------------------------------------------------------------------------

    def _state(self, instance_id: int) -> _InstanceFaults:
        return self._faults.setdefault(instance_id, _InstanceFaults())

    def notify(self) -> None:
        self._wake.set()

    def report_software(
        self, instance_id: int, endpoint_id: int, kind: EvidenceKind, detail: str, observed_at_sec: float
    ) -> str:
        """Records one report; returns what was done. Raises UnknownInstanceError / NormalizationError."""
        runtime = self.deps.runtimes.get(instance_id)
        evidence = FaultNormalizer(runtime.original_dp_ranks).normalize(
            endpoint_id, kind, detail, observed_at_sec, runtime.dead_committed
        )
        if evidence is None:
            return f"rank {endpoint_id} is committed dead: ignored"
        evidence = dataclasses.replace(evidence, received_at_sec=self.deps.clock.wall())
        state = self._state(instance_id)
        now = self.deps.clock.monotonic()
        if evidence.health is Health.HEALTHY:
            state.evidence.pop(endpoint_id, None)
            state.first_seen_sec.pop(endpoint_id, None)
            if not state.evidence:
                state.window_started_sec = None
        else:
            state.evidence[endpoint_id] = evidence
            state.first_seen_sec.setdefault(endpoint_id, now)
            if state.window_started_sec is None:
                state.window_started_sec = now
        log.info("instance=%d rank=%d evidence=%s detail=%s", instance_id, endpoint_id, kind, detail)
        self.notify()
        return f"rank {endpoint_id} {evidence.health}"

    def observe_heartbeat(self, instance_id: int, expected: Iterable[int], alive: Iterable[int]) -> frozenset[int]:
        """Tracks ranks a pod's heartbeat leaves out; returns the ones missing now."""
        state = self._state(instance_id)
        now = self.deps.clock.monotonic()
        expected_set, alive_set = set(expected), set(alive)
        missing = frozenset(expected_set - alive_set)
        for rank in expected_set:
            if rank in missing:
                state.missing_since_sec.setdefault(rank, now)
            else:
                state.missing_since_sec.pop(rank, None)
        if missing:
            self.notify()
        return missing

    def report_hardware(self, faults: list[HardwareFault]) -> list[str]:
        """RFC §4.4 rules for hardware evidence; returns what was done with each fault."""
        notes = []
        for fault in faults:
            note = self._hardware_one(fault)
            self._hardware_notes[fault.key] = note
            notes.append(note)
        while len(self._hardware_notes) > _SEEN_HARDWARE_MAX:
            del self._hardware_notes[next(iter(self._hardware_notes))]
        self.notify()
        return notes

    def last_hardware_note(self, key: object) -> str:
        return self._hardware_notes.get(key, "")

    def _hardware_one(self, fault: HardwareFault) -> str:
        if self._seen_hardware.get(fault.key) == fault.fault_time_unix_sec:
            return f"{fault.describe()}: already seen"
        self._seen_hardware[fault.key] = fault.fault_time_unix_sec
        while len(self._seen_hardware) > _SEEN_HARDWARE_MAX:
            del self._seen_hardware[next(iter(self._seen_hardware))]
        if not is_severe(fault.level):
            return f"{fault.describe()}: {level_text(fault.level)} below L4, logged only"
        instances = [
            InstanceTopology(record.topology(), self._active(record.instance_id))
            for record in self.deps.registry.all()
            if record.assembled and self.deps.runtimes.find(record.instance_id) is not None
        ]
        result = self.resolver.resolve(fault, instances)
        if result.ignored or not result.mappings:
            return f"{fault.describe()}: {result.describe()}"
        notes = [self._hardware_for_instance(fault, m) for m in result.mappings]
        return f"{fault.describe()}: " + "; ".join(notes)

    def _active(self, instance_id: int) -> bool:
        runtime = self.deps.runtimes.find(instance_id)
        if runtime is None or self._state(instance_id).strategy is not None:
            return False
        return runtime.phase in SERVABLE_PHASES or runtime.phase is FtPhase.DISABLED

    def _hardware_for_instance(self, fault: HardwareFault, mapping) -> str:
        iid = mapping.instance_id
        runtime = self.deps.runtimes.get(iid)
        state = self._state(iid)
        if mapping.reason is Unmappable.CARD_NOT_FOUND:
            return f"instance {iid}: card not used by the instance, ignored"
        if mapping.reason is Unmappable.INSTANCE_NOT_ACTIVE:
            # No correlation wait; the recovery already running is the original path.
            return f"instance {iid}: not ACTIVE (phase {runtime.phase}), left to the running recovery"
        if mapping.reason is not None:
            state.forced_reason = f"hardware fault {fault.describe()} cannot be mapped ({mapping.reason.value}): original strategy"
            log.warning("instance=%d %s", iid, state.forced_reason)
            return f"instance {iid}: unmappable ({mapping.reason.value}), whole-instance reconfiguration"
        ranks = mapping.ranks
        if ranks <= runtime.dead_committed:
            return f"instance {iid}: ranks {sorted(ranks)} already committed dead, handled"
        ft = self.deps.config.fault_tolerance_config
        if not (ft.enable_fault_tolerance and ft.enable_dp_scale_down):
            state.forced_reason = f"hardware fault {fault.describe()} on ranks {sorted(ranks)} (scale-down disabled)"
            return f"instance {iid}: scale-down disabled, whole-instance reconfiguration"
        if state.window_started_sec is not None:
            # Software came first: the FT snapshot alone decides, the hardware fault does not wait.
            return f"instance {iid}: software evidence first, decided on the FT snapshot"
        opened = self.correlation.open(iid, fault.key, ranks, self.deps.clock.monotonic(), fault.describe())
        log.info("instance=%d hardware fault on ranks %s: %s", iid, sorted(ranks),
                 "correlation window opened" if opened else "already waiting")
        return (f"instance {iid}: ranks {sorted(ranks)}, waiting up to "
                f"{self.correlation.window_sec:g}s for the FT framework")

    def evidence(self, instance_id: int) -> dict[int, RankEvidence]:
        return dict(self._state(instance_id).evidence)

    def running(self, instance_id: int) -> Strategy | None:
        return self._state(instance_id).strategy

    # ---- strategy centre ---------------------------------------------------------------------

    def start(self) -> None:
        self._loop_task = asyncio.create_task(self._run(), name="strategy-centre")

    async def close(self) -> None:
        self._closing = True
        if self._loop_task is not None:
            self._loop_task.cancel()
            await asyncio.gather(self._loop_task, return_exceptions=True)
        for instance_id in list(self._faults):
            await self._preempt(instance_id)

    async def _run(self) -> None:
        interval = self.deps.config.fault_tolerance_config.strategy_center_check_interval
        while not self._closing:
            timeout = max(_MIN_WAKE_SEC, min(interval, self._next_deadline_sec() - self.deps.clock.monotonic()))
            try:
                await asyncio.wait_for(self._wake.wait(), timeout)
            except TimeoutError:
                pass
            self._wake.clear()
            try:
                await self.evaluate_all()
            except Exception:  # noqa: BLE001 - the strategy centre must outlive any single bad evaluation
                log.exception("strategy centre evaluation failed")

    def _next_deadline_sec(self) -> float:
        ft = self.deps.config.fault_tolerance_config
        grace = self.deps.config.heartbeat_timeout_sec
        deadlines = [float("inf")]
        for state in self._faults.values():
            if state.window_started_sec is not None:
                deadlines.append(state.window_started_sec + ft.software_status_collection_timeout_sec)
            deadlines.extend(t + grace for t in state.missing_since_sec.values())
            if state.reconfigure_after_sec is not None:
                deadlines.append(state.reconfigure_after_sec)
        deadlines.extend(self.correlation.deadlines())
        return min(deadlines)

    async def evaluate_all(self) -> None:
        self._check_silent_pods()
        for runtime in self.deps.runtimes.all():
            record = self.deps.registry.get(runtime.instance_id)
            if record is None or not record.assembled:
                continue
            await self.evaluate(runtime.instance_id)

    def _check_silent_pods(self) -> None:
        """A pod whose heartbeats stopped counts as missing every rank it should report."""
        now_mono = self.deps.clock.monotonic()
        timeout = self.deps.config.heartbeat_timeout_sec
        for record in self.deps.registry.all():
            runtime = self.deps.runtimes.find(record.instance_id)
            if runtime is None or not record.assembled:
                continue
            for pod in record.pods.values():
                if now_mono - pod.last_heartbeat_sec >= timeout:
                    state = self._state(record.instance_id)
                    for rank in set(pod.ranks) - runtime.dead_committed:
                        state.missing_since_sec.setdefault(rank, pod.last_heartbeat_sec)

    async def evaluate(self, instance_id: int) -> None:
        deps = self.deps
        runtime = deps.runtimes.get(instance_id)
        state = self._state(instance_id)
        now = deps.clock.monotonic()
        if state.strategy is not None:
            # The running strategy owns the instance; a round absorbs late DEAD ranks itself.
            return
        if runtime.phase is FtPhase.RECONFIGURING:
            if state.reconfigure_after_sec is None or now >= state.reconfigure_after_sec:
                self._start(instance_id, ReconfigurationStrategy(deps, instance_id, state.reconfigure_reason or "resuming reconfiguration"))
            return
        ft = deps.config.fault_tolerance_config
        if state.forced_reason:
            reason, state.forced_reason = state.forced_reason, ""
            self.correlation.clear(instance_id)
            self._start(instance_id, ReconfigurationStrategy(deps, instance_id, reason))
            return
        partial = self._partial_loss(instance_id, runtime.phase, runtime.dead_committed, now)
        if partial:
            self._start(instance_id, ReconfigurationStrategy(deps, instance_id, partial))
            return
        decision = decide(
            active_ranks=runtime.active_ranks,
            health={rank: ev.health for rank, ev in state.evidence.items()},
            window_started_at_sec=state.window_started_sec,
            now_sec=now,
            collection_timeout_sec=ft.software_status_collection_timeout_sec,
            scale_down_enabled=ft.enable_fault_tolerance and ft.enable_dp_scale_down,
            fast_recovery_applicable=lambda unhealthy: self.fast_recovery.is_applicable(instance_id, unhealthy),
        )
        verdict = self.correlation.judge(instance_id, decision, now)
        if verdict.action == "wait":
            return
        if verdict.action == "reconfigure":
            self.correlation.clear(instance_id)
            log.warning("instance=%d %s", instance_id, verdict.reason)
            self._start(instance_id, ReconfigurationStrategy(deps, instance_id, verdict.reason))
            return
        if decision.action in (Action.NONE, Action.WAIT):
            return
        self.correlation.clear(instance_id)
        log.info("instance=%d decision=%s %s", instance_id, decision.action, decision.reason)
        if decision.action is Action.FAST_RECOVERY:
            self._start(instance_id, self.fast_recovery.create(deps, instance_id))
        elif decision.action is Action.SCALE_DOWN:
            ctx = ScaleDownContext(
                instance_id=instance_id,
                original_dp_ranks=runtime.original_dp_ranks,
                dead_committed=runtime.dead_committed,
                dead=decision.dead,
                unhealthy=decision.unhealthy,
                fallback_strategy=runtime.fallback_strategy,
                decided_at_sec=deps.clock.wall(),
                hardware_ranks=verdict.hardware_ranks,
            )
            self._start(instance_id, DpScaleDownStrategy(deps, ctx))
        elif decision.action is Action.RECONFIGURE:
            self._start(instance_id, ReconfigurationStrategy(deps, instance_id, decision.reason))

    def _partial_loss(self, instance_id: int, phase: FtPhase, dead_committed: frozenset[int], now: float) -> str:
        """The baseline partial-loss whole-instance shutdown; suppressed in the transaction window
        and never driven by ranks that already have software DEAD evidence (that path decides)."""
        if phase in TRANSACTION_PHASES:
            return ""
        state = self._state(instance_id)
        grace = self.deps.config.heartbeat_timeout_sec
        lost = sorted(
            rank
            for rank, since in state.missing_since_sec.items()
            if rank not in dead_committed
            and now - since >= grace
            and not (rank in state.evidence and state.evidence[rank].health is Health.DEAD)
        )
        return f"partial loss: ranks {lost} missing from heartbeats for {grace:g}s" if lost else ""

    def _start(self, instance_id: int, strategy: Strategy) -> None:
        state = self._state(instance_id)
        if state.strategy is not None:
            raise RuntimeError(f"instance {instance_id}: {state.strategy.name} is still running")
        state.strategy = strategy
        # The evidence that led here goes into the strategy's timeline (stage latencies start there).
        strategy.evidence = sorted(state.evidence.values(), key=lambda ev: ev.observed_at_sec)
        state.strategy_task = asyncio.create_task(strategy.run(), name=f"{strategy.name}-{instance_id}")
        state.driver = asyncio.create_task(self._drive(instance_id, strategy, state.strategy_task))

    async def preempt_and_start(self, instance_id: int, strategy: Strategy) -> bool:
        """Starts `strategy`, preempting a running one of lower priority; False when it may not."""
        state = self._state(instance_id)
        if state.strategy is not None:
            if not should_preempt(state.strategy, strategy.priority):
                return False
            await self._preempt(instance_id)
        self._start(instance_id, strategy)
        return True

    async def _preempt(self, instance_id: int) -> None:
        """stop(), then wait for both the logical finish and the task's completion, so an old
        transaction's abort never overlaps a new guard."""
        state = self._state(instance_id)
        strategy, task, driver = state.strategy, state.strategy_task, state.driver
        if strategy is None or task is None:
            return
        log.warning("instance=%d preempting %s", instance_id, strategy.name)
        strategy.stop()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        if driver is not None:
            await asyncio.gather(driver, return_exceptions=True)
        assert strategy.is_finished() and task.done()

    async def _drive(self, instance_id: int, strategy: Strategy, task: asyncio.Task[Outcome]) -> None:
        state = self._state(instance_id)
        try:
            outcome = await asyncio.shield(task)
        except asyncio.CancelledError:
            outcome = None
        except Exception as exc:  # noqa: BLE001 - a strategy bug must still escalate, not wedge the instance
            log.exception("instance=%d %s crashed", instance_id, strategy.name)
            outcome = Outcome(False, f"{strategy.name} crashed: {exc}", fallback=FALLBACK_RECONFIGURATION)
        finally:
            state.strategy = None
            state.strategy_task = None
            state.driver = None
        if outcome is None or self._closing:
            return
        self._on_outcome(instance_id, strategy, outcome)
        self.notify()

    def _on_outcome(self, instance_id: int, strategy: Strategy, outcome: Outcome) -> None:
        deps = self.deps
        state = self._state(instance_id)
        runtime = deps.runtimes.get(instance_id)
        now = deps.clock.monotonic()
        if outcome.succeeded:
            log.info("instance=%d %s succeeded: %s", instance_id, strategy.name, outcome.detail)
            # Engine observations at outcome time supersede older reports; committed ranks are done.
            for rank, ev in list(state.evidence.items()):
                if rank in runtime.dead_committed or ev.observed_at_sec <= outcome.observed_at_sec:
                    del state.evidence[rank]
                    state.first_seen_sec.pop(rank, None)
            for rank in list(state.missing_since_sec):
                if rank in runtime.dead_committed or isinstance(strategy, ReconfigurationStrategy):
                    del state.missing_since_sec[rank]
            state.window_started_sec = min(state.first_seen_sec.values(), default=None)
            state.reconfigure_after_sec = None
            state.reconfigure_reason = ""
            self.correlation.clear(instance_id)
            return
        if isinstance(strategy, ReconfigurationStrategy):
            retry = deps.config.fault_tolerance_config.strategy_center_check_interval
            state.reconfigure_after_sec = now + retry
            state.reconfigure_reason = f"retrying after: {outcome.detail}"
            log.error("instance=%d reconfiguration failed, retrying in %gs: %s", instance_id, retry, outcome.detail)
            return
        # A failed scale-down or fast recovery goes straight to the frozen fallback, never to another round.
        log.warning("instance=%d %s failed, fallback %s: %s", instance_id, strategy.name,
                    outcome.fallback or FALLBACK_RECONFIGURATION, outcome.detail)
        self._start(instance_id, ReconfigurationStrategy(deps, instance_id, f"{strategy.name} failed: {outcome.detail}"))
