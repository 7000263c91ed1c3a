"""ScaleUpStrategy: the side-effecting executor of ONE elastic scale-up round
(docs/engine-protocol-scale-up.md, "Motor's transaction"), for engines that declare `scale_up`.

gate (every pod declares supports_scale_up; every retired rank has a ready place) → guard every
participant → StartEngines(join) of the added ranks on their pods → poll until survivors and joiners
are ready → drain → one apply (one request id) to every participant → poll until every participant
is done within execution_deadline_sec → finalize(commit) → dead_committed −= added, persisted →
NORMAL / SCALED_DOWN_RUNNING → publish the grown view.

It never re-sends the apply. Before the Controller's own commit any failure (or a stop) sends
finalize(abort) to every NodeManager not committed (each stops the joiners it started) and the
outcome names the planned restoration (RestorationStrategy) that the strategy centre starts next;
after the commit nothing rolls back (persistence and publication failures only set last_error /
serving_published, as for a scale-down). The calls go through RoundCalls, the judgement through
scale_up_plan (pure).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from gen.motor.v1 import common_pb2, node_manager_pb2
from motor.common.text import rank_ranges
from motor.controller.fault_tolerance.engine_states import Verdict, poll_delay_sec, status_text
from motor.controller.fault_tolerance.evidence import RankRead
from motor.controller.fault_tolerance.strategy.base import ControllerDeps, Outcome, Priority, Strategy
from motor.controller.fault_tolerance.strategy.round_calls import RoundCalls, RoundFailed, StatusRead, read_statuses
from motor.controller.fault_tolerance.topology import RoundPlan, TopologyError
from motor.controller.model.runtime import FtPhase
from motor.controller.persistence import StoreError
from motor.controller.restoration.readiness import readiness
from motor.controller.restoration.scale_up_plan import (
    SCALE_UP_WAIT_STATES,
    joiners_by_pod,
    plan_scale_up,
    scale_up_outcome,
    scale_up_readiness,
)
from motor.controller.restoration.strategy import RestorationStrategy

log = logging.getLogger(__name__)

STRATEGY_NAME = "scale_up"


class Stopped(Exception):
    pass


class ScaleUpStrategy(Strategy):
    name = STRATEGY_NAME
    priority = Priority.DP_SCALE_DOWN

    def __init__(self, deps: ControllerDeps, instance_id: int, reason: str, asked_by: str) -> None:
        super().__init__(deps, instance_id)
        self.reason = reason
        self.asked_by = asked_by
        self.request_id = f"su-{instance_id}-{deps.new_id()}"
        self.calls = RoundCalls(deps.nodemanagers, instance_id, self.request_id, self.timed_call, deps.clock)
        self._committed = False
        self._guarded_at_sec = 0.0
        self.last_observed_mono_sec = 0.0
        self.last_reads: dict[int, RankRead] = {}
        # The planned restoration a failure hands over to (the strategy centre starts it).
        self.fallback: RestorationStrategy | None = None

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
            raise Stopped("stopped")
        if not self._committed and self.hardware_faults:
            ranks, what = self.hardware_faults[0]
            raise RoundFailed(f"hardware fault {what} on ranks {sorted(ranks)} during the scale-up")

    def _gate(self) -> RoundPlan:
        """The capability and the places, then the plan; RoundFailed naming what stops the round."""
        deps = self.deps
        record = deps.registry.get(self.instance_id)
        runtime = deps.runtimes.get(self.instance_id)
        capability, note = record.capability() if record else (None, "instance topology unknown")
        allowed = capability is not None and capability.supports_scale_up
        why = note or ("" if allowed else "the pods do not declare ft_capability.supports_scale_up")
        ready = readiness(runtime, record, deps.clock.monotonic(), deps.config.heartbeat_timeout_sec, None)
        if allowed and not ready.ready:
            allowed, why = False, ready.why()
        self.txn.decision("gate", deps.clock.wall(), f"scale_up allowed={allowed} {why}".strip(), gate_allowed=allowed)
        if not allowed:
            raise RoundFailed(f"scale-up gate refused: {why}")
        assert record is not None
        try:
            return plan_scale_up(original_dp_ranks=runtime.original_dp_ranks, dead_committed=runtime.dead_committed,
                                 added=runtime.dead_committed, endpoints=record.endpoint_infos(),
                                 pods=record.pod_infos())
        except TopologyError as exc:
            raise RoundFailed(f"topology check failed: {exc}") from None

    async def execute(self) -> Outcome:
        deps = self.deps
        runtime = deps.runtimes.get(self.instance_id)
        added = sorted(runtime.dead_committed)
        self.begin_transaction(self.request_id)
        self.txn.decision("scale_up", deps.clock.wall(), f"{self.reason} ({self.asked_by})", ranks=added,
                          dead_committed=added)
        self._log(logging.INFO, "elastic scale-up of ranks %s (%s)", added, self.asked_by)
        deps.runtimes.begin_round(self.instance_id, self.request_id, ())
        try:
            plan = self._gate()
            self.set_phase(FtPhase.SCALING_UP, f"re-admitting ranks {rank_ranges(added)}")
            await self._persist(must=True)
            lease_sec = deps.config.fault_tolerance_config.guard_lease_sec
            self._guarded_at_sec = deps.clock.monotonic()
            await self.calls.guard_all(plan, lease_sec)
            self._check_stop()
            await self._start_joiners(plan)
            await self._poll(plan, scale_up_readiness, frozenset(), goal="ready")
            await self.drain()
            self._check_stop()
            record = deps.registry.get(self.instance_id)
            store_port = record.store_port(plan.dp_master_rank, len(plan.removed_cumulative)) if record else 0
            await self.calls.apply(plan, store_port, node_manager_pb2.INSTRUCTION_SCALE_UP)
            await self._poll(plan, lambda s: scale_up_outcome(s, self.request_id), SCALE_UP_WAIT_STATES,
                             goal="done after apply", done_stays_done=True)
            self._check_stop()
            await self._renew_guards_if_due()
            await self.calls.finalize_commit(plan)
            deps.runtimes.commit_scale_up(self.instance_id, plan.added)
            self._committed = True
        except (RoundFailed, Stopped) as exc:
            return self._failed(str(exc))
        except asyncio.CancelledError:
            self._failed("cancelled: stopped")
            raise
        finally:
            if not self._committed:
                await self.calls.abort_uncommitted()
        return await self._after_commit(plan)

    async def _start_joiners(self, plan: RoundPlan) -> None:
        """StartEngines(join) on every pod hosting an added rank, at once; each answers once its
        joiners are up (or fails the round)."""
        deps = self.deps
        timeout = deps.config.reconfiguration_timeout_sec

        async def one(address: str, ranks: tuple[int, ...]) -> None:
            client = deps.nodemanagers.get(address)
            await self.timed_call("start_engines", address,
                                  lambda: client.start_engines(self.instance_id, self.request_id, "", 0, timeout,
                                                               endpoint_ids=ranks, join=True),
                                  {"endpoint_ids": list(ranks), "detail": f"join {list(ranks)}"})

        results = await asyncio.gather(*(one(a, r) for a, r in joiners_by_pod(plan).items()), return_exceptions=True)
        errors = [r for r in results if isinstance(r, BaseException)]
        for r in errors:
            if isinstance(r, asyncio.CancelledError):
                raise r
        if errors:
            raise RoundFailed("joiners not started: " + "; ".join(str(e) for e in errors))

    async def _renew_guards_if_due(self) -> None:
        lease = self.deps.config.fault_tolerance_config.guard_lease_sec
        now = self.deps.clock.monotonic()
        if now - self._guarded_at_sec >= lease / 3:
            await self.calls.renew_guards(lease)
            self._guarded_at_sec = now

    async def _poll(self, plan: RoundPlan, judge: Callable[[common_pb2.EngineFtStatus], Verdict],
                    wait_states: frozenset[tuple[int, int]], *, goal: str, done_stays_done: bool = False) -> None:
        """Reads every participant until `judge` says each is done, within execution_deadline_sec;
        any FAIL, a missing entry or the deadline fails the round. Each read is a long poll over
        `wait_states`; polls never come faster than the backoff."""
        sd = self.deps.config.fault_tolerance_config.dp_scale_down_config
        deadline = self.deps.clock.monotonic() + sd.execution_deadline_sec
        polls = 0
        done: set[int] = set()
        while True:
            self._check_stop()
            await self._renew_guards_if_due()
            asked = self.deps.clock.monotonic()
            settle = max(0.0, min(sd.poll_interval_sec, deadline - asked)) if wait_states else 0.0
            statuses = await read_statuses(self, plan, StatusRead(frozenset(done), wait_states, settle),
                                           self.calls.status, "participants")
            verdicts = {rank: judge(status) for rank, status in statuses.items()}
            if done_stays_done:
                done.update(r for r, v in verdicts.items() if v is Verdict.DONE)
            failing = sorted(r for r, v in verdicts.items() if v not in (Verdict.DONE, Verdict.WAIT))
            if failing:
                raise RoundFailed(f"participants not {goal}: " + ", ".join(f"rank {r} {status_text(statuses[r])}"
                                                                           for r in failing))
            waiting = sorted(r for r, v in verdicts.items() if v is Verdict.WAIT)
            if not waiting:
                return
            remaining = deadline - self.deps.clock.monotonic()
            if remaining <= 0:
                raise RoundFailed(f"participants {waiting} not {goal} within {sd.execution_deadline_sec:g}s: "
                                  + ", ".join(f"rank {r} {status_text(statuses[r])}" for r in waiting))
            delay = poll_delay_sec(polls, sd.poll_interval_sec) - (self.deps.clock.monotonic() - asked)
            if delay > 0:
                await self.deps.clock.sleep(min(delay, remaining))
            polls += 1

    def _failed(self, reason: str) -> Outcome:
        self._log(logging.WARNING, "scale-up failed, falling back to the planned restoration: %s", reason)
        self.deps.runtimes.set_error(self.instance_id, f"scale-up {self.request_id} failed: {reason}")
        if self.txn:
            self.txn.finish(f"failed: {reason}", self.deps.clock.wall())
        self.deps.changed(self.instance_id)
        self.fallback = RestorationStrategy(self.deps, self.instance_id,
                                            f"restoring every original rank: scale-up {self.request_id} failed: "
                                            f"{reason}", self.asked_by)
        return Outcome(False, reason, observed_mono_sec=self.last_observed_mono_sec, next_strategy=self.fallback)

    async def _after_commit(self, plan: RoundPlan) -> Outcome:
        deps = self.deps
        runtime = deps.runtimes.get(self.instance_id)
        phase = FtPhase.SCALED_DOWN_RUNNING if runtime.dead_committed else FtPhase.NORMAL
        self.set_phase(phase, f"re-admitted {rank_ranges(list(plan.added))}; alive={rank_ranges(runtime.alive_dp_ranks)}")
        deps.runtimes.set_error(self.instance_id, None)
        await self._persist(must=False)
        await self.publish()
        await self.note_reinference()
        if deps.runtimes.set_restore(self.instance_id, ""):
            deps.changed(self.instance_id)
        if self.txn:
            self.txn.finish("succeeded", deps.clock.wall())
        deps.changed(self.instance_id)
        self._log(logging.INFO, "committed the re-admission of %s; dead_committed=%s", list(plan.added),
                  sorted(runtime.dead_committed))
        return Outcome(True, f"re-admitted {list(plan.added)}", observed_mono_sec=self.last_observed_mono_sec,
                       last_reads=dict(self.last_reads))
