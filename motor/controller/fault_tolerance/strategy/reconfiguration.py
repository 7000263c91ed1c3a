"""Whole-instance reconfiguration: the original fallback (and the whole baseline with scale-down off).

Drain the published view, stop every engine of the instance on every pod, then start every
original rank into a new DP group; success clears the scale-down history and publishes all ranks.
A failure leaves the instance RECONFIGURING with last_error; the strategy centre tries again, a
bounded number of times with backoff.

Decision: Motor has no EngineRelaunch fallback (restart the engines in place and keep
dead_committed). An engine started in place would have to join a DP group whose original ranks have
holes; vLLM starts a DP group only as ranks 0..dp_size-1 of the launched size, and it can shrink
around holes only through the FT API of a running group. So the only restart Motor can order is the
whole original group: every original rank restarts, and a successful rebuild clears the scale-down
history (RFC §5: "整实例重建后清空").
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Iterable

from motor.controller.clients import PeerCallError
from motor.controller.fault_tolerance.decision import FallbackCause
from motor.controller.fault_tolerance.evidence import RankRead
from motor.controller.fault_tolerance.gate import evaluate_gate
from motor.controller.fault_tolerance.strategy.base import ControllerDeps, Outcome, Priority, Strategy
from motor.controller.fault_tolerance.timeline import fallback_cause_proto
from motor.controller.model.runtime import FALLBACK_RECONFIGURATION, FtPhase
from motor.controller.persistence import StoreError

log = logging.getLogger(__name__)


class ReconfigurationStrategy(Strategy):
    name = FALLBACK_RECONFIGURATION
    priority = Priority.RECONFIGURATION

    def __init__(self, deps: ControllerDeps, instance_id: int, reason: str, cause: FallbackCause) -> None:
        super().__init__(deps, instance_id)
        self.reason = reason
        self.cause = cause
        self.request_id = f"{self.request_prefix}-{instance_id}-{deps.new_id()}"

    # A subclass that rebuilds the instance for another reason names its requests and decision.
    request_prefix = "reconf"

    def record_decision(self) -> None:
        self.txn.decision("reconfigure", self.deps.clock.wall(), self.reason,
                          fallback_cause=fallback_cause_proto(self.cause))

    async def before_drain(self) -> None:
        """Nothing: a failed instance is drained at once (a planned rebuild lets requests finish first)."""

    async def execute(self) -> Outcome:
        deps = self.deps
        record = deps.registry.get(self.instance_id)
        self.begin_transaction(self.request_id)
        self.record_decision()
        log.warning("instance=%d request_id=%s whole-instance reconfiguration (%s): %s", self.instance_id,
                    self.request_id, self.cause, self.reason)
        if deps.runtimes.get(self.instance_id).phase is not FtPhase.RECONFIGURING:
            self.set_phase(FtPhase.RECONFIGURING, self.reason)
        else:
            deps.changed(self.instance_id)
        try:
            await deps.persist(self.instance_id)
        except StoreError as exc:
            log.error("instance=%d persisting RECONFIGURING failed: %s", self.instance_id, exc)
        if record is None:
            return self._fail(f"topology of instance {self.instance_id} is unknown")
        timeout = deps.config.reconfiguration_timeout_sec
        await self.before_drain()
        await self.drain()
        pods = sorted(record.pods.values(), key=lambda p: p.pod_ip)
        # The rebuild's last look at each rank: when it asked the rank's NodeManager to start it, and
        # when that NodeManager spawned the new engines.
        started: dict[int, RankRead] = {}
        try:
            await _all_or_none(
                self.timed_call("stop_engines", p.node_manager_address,
                                lambda p=p: deps.nodemanagers.get(p.node_manager_address).stop_engines(
                                    self.instance_id, self.request_id, timeout),
                                {"endpoint_ids": sorted(p.ranks)})
                for p in pods
            )
            master_rank = min(record.original_dp_ranks)
            master_ip = record.endpoint_infos()[master_rank].ip
            starts_sent_mono_sec = deps.clock.monotonic()
            # Port 0: each NodeManager uses its configured initial dp_master_port for the new group.
            await _all_or_none(self._start(p, master_ip, timeout, started) for p in pods)
        except PeerCallError as exc:
            await self.note_reinference()
            return self._fail(str(exc))
        capability, _ = record.capability()
        ft = deps.config.fault_tolerance_config
        deps.runtimes.clear_history(self.instance_id, evaluate_gate(
            enable_fault_tolerance=ft.enable_fault_tolerance, enable_dp_scale_down=ft.enable_dp_scale_down,
            capability=capability))
        if deps.runtimes.get(self.instance_id).reconfiguring:
            self.set_phase(FtPhase.NORMAL, "every original rank restarted")
        deps.runtimes.set_error(self.instance_id, None)
        try:
            await deps.persist(self.instance_id)
        except StoreError as exc:
            deps.runtimes.set_error(self.instance_id, f"persisting runtime failed: {exc}")
        await self.publish()
        await self.note_reinference()
        self.txn.finish("succeeded", deps.clock.wall())
        deps.changed(self.instance_id)
        return Outcome(True, "instance reconfigured", observed_mono_sec=starts_sent_mono_sec, last_reads=started)

    async def _start(self, pod, master_ip: str, timeout: float, started: dict[int, RankRead]) -> None:
        """Starts a pod's engines. Evidence of its ranks received before the start was asked for, or
        observed (on the pod's clock) no later than the pod spawned the new engines, is about the
        engines the rebuild replaced: a report of an old engine's death can still be on its way
        when the start is asked. Any other is about the new engines (one that died after it was
        ready and before the pod answered, or while the rebuilt view is published): news for the
        next decision, not what the rebuild handled."""
        deps = self.deps
        asked_mono_sec = deps.clock.monotonic()
        answer = await self.timed_call("start_engines", pod.node_manager_address,
                                       lambda: deps.nodemanagers.get(pod.node_manager_address).start_engines(
                                           self.instance_id, self.request_id, master_ip, 0, timeout),
                                       {"endpoint_ids": sorted(pod.ranks), "dp_master_ip": master_ip})
        read = RankRead(asked_mono_sec, answer.launched_at_unix_sec)
        started.update({rank: read for rank in pod.ranks})

    def _fail(self, reason: str) -> Outcome:
        log.error("instance=%d request_id=%s reconfiguration failed: %s", self.instance_id, self.request_id, reason)
        self.deps.runtimes.set_error(self.instance_id, f"reconfiguration failed: {reason}")
        if self.txn:
            self.txn.finish(f"failed: {reason}", self.deps.clock.wall())
        self.deps.changed(self.instance_id)
        return Outcome(False, reason)


async def _all_or_none(calls: Iterable[Awaitable[object]]) -> None:
    """Runs one call per pod at once; the first failure cancels the others and waits for them
    before it is raised, so no call of a failed attempt is still in flight when the next attempt
    (or another strategy) sends its own to the same pods."""
    tasks = [asyncio.ensure_future(call) for call in calls]
    try:
        await asyncio.gather(*tasks)
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
