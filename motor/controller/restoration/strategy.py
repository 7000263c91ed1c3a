"""RestorationStrategy: a planned whole-instance rebuild that brings a scaled-down instance back to
every original rank, on every engine (no engine support needed).

It is the reconfiguration with a gentler start: the instance is paused in the Coordinator (no new
request goes to it; other instances take them, or the Coordinator holds them while none can),
its in-flight requests may finish for `capacity_restore.in_flight_finish_sec`, then the
reconfiguration's own steps run (drain, stop every engine, start every original rank into a new DP
group, clear the scale-down history, publish). Whatever is still in flight when the engines stop
is continued elsewhere by the Coordinator (re-inference).

A failure is what it is for a reconfiguration: the instance stays RECONFIGURING and the strategy
centre retries it as one, bounded. A fault during a restoration is absorbed the same way: the
rebuild replaces every engine, and evidence received before the engines started is superseded.
"""

from __future__ import annotations

import logging

from motor.controller.clients import PeerCallError
from motor.controller.fault_tolerance.decision import FallbackCause
from motor.controller.fault_tolerance.strategy.base import ControllerDeps
from motor.controller.fault_tolerance.strategy.reconfiguration import ReconfigurationStrategy
from motor.controller.serving import PublishError

log = logging.getLogger(__name__)

STRATEGY_NAME = "capacity_restore"
# Between two reads of the Coordinator's in-flight count.
_IN_FLIGHT_POLL_SEC = 0.2


class RestorationStrategy(ReconfigurationStrategy):
    name = STRATEGY_NAME
    request_prefix = "restore"

    def __init__(self, deps: ControllerDeps, instance_id: int, reason: str, asked_by: str) -> None:
        # The cause only labels a fallback; a restoration is none (its decision carries no cause).
        super().__init__(deps, instance_id, reason, FallbackCause.RETRY)
        self.asked_by = asked_by

    async def execute(self):
        try:
            return await super().execute()
        finally:
            # Over (restored, or failed and left to the reconfiguration's retries): no longer restoring.
            if self.deps.runtimes.set_restore(self.instance_id, ""):
                self.deps.changed(self.instance_id)

    def record_decision(self) -> None:
        runtime = self.deps.runtimes.get(self.instance_id)
        self.txn.decision("restore", self.deps.clock.wall(), f"{self.reason} ({self.asked_by})",
                          ranks=sorted(runtime.dead_committed))

    async def before_drain(self) -> None:
        """Pause, then let in-flight requests finish within the bound (each step in the timeline)."""
        deps = self.deps
        record = deps.registry.get(self.instance_id)
        if record is None or not deps.pusher.enabled:
            return
        wall, start = deps.clock.wall(), deps.clock.monotonic()
        try:
            paused = await deps.pusher.pause(record.topology())
        except PublishError as exc:
            self.txn.call("pause", deps.pusher.target, wall, deps.clock.monotonic() - start, str(exc))
            log.warning("instance=%d request_id=%s pause failed (draining at once): %s", self.instance_id,
                        self.request_id, exc)
            return
        if not paused:
            self.txn.note("pause", wall, "nothing published: nothing to pause")
            return
        self.txn.call("pause", deps.pusher.target, wall, deps.clock.monotonic() - start,
                      detail="PAUSE: no new request to the instance")
        await self._let_in_flight_finish()

    async def _let_in_flight_finish(self) -> None:
        deps = self.deps
        bound_sec = deps.config.capacity_restore.in_flight_finish_sec
        client = deps.pusher.coordinator
        wall, start = deps.clock.wall(), deps.clock.monotonic()
        left = -1
        while True:
            try:
                listed = await client.list_instances()
            except PeerCallError as exc:
                self.txn.note("in_flight_finished", wall, f"the Coordinator's in-flight count unreadable: {exc}",
                              outcome=f"error: {exc}")
                return
            left = sum(sum(p.outstanding_requests.values()) for p in listed.instances
                       if p.instance.id == self.instance_id)
            waited = deps.clock.monotonic() - start
            if left == 0 or waited >= bound_sec:
                break
            await deps.clock.sleep(min(_IN_FLIGHT_POLL_SEC, bound_sec - waited))
        waited = deps.clock.monotonic() - start
        detail = (f"every in-flight request finished within {waited:.3f}s" if left == 0 else
                  f"{left} requests still in flight after {waited:.3f}s continue elsewhere (re-inference)")
        self.txn.note("in_flight_finished", wall, detail, duration_sec=waited)
        log.info("instance=%d request_id=%s %s", self.instance_id, self.request_id, detail)
