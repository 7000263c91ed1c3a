"""Restorer: RestoreInstance requests (idempotent by request id) and the automatic mode of
`capacity_restore`, over the strategy centre of the acting Controller.

A request whose instance is ready starts a restoration at once: an elastic ScaleUpStrategy when
every pod of the instance declares `supports_scale_up` (its failure hands over to the planned
restoration, which the request then follows), else a RestorationStrategy; one that is not is refused,
or, with `when_ready`, kept pending (the runtime shows `restore_pending` and why) and started once
it is, unless its deadline passes first. The same request id again answers with that request's
state, never a second restoration. Requests are observed state: a Controller that restarts or
loses leadership forgets them (the caller asks again; a restoration that was running is resumed
as the interrupted reconfiguration it then is).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from motor.controller.fault_tolerance.fault_manager import FaultManager
from motor.controller.fault_tolerance.strategy.base import ControllerDeps, Strategy
from motor.controller.restoration.readiness import Readiness, auto_due, readiness
from motor.controller.restoration.scale_up import ScaleUpStrategy
from motor.controller.restoration.strategy import RestorationStrategy

log = logging.getLogger(__name__)

# Request states that do not change any more.
FINAL_STATES = ("restored", "expired", "full")
_MAX_REQUESTS = 1024


def current(strategy: Strategy) -> Strategy:
    """The strategy a request follows now: a finished scale-up's fallback restoration, if any."""
    while strategy.is_finished() and getattr(strategy, "fallback", None) is not None:
        strategy = strategy.fallback  # type: ignore[attr-defined]
    return strategy


