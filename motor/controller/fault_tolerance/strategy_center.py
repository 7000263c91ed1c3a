"""The strategy centre (RFC §4.3): turns each instance's evidence into at most one running strategy —
start, drive to its outcome, escalate a failure to the frozen fallback, retry a failed
reconfiguration — and stops strategies cleanly (a stopped strategy's cleanup finishes before anything
else starts on that instance). It never executes a transaction itself.

It wakes on every report and scans every `strategy_center_check_interval`, sooner when a collection
window, a heartbeat grace or a retry delay ends.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from motor.common.waiting import wait_set
from motor.controller.fault_tolerance.context import ScaleDownContext
from motor.controller.fault_tolerance.correlation import HardwareCorrelation
from motor.controller.fault_tolerance.decision import Action, FallbackCause, decide, reconfiguration_retry_delay_sec
from motor.controller.fault_tolerance.evidence_intake import EvidenceIntake
from motor.controller.fault_tolerance.fast_recovery_policy import FaultFacts, collect_facts
from motor.controller.fault_tolerance.hardware_intake import HardwareIntake
from motor.controller.fault_tolerance.idle_probe import IdleProbe
from motor.controller.fault_tolerance.running import RunningStrategies
from motor.controller.fault_tolerance.strategy.base import ControllerDeps, Outcome, Prelude, Strategy
from motor.controller.fault_tolerance.strategy.dp_scale_down import DpScaleDownStrategy
from motor.controller.fault_tolerance.strategy.reconfiguration import ReconfigurationStrategy
from motor.controller.model.runtime import FALLBACK_RECONFIGURATION

log = logging.getLogger(__name__)

_MIN_WAKE_SEC = 0.05


class FastRecovery(Protocol):
    """EngineFastRecoveryStrategy's entry points. All-UNHEALTHY-no-DEAD is only its structural
    precondition; sufficiency (levels, codes, sources of the evidence: FaultFacts) is the
    implementation's own call (strategy.fast_recovery.RetryFastRecovery)."""

    def is_applicable(self, facts: FaultFacts) -> bool: ...

    def create(self, deps: ControllerDeps, facts: FaultFacts) -> Strategy: ...


@dataclass
class _Slot:
    task: asyncio.Task[Outcome] | None = None
    driver: asyncio.Task[None] | None = None
    retry_after_sec: float | None = None
    retry_reason: str = ""


