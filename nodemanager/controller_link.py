"""Registration with the Controller and the heartbeat loop.

Registration starts once the initial launch of the local engines has ended (every engine ready, or
failed) and is retried forever with capped exponential backoff (each attempt has a deadline; a
refusal, ``accepted=false``, is retried too). The heartbeat then runs every
``heartbeat_interval_sec`` (the Controller's value when it hands one > 0 down) with the alive
endpoint set. When the Controller hands down a quiet interval, a heartbeat that would repeat the
alive set it last answered waits until that interval has passed since the last answer; a changed
set, a poke, and every heartbeat of an outage still go each period. ``known=false`` makes the pod
register again, and so does a new leader term (another Controller replica took over: it learns this
pod's retired ranks from the registration). Heartbeat
failures are logged (once per outage) and the next period simply tries again: the NodeManager never
crashes because the Controller is down. Every NodeManagerFtConfig the Controller sends is handed to
``on_config``.

``on_renewed`` is told whenever the Controller may have lost what this pod reported: after a
re-registration (it forgot the pod), a new leader term, or a heartbeat outage that ended (a
Controller that restarted and restored the instance from its store answers ``known=true`` but holds
no evidence; the contract carries no incarnation of the Controller, so an outage is the sign). The
pod then reports its unacknowledged and its still-current faults again. A restart shorter than the
time between two heartbeats leaves no outage to see.
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
from collections.abc import Callable

from tenacity import AsyncRetrying, RetryCallState, retry_if_exception_type, wait_exponential

from gen.motor.v1 import controller_pb2
from motor.common.waiting import wait_set
from nodemanager.controller_client import ControllerClient, rpc_error_text

log = logging.getLogger("nodemanager.controller_link")


# Bounds on a heartbeat period handed down by the Controller (a bad value must not spin or stall).
_MIN_INTERVAL_SEC = 0.05
_MAX_INTERVAL_SEC = 300.0
_EARLY_SEC = 0.001


class RegistrationRefused(Exception):
    pass


class ControllerLink:
    def __init__(
        self,
        client: ControllerClient,
        *,
        instance_id: int,
        pod_ip: str,
        build_register: Callable[[], controller_pb2.RegisterRequest],
        alive_ids: Callable[[], list[int]],
        on_config: Callable[[controller_pb2.NodeManagerFtConfig, str], None],
        heartbeat_interval_sec: float,
        max_backoff_sec: float,
        on_renewed: Callable[[str], None] = lambda reason: None,
        registered: asyncio.Event | None = None,
        jitter: Callable[[], float] = random.random,
    ) -> None:
        """`jitter`: a uniform draw in [0, 1) that spreads the registration retries of many pods."""
        self._client = client
        self._jitter = jitter
        self._instance = instance_id
        self._pod_ip = pod_ip
        self._build_register = build_register
        self._alive_ids = alive_ids
        self._on_config = on_config
        self.heartbeat_interval_sec = heartbeat_interval_sec
        # 0: a heartbeat every period (what a Controller that sends none expects).
        self.quiet_interval_sec = 0.0
        # Loop time of the last answered heartbeat (None: none since the last registration).
        self._answered_at: float | None = None
        self._max_backoff = max_backoff_sec
        self._on_renewed = on_renewed
        # The leader term the last registration was accepted under (0: none, or no election).
        self.registered_term = 0
        self._poke = asyncio.Event()
        self._seq = 0
        self._heartbeat_failing = False
        self.registrations = 0
        # Set at the first accepted registration (the fault reporter holds its reports until then).
        self.registered = registered or asyncio.Event()
        self.last_alive: list[int] | None = None

    def poke(self) -> None:
        """Send the next heartbeat now (the alive set changed)."""
        self._poke.set()

    def adopt_interval(self, interval_sec: float) -> None:
        if not (interval_sec > 0 and math.isfinite(interval_sec)):
            return  # 0 / unset: keep ours
        interval_sec = min(max(interval_sec, _MIN_INTERVAL_SEC), _MAX_INTERVAL_SEC)
        if interval_sec != self.heartbeat_interval_sec:
            log.info("instance=%d heartbeat interval %gs -> %gs (from controller)", self._instance,
                     self.heartbeat_interval_sec, interval_sec)
            self.heartbeat_interval_sec = interval_sec

    def adopt_quiet_interval(self, quiet_sec: float) -> None:
        if not (quiet_sec >= 0 and math.isfinite(quiet_sec)):
            return
        quiet_sec = min(quiet_sec, _MAX_INTERVAL_SEC)
        if quiet_sec != self.quiet_interval_sec:
            log.info("instance=%d heartbeat quiet interval %gs -> %gs (from controller)", self._instance,
                     self.quiet_interval_sec, quiet_sec)
            self.quiet_interval_sec = quiet_sec

    def _apply_config(self, cfg: controller_pb2.NodeManagerFtConfig, source: str) -> None:
        self.adopt_interval(cfg.heartbeat_interval_sec)
        self.adopt_quiet_interval(cfg.heartbeat_quiet_interval_sec)
        self._on_config(cfg, source)

    async def register(self) -> None:
        """Registers, retrying forever (cancellation ends it)."""

        def before_sleep(state: RetryCallState) -> None:
            exc = state.outcome.exception() if state.outcome is not None else None
            log.warning("instance=%d pod=%s register attempt %d at %s failed: %s; retrying in %.1fs",
                        self._instance, self._pod_ip, state.attempt_number, self._client.address,
                        rpc_error_text(exc) if exc else "?", state.upcoming_sleep)

        retrying = AsyncRetrying(
            retry=retry_if_exception_type(Exception),
            wait=wait_exponential(multiplier=0.2, max=self._max_backoff) + (lambda state: 0.1 * self._jitter()),
            before_sleep=before_sleep,
            reraise=True,
        )
        async for attempt in retrying:
            with attempt:
                req = self._build_register()
                resp = await self._client.register(req)
                if not resp.accepted:
                    raise RegistrationRefused(f"controller refused the registration: {resp.message}")
        self.registrations += 1
        self.registered_term = getattr(self._client, "term", 0)
        log.info("instance=%d pod=%s registered with %s (leader term %d): endpoints=%s retired=%s (%s)",
                 self._instance, self._pod_ip, self._client.address, self.registered_term,
                 [e.id for e in req.endpoints], list(req.retired_ids), resp.message or "accepted")
        if resp.HasField("config"):
            self._apply_config(resp.config, "register")
        self._answered_at = None
        self.registered.set()

    async def run(self, launched: asyncio.Event) -> None:
        await launched.wait()
        await self.register()
        alive = self._alive_ids()
        while True:
            await self.heartbeat_once(alive)
            while True:  # ends at a heartbeat due: bounded by the quiet interval
                self._poke.clear()
                poked = await wait_set(self._poke, self._wait_sec())
                alive = self._alive_ids()
                if poked or self._due(alive):
                    break

    def _wait_sec(self) -> float:
        """Until the next period, or sooner when the quiet interval ends before it."""
        if not self.quiet_interval_sec or self._answered_at is None:
            return self.heartbeat_interval_sec
        left = self._answered_at + self.quiet_interval_sec - asyncio.get_running_loop().time()
        return max(0.0, min(self.heartbeat_interval_sec, left))

    def _due(self, alive: list[int]) -> bool:
        """Whether this period's heartbeat tells the Controller anything it has not answered."""
        if not self.quiet_interval_sec or self._answered_at is None or self._heartbeat_failing:
            return True
        if alive != self.last_alive:
            return True
        # The timer that ends the wait may fire up to the clock's resolution early.
        return asyncio.get_running_loop().time() >= self._answered_at + self.quiet_interval_sec - _EARLY_SEC

    async def heartbeat_once(self, alive: list[int]) -> None:
        self._seq += 1
        req = controller_pb2.HeartbeatRequest(
            pod_ip=self._pod_ip, instance_id=self._instance, alive_endpoint_ids=alive, seq=self._seq
        )
        try:
            resp = await self._client.heartbeat(req)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - the controller may be down; try again next period
            if not self._heartbeat_failing:
                log.warning("instance=%d pod=%s heartbeat seq=%d to %s failed: %s (logged once per outage)",
                            self._instance, self._pod_ip, self._seq, self._client.address, rpc_error_text(exc))
            self._heartbeat_failing = True
            return
        renewed = ""
        if self._heartbeat_failing:
            log.info("instance=%d pod=%s heartbeat to %s works again (seq=%d)", self._instance, self._pod_ip,
                     self._client.address, self._seq)
            self._heartbeat_failing = False
            renewed = "the heartbeat works again after an outage (the Controller may have restarted)"
        if alive != self.last_alive:
            log.info("instance=%d pod=%s heartbeat alive endpoints %s", self._instance, self._pod_ip, alive)
            self.last_alive = alive
        self._answered_at = asyncio.get_running_loop().time()
        if resp.HasField("config"):
            self._apply_config(resp.config, "heartbeat")
        if not resp.known:
            log.warning("instance=%d pod=%s controller does not know this pod; registering again",
                        self._instance, self._pod_ip)
            await self.register()
            self._on_renewed("the Controller did not know the pod: registered again")
            return
        term = getattr(self._client, "term", 0)
        if term and term != self.registered_term:
            log.warning("instance=%d pod=%s a new Controller leader (term %d at %s, registered under %d): "
                        "registering again", self._instance, self._pod_ip, term, self._client.address,
                        self.registered_term)
            await self.register()
            renewed = f"a new Controller leader (term {term})"
        if renewed:
            self._on_renewed(renewed)
