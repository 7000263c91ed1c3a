"""FastRecoveryStrategy: the RFC's EngineFastRecoveryStrategy, by the engines' `retry` (the one
command of vLLM's released FT framework, kept by vLLM's scale-down PR and SGLang's FT manager).

For a snapshot where every active rank is UNHEALTHY and none DEAD (a transient collective failure):
guard every participant → poll until every rank is apply-ready → drain → one `retry` to every rank
with one request id → poll until every rank is healthy → finalize(commit) with nothing retired →
back to NORMAL / SCALED_DOWN_RUNNING → publish. No rank is removed, no engine restarted.

RFC §4.3: it is never preempted by a scale-down (the strategy centre starts nothing while it runs; a
DEAD rank appearing meanwhile fails it) and a failure goes straight to whole-instance
reconfiguration, never to a scale-down. Like a round, it never re-sends the retry; before its commit
any failure (or a stop) sends finalize(abort) to every NodeManager not committed.

`RetryFastRecovery` is the plug-in the strategy centre asks: its policy (fast_recovery_policy.judge)
over the fault's data, the attempts per window, and the strategy it starts.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from gen.motor.v1 import common_pb2, node_manager_pb2
from motor.common.config.fault_tolerance import FaultToleranceConfig
from motor.common.text import rank_ranges
from motor.controller.fault_tolerance.engine_states import (
    APPLY_WAIT_STATES,
    RECOVERY_WAIT_STATES,
    Verdict,
    apply_readiness,
    poll_delay_sec,
    recovery_state,
    status_text,
)
from motor.controller.fault_tolerance.evidence import RankRead
from motor.controller.fault_tolerance.fast_recovery_policy import AttemptBook, FaultFacts, judge
from motor.controller.fault_tolerance.strategy.base import ControllerDeps, Outcome, Priority, Strategy
from motor.controller.fault_tolerance.strategy.round_calls import RoundCalls, RoundFailed, StatusRead, read_statuses
from motor.controller.fault_tolerance.topology import RoundPlan, TopologyError, plan_round
from motor.controller.model.runtime import FtPhase
from motor.controller.persistence import StoreError

log = logging.getLogger(__name__)

_HEALTH = common_pb2.EngineHealth


class Stopped(Exception):
    pass


def retry_readiness(s: common_pb2.EngineFtStatus) -> Verdict:
    """Before the retry: as a round's survivors (apply-ready on (unhealthy, -)), except that a DEAD
    rank fails the attempt: fast recovery never turns into a scale-down."""
    verdict = apply_readiness(s)
    return Verdict.FAIL if verdict is Verdict.DEAD else verdict


def retry_outcome(s: common_pb2.EngineFtStatus, request_ids: frozenset[str]) -> Verdict:
    """After the retry: healthy is done; an engine still UNHEALTHY that names one of this attempt's
    request ids with an ft_error refused or failed it (vLLM answers 202 first and says so in
    status), so waiting longer cannot help."""
    if s.status == _HEALTH.ENGINE_HEALTH_UNHEALTHY and s.ft_error and s.last_ft_request_id in request_ids:
        return Verdict.FAIL
    return recovery_state(s)


class FastRecoveryStrategy(Strategy):
    name = "fast_recovery"
    priority = Priority.FAST_RECOVERY

    def __init__(self, deps: ControllerDeps, facts: FaultFacts, request_id: str | None = None) -> None:
        super().__init__(deps, facts.instance_id)
        self.facts = facts
        self.request_id = request_id or f"fr-{facts.instance_id}-{deps.new_id()}"
        self.calls = RoundCalls(deps.nodemanagers, facts.instance_id, self.request_id, self.timed_call, deps.clock)
        # Engines that make their own request id (vLLM 0.33.0) name it in status: both are this attempt's.
        self._request_ids = {self.request_id}
        self._committed = False
        self.last_observed_mono_sec = 0.0
        self.last_reads: dict[int, RankRead] = {}

    def _log(self, level: int, msg: str, *args: object) -> None:
        log.log(level, "instance=%d request_id=%s " + msg, self.instance_id, self.request_id, *args)

    @property
    def _config(self):
        return self.deps.config.fault_tolerance_config.fast_recovery_config

    async def _persist(self, must: bool) -> None:
        try:
            await self.deps.persist(self.instance_id)
        except StoreError as exc:
            self._log(logging.ERROR, "persisting runtime failed: %s", exc)
            if must:
                raise RoundFailed(f"persisting runtime failed: {exc}") from None
            self.deps.runtimes.set_error(self.instance_id, f"persisting runtime failed: {exc}")

    def _check_stop(self) -> None:
        if self.stop_requested:
            raise Stopped("stopped")
        if not self._committed and self.hardware_faults:
            ranks, what = self.hardware_faults[0]
            # A card failing under the retry: the fault is not transient.
            raise RoundFailed(f"hardware fault {what} on ranks {sorted(ranks)} during the retry")

    def _plan(self) -> RoundPlan:
        record = self.deps.registry.get(self.instance_id)
        if record is None:
            raise RoundFailed(f"topology of instance {self.instance_id} is unknown")
        runtime = self.deps.runtimes.get(self.instance_id)
        try:
            return plan_round(original_dp_ranks=runtime.original_dp_ranks, dead_committed=runtime.dead_committed,
                              removed_this_round=(), endpoints=record.endpoint_infos(), pods=record.pod_infos(),
                              retry=True)
        except TopologyError as exc:
            raise RoundFailed(f"topology check failed: {exc}") from None

    async def execute(self) -> Outcome:
        deps = self.deps
        runtime = deps.runtimes.get(self.instance_id)
        back_to = FtPhase.SCALED_DOWN_RUNNING if runtime.dead_committed else FtPhase.NORMAL
        self.begin_transaction(self.request_id)
        self.txn.decision("fast_recovery", deps.clock.wall(), self.facts.describe(),
                          unhealthy_ranks=sorted(self.facts.unhealthy), dead_committed=sorted(runtime.dead_committed),
                          hardware_ranks=sorted(r for h in self.facts.hardware for r in h.ranks))
        deps.runtimes.begin_round(self.instance_id, self.request_id, ())
        healed = False
        try:
            self.set_phase(FtPhase.FAST_RECOVERING, f"retry of ranks {rank_ranges(sorted(runtime.active_ranks))}")
            await self._persist(must=True)
            plan = self._plan()
            lease_sec = self._config.guard_lease_sec(deps.config.fault_tolerance_config.dp_scale_down_config
                                                     .request_timeout_sec)

            async def guard_then_read(plan: RoundPlan, read: StatusRead) -> list[common_pb2.EngineFtStatus]:
                return await self.calls.guard_all(plan, lease_sec, then_read=read)

            ready = await self._poll(plan, retry_readiness, APPLY_WAIT_STATES, goal="apply-ready",
                                     first_fan_out=guard_then_read, healed_ok=True)
            healed = ready == "healed"
            if healed:
                # Every rank read healthy before the retry: the engines recovered on their own.
                self.txn.note("healed", deps.clock.wall(), "every rank healthy before the retry: none sent")
            else:
                await self.drain()
                self._check_stop()
                results = await self.calls.apply(plan, 0, node_manager_pb2.INSTRUCTION_RETRY)
                self._request_ids.update(r.engine_request_id for r in results if r.engine_request_id)
                ids = frozenset(self._request_ids)
                await self._poll(plan, lambda s: retry_outcome(s, ids), RECOVERY_WAIT_STATES,
                                 goal="healthy after retry", done_stays_done=True)
            self._check_stop()
            await self.calls.finalize_commit(plan)
            self._committed = True
        except (RoundFailed, Stopped) as exc:
            return self._failed(str(exc))
        except asyncio.CancelledError:
            self._failed("cancelled: stopped")
            raise
        finally:
            if not self._committed:
                await self.calls.abort_uncommitted()
        return await self._after_commit(back_to, healed)

    def _failed(self, reason: str) -> Outcome:
        self._log(logging.WARNING, "fast recovery failed: %s", reason)
        self.deps.runtimes.set_error(self.instance_id, f"fast recovery {self.request_id} failed: {reason}")
        if self.txn:
            self.txn.finish(f"failed: {reason}", self.deps.clock.wall())
        self.deps.changed(self.instance_id)
        return Outcome(False, reason, observed_mono_sec=self.last_observed_mono_sec)

    async def _after_commit(self, back_to: FtPhase, healed: bool) -> Outcome:
        deps = self.deps
        self.set_phase(back_to, "every rank healthy" + (" (healed before the retry)" if healed else " after retry"))
        await self._persist(must=False)
        await self.publish()
        await self.note_reinference()
        if self.txn:
            self.txn.finish("succeeded", deps.clock.wall())
        deps.changed(self.instance_id)
        ranks = sorted(deps.runtimes.get(self.instance_id).active_ranks)
        return Outcome(True, f"ranks {rank_ranges(ranks)} " + ("healed" if healed else "retried"),
                       observed_mono_sec=self.last_observed_mono_sec, last_reads=dict(self.last_reads))

    async def _poll(self, plan: RoundPlan, judge_one: Callable[[common_pb2.EngineFtStatus], Verdict],
                    wait_states: frozenset[tuple[int, int]], *, goal: str, first_fan_out=None,
                    done_stays_done: bool = False, healed_ok: bool = False) -> str:
        """Polls every rank until `judge_one` says each is done, within execution_deadline_sec: "done",
        or "healed" when `healed_ok` and every rank read healthy (nothing left to retry). Any FAIL
        verdict, a missing entry or the deadline fails the attempt. Bounded by the deadline: each
        poll waits at least the backoff delay (the NodeManagers long-poll `wait_states`)."""
        cfg = self._config
        deadline = self.deps.clock.monotonic() + cfg.execution_deadline_sec
        polls = 0
        done: set[int] = set()
        fan_out = first_fan_out or self.calls.status
        while True:
            self._check_stop()
            asked_mono_sec = self.deps.clock.monotonic()
            settle_sec = max(0.0, min(cfg.poll_interval_sec, deadline - asked_mono_sec))
            statuses = await read_statuses(self, plan, StatusRead(frozenset(done), wait_states, settle_sec), fan_out, "ranks")
            fan_out = self.calls.status
            if healed_ok and statuses and all(s.status == _HEALTH.ENGINE_HEALTH_HEALTHY and not s.ft_state
                                              for s in statuses.values()):
                return "healed"
            verdicts = {rank: judge_one(status) for rank, status in statuses.items()}
            if done_stays_done:
                done.update(r for r, v in verdicts.items() if v is Verdict.DONE)
            failing = sorted(r for r, v in verdicts.items() if v is not Verdict.DONE and v is not Verdict.WAIT)
            if failing:
                raise RoundFailed(f"ranks not {goal}: " + ", ".join(f"rank {r} {status_text(statuses[r])}"
                                                                    for r in failing))
            waiting = sorted(r for r, v in verdicts.items() if v is Verdict.WAIT)
            if not waiting:
                return "done"
            remaining = deadline - self.deps.clock.monotonic()
            if remaining <= 0:
                raise RoundFailed(f"ranks {waiting} not {goal} within {cfg.execution_deadline_sec:g}s: "
                                  + ", ".join(f"rank {r} {status_text(statuses[r])}" for r in waiting))
            delay = poll_delay_sec(polls, cfg.poll_interval_sec) - (self.deps.clock.monotonic() - asked_mono_sec)
            if delay > 0:
                await self.deps.clock.sleep(min(delay, remaining))
            polls += 1


class RetryFastRecovery:
    """The strategy centre's fast-recovery plug-in: judges each all-UNHEALTHY snapshot by the policy
    and counts the attempts it starts per instance."""

    def __init__(self, ft: FaultToleranceConfig) -> None:
        self._ft = ft
        self.attempts = AttemptBook()
        self._said: dict[int, str] = {}

    def is_applicable(self, facts: FaultFacts) -> bool:
        cfg = self._ft.fast_recovery_config
        verdict = judge(facts, enabled=self._ft.fast_recovery_enabled, config=cfg,
                        attempts_in_window=self.attempts.count(facts.instance_id, facts.now_sec,
                                                               cfg.attempt_window_sec))
        if self._ft.fast_recovery_enabled and self._said.get(facts.instance_id) != verdict.reason:
            # Once per change of mind: the centre asks on every evaluation.
            self._said[facts.instance_id] = verdict.reason
            log.info("instance=%d fast recovery %s: %s", facts.instance_id,
                     "applicable" if verdict.applicable else "not applicable", verdict.reason)
        return verdict.applicable

    def create(self, deps: ControllerDeps, facts: FaultFacts) -> Strategy:
        cfg = self._ft.fast_recovery_config
        self.attempts.record(facts.instance_id, facts.now_sec, cfg.max_attempts)
        self._said.pop(facts.instance_id, None)
        return FastRecoveryStrategy(deps, facts)