class StrategyCenter:
    def __init__(
        self,
        deps: ControllerDeps,
        intake: EvidenceIntake,
        hardware: HardwareIntake,
        correlation: HardwareCorrelation,
        running: RunningStrategies,
        fast_recovery: FastRecovery,
        *,
        wake: asyncio.Event,
        on_waiting: Callable[[int], None],
        on_started: Callable[[int], None] = lambda instance_id: None,
        idle_probe: IdleProbe | None = None,
    ) -> None:
        self.deps = deps
        self.intake = intake
        self.hardware = hardware
        self.correlation = correlation
        self._running = running
        self.fast_recovery = fast_recovery
        self._slots: dict[int, _Slot] = {}
        # Set by every report (and by notify): the loop evaluates at once.
        self._wake = wake
        # Called for an instance whose snapshot is still incomplete (the snapshot puller's ensure).
        self._on_waiting = on_waiting
        # Called when a strategy starts (the snapshot puller's poke: its outstanding probe ends).
        self._on_started = on_started
        # The idle-fault probe (opt-in): sees every WAIT decision; its canaries go into the timeline
        # of the transaction that ends the collection window.
        self.idle_probe = idle_probe
        self._loop_task: asyncio.Task[None] | None = None
        self._closing = False

    def _slot(self, instance_id: int) -> _Slot:
        return self._slots.setdefault(instance_id, _Slot())

    def retry_after(self, instance_id: int) -> tuple[float | None, str]:
        """(monotonic time of the next reconfiguration attempt or None, why it is retried)."""
        slot = self._slots.get(instance_id)
        return (slot.retry_after_sec, slot.retry_reason) if slot is not None else (None, "")

    def running(self, instance_id: int) -> Strategy | None:
        return self._running.get(instance_id)

    def notify(self) -> None:
        self._wake.set()

    def start(self) -> None:
        self._loop_task = asyncio.create_task(self._run(), name="strategy-centre")

    async def close(self) -> None:
        self._closing = True
        if self._loop_task is not None:
            self._loop_task.cancel()
            await asyncio.gather(self._loop_task, return_exceptions=True)
        for instance_id in list(self._slots):
            await self.stop_running(instance_id)

    async def _run(self) -> None:
        interval = self.deps.config.fault_tolerance_config.strategy_center_check_interval
        while not self._closing:
            timeout = max(_MIN_WAKE_SEC, min(interval, self._next_deadline_sec() - self.deps.clock.monotonic()))
            await wait_set(self._wake, timeout)
            self._wake.clear()
            try:
                await self.evaluate_all()
            except Exception:  # noqa: BLE001 - the strategy centre must outlive any single bad evaluation
                log.exception("strategy centre evaluation failed")

    def _next_deadline_sec(self) -> float:
        ft = self.deps.config.fault_tolerance_config
        deadlines = [float("inf"), *self.correlation.deadlines()]
        deadlines += self.intake.deadlines(ft.software_status_collection_timeout_sec, self.deps.config.heartbeat_timeout_sec)
        deadlines += [s.retry_after_sec for s in self._slots.values() if s.retry_after_sec is not None]
        if self.idle_probe is not None:
            deadlines += self.idle_probe.deadlines()
        return min(deadlines)

    async def evaluate_all(self) -> None:
        self._check_silent_pods()
        for runtime in self.deps.runtimes.all():
            record = self.deps.registry.get(runtime.instance_id)
            if record is None or not record.assembled:
                continue
            await self.evaluate(runtime.instance_id)

    def _check_silent_pods(self) -> None:
        now = self.deps.clock.monotonic()
        timeout = self.deps.config.heartbeat_timeout_sec
        for record in self.deps.registry.all():
            runtime = self.deps.runtimes.find(record.instance_id)
            if runtime is None or not record.assembled:
                continue
            for pod in record.pods.values():
                if now - pod.last_heartbeat_sec >= timeout:
                    self.intake.mark_silent(record.instance_id, set(pod.ranks) - runtime.dead_committed,
                                            pod.last_heartbeat_sec)

    def _reconfigure(self, instance_id: int, cause: FallbackCause, reason: str) -> None:
        self.start_strategy(instance_id, ReconfigurationStrategy(self.deps, instance_id, reason, cause))

    async def evaluate(self, instance_id: int) -> None:
        deps = self.deps
        runtime = deps.runtimes.get(instance_id)
        slot = self._slot(instance_id)
        now = deps.clock.monotonic()
        if self._running.busy(instance_id):
            # The running strategy owns the instance; a round absorbs late DEAD ranks itself.
            return
        if runtime.reconfiguring:
            if runtime.reconfiguration_gave_up:
                return
            if slot.retry_after_sec is None or now >= slot.retry_after_sec:
                cause = FallbackCause.RETRY if slot.retry_reason else FallbackCause.INTERRUPTED_ROUND
                self._reconfigure(instance_id, cause, slot.retry_reason or "resuming reconfiguration")
            return
        forced = self.hardware.take_forced(instance_id)
        if forced is not None:
            self.correlation.clear(instance_id)
            self._reconfigure(instance_id, forced.cause, forced.reason)
            return
        partial = self.intake.partial_loss(instance_id, runtime.phase, runtime.dead_committed, now,
                                           deps.config.heartbeat_timeout_sec)
        if partial:
            self._reconfigure(instance_id, FallbackCause.PARTIAL_LOSS, partial)
            return
        ft = deps.config.fault_tolerance_config
        state = self.intake.of(instance_id)

        def facts(unhealthy: frozenset[int]) -> FaultFacts:
            record = deps.registry.get(instance_id)
            return collect_facts(
                instance_id=instance_id, active_ranks=runtime.active_ranks, unhealthy=unhealthy,
                evidence=state.evidence, pending_hardware=self.correlation.pending(instance_id),
                window_started_sec=state.window_started_sec, missing_since_sec=state.missing_since_sec,
                capability=record.capability() if record else (None, "instance topology unknown"), now_sec=now)

        decision = decide(
            active_ranks=runtime.active_ranks,
            health=state.health(),
            window_started_at_sec=state.window_started_sec,
            now_sec=now,
            collection_timeout_sec=ft.software_status_collection_timeout_sec,
            scale_down_enabled=ft.enable_fault_tolerance and ft.enable_dp_scale_down,
            fast_recovery_applicable=lambda unhealthy: self.fast_recovery.is_applicable(facts(unhealthy)),
        )
        verdict = self.correlation.judge(instance_id, decision, now, state.window_started_sec,
                                         frozenset(state.evidence))
        if verdict.action == "wait":
            return
        if verdict.action == "reconfigure":
            self.correlation.clear(instance_id)
            log.warning("instance=%d %s", instance_id, verdict.reason)
            self._reconfigure(instance_id, FallbackCause.HARDWARE_NOT_CORRELATED, verdict.reason)
            return
        if decision.action is Action.WAIT:
            self._on_waiting(instance_id)
            if self.idle_probe is not None:
                self.idle_probe.consider(instance_id, decision, state.window_started_sec, state.evidence,
                                         runtime.active_ranks)
            return
        if decision.action is Action.NONE:
            return
        self.correlation.clear(instance_id)
        log.info("instance=%d decision=%s %s", instance_id, decision.action, decision.reason)
        if decision.action is Action.FAST_RECOVERY:
            self.start_strategy(instance_id, self.fast_recovery.create(deps, facts(decision.unhealthy)))
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
            self.start_strategy(instance_id, DpScaleDownStrategy(deps, ctx))
        elif decision.action is Action.RECONFIGURE:
            self._reconfigure(instance_id, decision.cause or FallbackCause.INCOMPLETE_SNAPSHOT, decision.reason)

    def start_strategy(self, instance_id: int, strategy: Strategy) -> None:
        slot = self._slot(instance_id)
        self._running.begin(instance_id, strategy)
        # The evidence that led here goes into the strategy's timeline (stage latencies start there).
        prelude = Prelude(
            evidence=tuple(sorted(self.intake.of(instance_id).evidence.values(), key=lambda ev: ev.observed_at_sec)),
            probes=tuple(self.idle_probe.take(instance_id) if self.idle_probe is not None else ()),
        )
        slot.task = asyncio.create_task(strategy.run(prelude), name=f"{strategy.name}-{instance_id}")
        slot.driver = asyncio.create_task(self._drive(instance_id, strategy, slot.task))
        self._on_started(instance_id)

    async def stop_running(self, instance_id: int) -> None:
        """stop(), then wait for both the logical finish and the task's completion, so an old
        transaction's abort never overlaps what comes next."""
        slot = self._slot(instance_id)
        strategy, task, driver = self._running.get(instance_id), slot.task, slot.driver
        if strategy is None or task is None:
            return
        log.warning("instance=%d stopping %s", instance_id, strategy.name)
        strategy.stop()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        if driver is not None:
            await asyncio.gather(driver, return_exceptions=True)
        assert strategy.is_finished() and task.done()

    async def _drive(self, instance_id: int, strategy: Strategy, task: asyncio.Task[Outcome]) -> None:
        slot = self._slot(instance_id)
        try:
            outcome = await asyncio.shield(task)
        except asyncio.CancelledError:
            outcome = None
        except Exception as exc:  # noqa: BLE001 - a strategy bug must still escalate, not wedge the instance
            log.exception("instance=%d %s crashed", instance_id, strategy.name)
            outcome = Outcome(False, f"{strategy.name} crashed: {exc}", fallback=FALLBACK_RECONFIGURATION)
        finally:
            self._running.end(instance_id)
            slot.task = slot.driver = None
        if outcome is None or self._closing:
            return
        self._on_outcome(instance_id, strategy, outcome)
        # Hardware faults kept while it ran are judged now, against the state it left.
        rebuilt = outcome.succeeded and isinstance(strategy, ReconfigurationStrategy)
        self.hardware.replay(instance_id, self.deps.clock.monotonic(), outcome.observed_mono_sec if rebuilt else None)
        self.notify()

    def _schedule_retry(self, instance_id: int, detail: str) -> None:
        """Bounded retries of a failed reconfiguration, with doubling backoff (never forever)."""
        config = self.deps.config
        slot, runtime = self._slot(instance_id), self.deps.runtimes.get(instance_id)
        runtime.reconfiguration_attempts += 1
        attempts = runtime.reconfiguration_attempts
        delay = reconfiguration_retry_delay_sec(
            attempts, max_attempts=config.reconfiguration_max_attempts,
            first_delay_sec=config.fault_tolerance_config.strategy_center_check_interval,
            max_delay_sec=config.reconfiguration_max_backoff_sec)
        if delay is None:
            runtime.reconfiguration_gave_up = True
            slot.retry_after_sec = None
            self.deps.runtimes.set_error(instance_id, f"reconfiguration gave up after {attempts} attempts (waiting for "
                                                      f"a pod to register again): {detail}")
            log.error("instance=%d reconfiguration failed %d times, giving up until a pod re-registers: %s",
                      instance_id, attempts, detail)
        else:
            slot.retry_after_sec = self.deps.clock.monotonic() + delay
            slot.retry_reason = f"retry {attempts + 1} of {config.reconfiguration_max_attempts} after: {detail}"
            log.error("instance=%d reconfiguration failed (attempt %d), retrying in %gs: %s", instance_id, attempts,
                      delay, detail)
        self.deps.changed(instance_id)

    def resume_reconfiguration(self, instance_id: int) -> None:
        """A pod of the instance registered again: a reconfiguration that gave up may try anew."""
        runtime = self.deps.runtimes.find(instance_id)
        if runtime is not None and runtime.reconfiguration_gave_up:
            runtime.reconfiguration_gave_up, runtime.reconfiguration_attempts = False, 0
            self._slot(instance_id).retry_after_sec = None
            log.info("instance=%d a pod registered again: reconfiguration resumes", instance_id)
            self.notify()

    def _on_outcome(self, instance_id: int, strategy: Strategy, outcome: Outcome) -> None:
        deps = self.deps
        slot = self._slot(instance_id)
        runtime = deps.runtimes.get(instance_id)
        whole_rebuild = isinstance(strategy, ReconfigurationStrategy)
        if outcome.succeeded:
            log.info("instance=%d %s succeeded: %s", instance_id, strategy.name, outcome.detail)
            self.intake.settle(instance_id, runtime.dead_committed, outcome.observed_mono_sec, whole_rebuild,
                               outcome.last_reads)
            slot.retry_after_sec, slot.retry_reason = None, ""
            if whole_rebuild:
                runtime.reconfiguration_attempts, runtime.reconfiguration_gave_up = 0, False
            self.correlation.clear(instance_id)
            return
        if whole_rebuild:
            self._schedule_retry(instance_id, outcome.detail)
            return
        if outcome.next_strategy is not None:
            # Its own fallback (a failed scale-up's planned restoration), started before anything else can.
            log.warning("instance=%d %s failed, %s next: %s", instance_id, strategy.name, outcome.next_strategy.name,
                        outcome.detail)
            self.start_strategy(instance_id, outcome.next_strategy)
            return
        # A failed scale-down or fast recovery goes straight to the frozen fallback, never to another round.
        log.warning("instance=%d %s failed, fallback %s: %s", instance_id, strategy.name,
                    outcome.fallback or FALLBACK_RECONFIGURATION, outcome.detail)
        self._reconfigure(instance_id, FallbackCause.STRATEGY_FAILED, f"{strategy.name} failed: {outcome.detail}")
