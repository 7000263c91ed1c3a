"""DpScaleDownStrategy: the side-effecting executor of ONE scale-down round (RFC §5).

gate → topology → guard every participant → status loop (absorbing late DEAD survivors) → drain →
exactly one apply → poll until every survivor is healthy → finalize(commit) → dead_committed +=
round → [stop emptied pods once] → SCALED_DOWN_RUNNING → publish the survivors.

It never retries an apply and never changes its request_id. Before the Controller's own commit, any
failure (or preemption) sends finalize(abort) to every participant not yet committed and hands the
frozen fallback back to the FaultManager. After the commit nothing is rolled back: persistence, pod
stop or publication failures only set last_error / serving_published (a failed write is retried in
the background by the persister until the store holds the committed state).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TypeVar

from gen.motor.v1 import common_pb2
from motor.common.text import rank_ranges
from motor.controller.fault_tolerance.context import ScaleDownContext
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
from motor.controller.fault_tolerance.gate import evaluate_gate
from motor.controller.fault_tolerance.strategy.base import (
    ControllerDeps,
    Outcome,
    Priority,
    Strategy,
)
from motor.controller.fault_tolerance.strategy.round_calls import (
    RoundCalls,
    RoundFailed,
    StatusFanOut,
    StatusRead,
    read_statuses,
)
from motor.controller.fault_tolerance.timeline import gate_reason_proto
from motor.controller.fault_tolerance.topology import (
    RoundPlan,
    TopologyError,
    plan_round,
    recyclable_pods,
)
from motor.controller.model.runtime import FtPhase
from motor.controller.persistence import StoreError

log = logging.getLogger(__name__)

T = TypeVar("T")



class Preempted(Exception):
    pass


class DpScaleDownStrategy(Strategy):
    name = "dp_scale_down"
    priority = Priority.DP_SCALE_DOWN

    def __init__(self, deps: ControllerDeps, ctx: ScaleDownContext, request_id: str | None = None) -> None:
        super().__init__(deps, ctx.instance_id)
        self.ctx = ctx
        self.request_id = request_id or f"sd-{ctx.instance_id}-{deps.new_id()}"
        self._round_dead: set[int] = set()
        self.calls = RoundCalls(deps.nodemanagers, ctx.instance_id, self.request_id, self.timed_call, deps.clock)
        self._controller_committed = False
        self._guarded_at_sec = 0.0
        self.last_observed_mono_sec = 0.0
        self.last_reads: dict[int, RankRead] = {}

    # ---- bookkeeping -------------------------------------------------------------------------

    def _log(self, level: int, msg: str, *args: object) -> None:
        log.log(level, "instance=%d request_id=%s " + msg, self.instance_id, self.request_id, *args)

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
            raise Preempted("preempted by a higher-priority strategy")
        if self._controller_committed:
            return
        survivors = self.deps.runtimes.get(self.instance_id).active_ranks - self._round_dead
        for ranks, what in self.hardware_faults:
            if ranks & survivors:
                # A survivor's card failed under the round: it cannot be counted on to rebuild.
                raise RoundFailed(f"hardware fault {what} on survivor ranks {sorted(ranks & survivors)} during the round")

    def _plan(self) -> RoundPlan:
        record = self.deps.registry.get(self.instance_id)
        if record is None:
            raise RoundFailed(f"topology of instance {self.instance_id} is unknown")
        runtime = self.deps.runtimes.get(self.instance_id)
        try:
            return plan_round(
                original_dp_ranks=runtime.original_dp_ranks,
                dead_committed=runtime.dead_committed,
                removed_this_round=self._round_dead,
                endpoints=record.endpoint_infos(),
                pods=record.pod_infos(),
            )
        except TopologyError as exc:
            raise RoundFailed(f"topology check failed: {exc}") from None

    # ---- the round ---------------------------------------------------------------------------

    async def execute(self) -> Outcome:
        deps, ctx = self.deps, self.ctx
        runtime = deps.runtimes.get(self.instance_id)
        if ctx.dead <= runtime.dead_committed:
            if runtime.phase is FtPhase.SCALED_DOWN_RUNNING:
                return Outcome(True, f"ranks {sorted(ctx.dead)} already committed", observed_mono_sec=deps.clock.monotonic())
            return Outcome(False, f"ranks {sorted(ctx.dead)} already committed but phase is {runtime.phase}",
                           fallback=ctx.fallback_strategy)
        self._round_dead = set(ctx.dead - runtime.dead_committed)
        self.begin_transaction(self.request_id)
        self.txn.decision(
            "scale_down", deps.clock.wall(),
            f"dead={sorted(ctx.dead)} unhealthy={sorted(ctx.unhealthy)} dead_committed={sorted(runtime.dead_committed)}",
            ranks=sorted(ctx.dead), unhealthy_ranks=sorted(ctx.unhealthy), dead_committed=sorted(runtime.dead_committed),
            hardware_ranks=sorted(ctx.hardware_ranks),
        )
        deps.runtimes.begin_round(self.instance_id, self.request_id, self._round_dead)
        try:
            self.set_phase(FtPhase.DECIDING, f"removing {sorted(self._round_dead)}")
            await self._persist(must=True)
            self._gate()
            plan = self._plan()
            # Taken before the guards go out: the leases start later, so renewals come early, never late.
            self._guarded_at_sec = deps.clock.monotonic()
            plan = await self._await_apply_ready(plan)
            await self.drain()
            self._check_stop()
            self.set_phase(FtPhase.SCALING_DOWN, f"apply removed_dp_ranks={list(plan.removed_cumulative)}")
            await self._persist(must=True)
            record = deps.registry.get(self.instance_id)
            store_port = record.store_port(plan.dp_master_rank, len(plan.removed_cumulative)) if record else 0
            await self._apply_and_await_recovered(plan, store_port)
            self.set_phase(FtPhase.POST_SCALE_CLEANUP)
            await self._persist(must=True)
            await self._renew_guards_if_due()
            await self.calls.finalize_commit(plan)
            self._commit(plan)
        except (RoundFailed, Preempted) as exc:
            return self._failed(str(exc))
        except asyncio.CancelledError:
            self._failed("cancelled: preempted")
            raise
        finally:
            if not self._controller_committed:
                await self.calls.abort_uncommitted()
        return await self._after_commit(plan)

    def _failed(self, reason: str) -> Outcome:
        self._log(logging.WARNING, "round failed: %s", reason)
        self.deps.runtimes.set_error(self.instance_id, f"scale-down {self.request_id} failed: {reason}")
        if self.txn:
            self.txn.finish(f"failed: {reason}", self.deps.clock.wall())
        self.deps.changed(self.instance_id)
        return Outcome(False, reason, fallback=self.ctx.fallback_strategy, observed_mono_sec=self.last_observed_mono_sec)

    def _gate(self) -> None:
        deps = self.deps
        record = deps.registry.get(self.instance_id)
        capability, note = record.capability() if record else (None, "instance topology unknown")
        ft = deps.config.fault_tolerance_config
        gate = evaluate_gate(
            enable_fault_tolerance=ft.enable_fault_tolerance,
            enable_dp_scale_down=ft.enable_dp_scale_down,
            capability=capability,
        )
        deps.runtimes.set_gate(self.instance_id, gate)
        if self.txn:
            self.txn.decision("gate", deps.clock.wall(), f"allowed={gate.allowed} reasons={list(gate.reason_codes)} {note}".strip(),
                              gate_allowed=gate.allowed, gate_reasons=[gate_reason_proto(c) for c in gate.reason_codes])
        if not gate.allowed:
            raise RoundFailed(f"gate refused: {','.join(gate.reason_codes)}" + (f" ({note})" if note else ""))

    def _note_skew(self, results) -> None:
        """Every survivor must check in to the engine's round within its window (10 s in vLLM's PR):
        the spread of the applies' send times is what eats into it."""
        sent = {r.endpoint_id: r.sent_at_unix_sec for r in results if r.sent_at_unix_sec > 0}
        if not sent or self.txn is None:
            return
        skew = max(sent.values()) - min(sent.values())
        self.txn.note("apply_skew", self.deps.clock.wall(), f"applies sent within {skew * 1000:.1f} ms",
                      skew_sec=skew, endpoint_ids=sorted(sent))
        self._log(logging.INFO, "apply skew %.3fs over survivors %s", skew, rank_ranges(list(sent)))

    async def _renew_guards_if_due(self) -> None:
        """Renews the guard every third of its lease while the round runs, so a round slower than
        the lease never relies on an expired lease."""
        lease = self.deps.config.fault_tolerance_config.guard_lease_sec
        now = self.deps.clock.monotonic()
        if now - self._guarded_at_sec >= lease / 3:
            await self.calls.renew_guards(lease)
            self._guarded_at_sec = now

    def _commit(self, plan: RoundPlan) -> None:
        # Every NodeManager committed: the engines' result is final, so the Controller commits too.
        self.deps.runtimes.commit_round(self.instance_id, plan.removed_this_round)
        self._controller_committed = True
        self._log(logging.INFO, "committed removal of %s; dead_committed=%s", list(plan.removed_this_round),
                  sorted(self.deps.runtimes.get(self.instance_id).dead_committed))

    async def _await_apply_ready(self, plan: RoundPlan) -> RoundPlan:
        """Guards every participant, then polls the survivors until they are apply-ready; the first
        poll rides on the guard fan-out (RoundCalls.guard_all: a pod is read once its guard holds)."""
        lease_sec = self.deps.config.fault_tolerance_config.guard_lease_sec

        def waiting(ranks: list[int]) -> None:
            if self.deps.runtimes.get(self.instance_id).phase is FtPhase.DECIDING:
                self.set_phase(FtPhase.WAITING_ENGINE_FAULT, f"waiting for survivors {ranks}")

        async def guard_then_read(plan: RoundPlan, read: StatusRead) -> list[common_pb2.EngineFtStatus]:
            return await self.calls.guard_all(plan, lease_sec, then_read=read)

        return await self._poll(plan, apply_readiness, APPLY_WAIT_STATES, goal="apply-ready", on_wait=waiting,
                                first_fan_out=guard_then_read)

    async def _apply_and_await_recovered(self, plan: RoundPlan, store_port: int) -> None:
        """Exactly one apply, then polls until every survivor is healthy; the first poll rides on the
        apply (RoundCalls.apply_then_read), and the execution deadline counts from the apply's
        answer (RFC §7: the wait after the apply has its own bound)."""
        async def apply_then_read(plan: RoundPlan, read: StatusRead) -> list[common_pb2.EngineFtStatus]:
            entries = await self.calls.apply_then_read(plan, store_port, read)
            self._note_skew(self.calls.applied)
            return entries

        # A survivor healthy after the apply stays done: the engines rebuilt only once every survivor
        # voted yes, so later polls read only the ones still rebuilding: at DP=256 a poll then skips
        # the hundreds of survivors already healthy.
        await self._poll(plan, recovery_state, RECOVERY_WAIT_STATES, goal="healthy after apply", done_stays_done=True,
                         first_fan_out=apply_then_read, deadline_from=lambda: self.calls.applied_mono_sec)

    async def _poll(self, plan: RoundPlan, judge: Callable[[common_pb2.EngineFtStatus], Verdict],
                    wait_states: frozenset[tuple[int, int]], *, goal: str,
                    on_wait: Callable[[list[int]], None] | None = None, done_stays_done: bool = False,
                    first_fan_out: StatusFanOut | None = None,
                    deadline_from: Callable[[], float] | None = None) -> RoundPlan:
        """Polls the survivors until `judge` says every one is done (or ready), within the execution
        deadline. A survivor judged 'dead' is absorbed into this round's removed set (only `apply_readiness`
        says so): each absorption removes a survivor, so the loop ends after at most len(survivors)
        absorptions plus the polls that fit before the deadline. With `done_stays_done` a survivor
        judged done is not read again.

        Each poll is a long poll: the NodeManagers wait out `wait_states` (the pairs `judge` calls WAIT)
        for up to poll_interval_sec and answer as soon as their engines settled, so no poll is spent
        before a rebuild can have finished and a settled survivor is seen within one re-read.
        A poll answered sooner than the backoff delay (a NodeManager that does not long-poll) is
        followed by the rest of the delay, so polls never come faster than the backoff. The first poll
        goes through `first_fan_out` when given (the guards, or the apply), the others through a plain
        status fan-out; with `deadline_from` the deadline counts from the time it gives once the first
        fan-out answered (the apply's answer)."""
        sd = self.deps.config.fault_tolerance_config.dp_scale_down_config
        deadline = self.deps.clock.monotonic() + sd.execution_deadline_sec
        polls = 0
        done: set[int] = set()
        fan_out = first_fan_out or self.calls.status
        first = True
        while True:
            self._check_stop()
            await self._renew_guards_if_due()
            asked_mono_sec = self.deps.clock.monotonic()
            settle_sec = max(0.0, min(sd.poll_interval_sec, deadline - asked_mono_sec))
            statuses = await read_statuses(self, plan, StatusRead(frozenset(done), wait_states, settle_sec), fan_out, "survivors")
            if first and deadline_from is not None:
                deadline = deadline_from() + sd.execution_deadline_sec
            fan_out, first = self.calls.status, False
            verdicts = {rank: judge(status) for rank, status in statuses.items()}
            if done_stays_done:
                done.update(r for r, v in verdicts.items() if v is Verdict.DONE)
            # Only ranks not already removed: each absorption shrinks the survivors, which bounds the loop.
            dead = sorted(r for r, v in verdicts.items() if v is Verdict.DEAD and r not in self._round_dead)
            if dead:
                self._round_dead.update(dead)
                self.deps.runtimes.set_pending(self.instance_id, self._round_dead)
                if self.txn:
                    self.txn.decision("absorb", self.deps.clock.wall(), f"survivors {dead} are dead: removed this round",
                                      ranks=dead)
                self._log(logging.INFO, "absorbed newly dead ranks %s; removing %s", dead, sorted(self._round_dead))
                plan = self._plan()
                continue
            failing = sorted(r for r, v in verdicts.items() if v is Verdict.FAIL)
            if failing:
                raise RoundFailed(f"survivors not {goal}: " + ", ".join(f"rank {r} {status_text(statuses[r])}" for r in failing))
            waiting = sorted(r for r, v in verdicts.items() if v is Verdict.WAIT)
            if not waiting:
                return plan
            if on_wait is not None:
                on_wait(waiting)
            remaining = deadline - self.deps.clock.monotonic()
            if remaining <= 0:
                raise RoundFailed(
                    f"survivors {waiting} not {goal} within {sd.execution_deadline_sec:g}s: "
                    + ", ".join(f"rank {r} {status_text(statuses[r])}" for r in waiting)
                )
            answered_in_sec = self.deps.clock.monotonic() - asked_mono_sec
            delay = poll_delay_sec(polls, sd.poll_interval_sec) - answered_in_sec
            if delay > 0:
                await self.deps.clock.sleep(min(delay, remaining))
            polls += 1

    async def _after_commit(self, plan: RoundPlan) -> Outcome:
        deps = self.deps
        runtime = deps.runtimes.get(self.instance_id)
        if deps.config.fault_tolerance_config.enable_dp_scale_up:
            await self._stop_emptied_pods(plan)
        self.set_phase(FtPhase.SCALED_DOWN_RUNNING, f"alive={rank_ranges(runtime.alive_dp_ranks)}")
        await self._persist(must=False)
        await self.publish()
        await self.note_reinference()
        if self.txn:
            self.txn.finish("succeeded", deps.clock.wall())
        deps.changed(self.instance_id)
        return Outcome(True, f"removed {list(plan.removed_this_round)}", observed_mono_sec=self.last_observed_mono_sec,
                       last_reads=dict(self.last_reads))

    async def _stop_emptied_pods(self, plan: RoundPlan) -> None:
        record = self.deps.registry.get(self.instance_id)
        if record is None:
            return
        runtime = self.deps.runtimes.get(self.instance_id)
        stopping = [p for p in recyclable_pods(record.pod_infos(), runtime.dead_committed)
                    if set(p.ranks) & set(plan.removed_this_round)]
        for p in stopping:  # its ranks have no place until the pod registers again (capacity restoration)
            record.pods[p.pod_ip].stop_requested = True
        await self.calls.stop_pods(stopping)