class RestoreRefused(Exception):
    """RestoreInstance cannot be taken: `code` is a grpc.StatusCode name."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass
class RestoreRequest:
    request_id: str
    instance_id: int
    asked_at_sec: float
    deadline_sec: float | None
    state: str = "restore_pending"
    message: str = ""
    unplaced: tuple[int, ...] = ()
    strategy: Strategy | None = field(default=None, repr=False)

    @property
    def transaction_id(self) -> str:
        return self.strategy.request_id if self.strategy is not None else ""


class Restorer:
    def __init__(self, deps: ControllerDeps, faults: Callable[[], FaultManager]) -> None:
        """`faults`: the acting term's FaultManager (a new term builds a new one)."""
        self.deps = deps
        self._faults = faults
        self.requests: dict[str, RestoreRequest] = {}
        # Since when each instance has been ready without a break (auto's settle time).
        self._ready_since: dict[int, float] = {}
        self._auto: dict[int, Strategy] = {}

    @property
    def mode(self) -> str:
        return self.deps.config.capacity_restore.mode

    def forget(self) -> None:
        self.requests.clear()
        self._ready_since.clear()
        self._auto.clear()

    def readiness(self, instance_id: int) -> Readiness:
        deps = self.deps
        running = self._faults().running(instance_id)
        return readiness(deps.runtimes.get(instance_id), deps.registry.get(instance_id), deps.clock.monotonic(),
                         deps.config.heartbeat_timeout_sec, running.name if running is not None else None)

    def request(self, instance_id: int, request_id: str, when_ready: bool, deadline_sec: float) -> RestoreRequest:
        """Takes a RestoreInstance; RestoreRefused with the status code to answer otherwise."""
        known = self.requests.get(request_id)
        if known is not None:
            if known.instance_id != instance_id:
                raise RestoreRefused("INVALID_ARGUMENT", f"request_id {request_id!r} was used for instance "
                                                         f"{known.instance_id}, not {instance_id}")
            self._follow(known)
            return known
        if self.mode == "off":
            raise RestoreRefused("FAILED_PRECONDITION", "capacity_restore.mode is off: restorations are disabled "
                                                        "(set it to manual or auto)")
        if self.deps.runtimes.find(instance_id) is None:
            raise RestoreRefused("NOT_FOUND", f"instance {instance_id} is not known (not assembled yet?)")
        ready = self.readiness(instance_id)
        now = self.deps.clock.monotonic()
        req = RestoreRequest(request_id, instance_id, now, now + deadline_sec if deadline_sec > 0 else None,
                             unplaced=ready.unplaced)
        if ready.full:
            req.state, req.message = "full", ready.why()
        elif not ready.ready and not when_ready:
            raise RestoreRefused("FAILED_PRECONDITION", f"instance {instance_id} cannot be restored now: "
                                                        f"{ready.why()} (ask with when_ready to wait)")
        elif ready.ready:
            self._start(req, "asked by an operator")
        else:
            req.message = ready.why()
            self._show_pending(instance_id, ready)
        log.info("instance=%d restore request_id=%s (when_ready=%s, deadline=%gs): %s %s", instance_id, request_id,
                 when_ready, deadline_sec, req.state, req.message)
        self._remember(req)
        return req

    def _remember(self, req: RestoreRequest) -> None:
        self.requests[req.request_id] = req
        while len(self.requests) > _MAX_REQUESTS:
            oldest = next(iter(self.requests))
            del self.requests[oldest]

    def _start(self, req: RestoreRequest | None, reason: str, instance_id: int | None = None) -> Strategy:
        iid = req.instance_id if req is not None else instance_id
        assert iid is not None
        asked_by = f"request_id {req.request_id}" if req is not None else "capacity_restore auto"
        record = self.deps.registry.get(iid)
        capability, _ = record.capability() if record is not None else (None, "")
        strategy: Strategy
        if capability is not None and capability.supports_scale_up:
            strategy = ScaleUpStrategy(self.deps, iid, f"re-admitting every removed rank: {reason}", asked_by)
        else:
            strategy = RestorationStrategy(self.deps, iid, f"restoring every original rank: {reason}", asked_by)
        self._faults().center.start_strategy(iid, strategy)
        if req is not None:
            req.strategy, req.state, req.message, req.unplaced = strategy, "restoring", reason, ()
        self.deps.runtimes.set_restore(iid, "restoring", request_id=strategy.request_id)
        self.deps.changed(iid)
        return strategy

    def _follow(self, req: RestoreRequest) -> None:
        """Moves a started request on to its outcome once its strategy (or the restoration a failed
        scale-up handed over to) finished."""
        strategy = req.strategy
        if strategy is None or req.state != "restoring":
            return
        strategy = current(strategy)
        if not strategy.is_finished():
            return
        outcome = strategy.txn.outcome if strategy.txn is not None else "failed: not started"
        if outcome == "running":  # stopped before it ended (the replica stopped acting)
            outcome = "failed: stopped before it ended"
        req.state = "restored" if outcome == "succeeded" else outcome
        req.message = f"transaction {strategy.request_id} {outcome}"

    def _show_pending(self, instance_id: int, ready: Readiness) -> None:
        if self.deps.runtimes.set_restore(instance_id, "restore_pending", ready.why(), ready.unplaced):
            self.deps.changed(instance_id)

    def _clear(self, instance_id: int) -> None:
        if self.deps.runtimes.set_restore(instance_id, ""):
            self.deps.changed(instance_id)

    def check(self) -> None:
        """One pass: started requests followed, pending ones started or expired, auto considered,
        and every instance's runtime showing what the restoration does."""
        now = self.deps.clock.monotonic()
        busy: set[int] = set()
        for req in list(self.requests.values()):
            self._follow(req)
            if req.state == "restoring":
                busy.add(req.instance_id)
        for strategy in self._auto.values():
            if not current(strategy).is_finished():
                busy.add(strategy.instance_id)
        self._auto = {iid: s for iid, s in self._auto.items() if not current(s).is_finished()}
        pending: set[int] = set()
        for req in self.requests.values():
            if req.state != "restore_pending":
                continue
            if req.deadline_sec is not None and now >= req.deadline_sec:
                req.state, req.message = "expired", f"not ready within the deadline: {req.message}"
                log.warning("instance=%d restore request_id=%s expired: %s", req.instance_id, req.request_id,
                            req.message)
                continue
            if req.instance_id in busy:
                continue
            ready = self.readiness(req.instance_id)
            if ready.full:
                req.state, req.message = "full", ready.why()
            elif ready.ready:
                self._start(req, "asked by an operator; every retired rank has a ready place again")
                busy.add(req.instance_id)
            else:
                req.message, req.unplaced = ready.why(), ready.unplaced
                self._show_pending(req.instance_id, ready)
                pending.add(req.instance_id)
        for runtime in self.deps.runtimes.all():
            iid = runtime.instance_id
            if iid in busy:
                continue
            if iid in pending:
                continue
            if self.mode == "auto" and self._consider_auto(iid, now):
                continue
            if runtime.capacity_restore == "restoring" or (runtime.capacity_restore == "restore_pending"
                                                           and self.mode != "auto"):
                self._clear(iid)

    def _consider_auto(self, instance_id: int, now: float) -> bool:
        """auto: True when the instance is restored now, shown pending, or not due by the policy."""
        runtime = self.deps.runtimes.get(instance_id)
        config = self.deps.config.capacity_restore
        alive = len(runtime.original_dp_ranks) - len(runtime.dead_committed)
        if not runtime.dead_committed or alive >= config.min_alive_fraction * len(runtime.original_dp_ranks):
            self._ready_since.pop(instance_id, None)
            self._clear(instance_id)
            return True
        ready = self.readiness(instance_id)
        if ready.ready:
            self._ready_since.setdefault(instance_id, now)
        else:
            self._ready_since.pop(instance_id, None)
        if auto_due(runtime, ready, self._ready_since.get(instance_id), now,
                    min_alive_fraction=config.min_alive_fraction, settle_sec=config.settle_sec):
            self._ready_since.pop(instance_id, None)
            self._auto[instance_id] = self._start(None, "capacity_restore auto: every retired rank has had a ready "
                                                        f"place for {config.settle_sec:g}s", instance_id)
        elif ready.ready:
            if self.deps.runtimes.set_restore(instance_id, "restore_pending",
                                              f"capacity_restore auto: every retired rank has a ready place; "
                                              f"settling for {config.settle_sec:g}s"):
                self.deps.changed(instance_id)
        else:
            self._show_pending(instance_id, ready)
        return True

    async def run(self) -> None:
        """While this replica acts: one check every capacity_restore.check_interval_sec."""
        interval = self.deps.config.capacity_restore.check_interval_sec
        while True:
            try:
                self.check()
            except Exception:  # noqa: BLE001 - the loop outlives one bad pass (logged)
                log.exception("capacity restoration check failed")
            await self.deps.clock.sleep(interval)
