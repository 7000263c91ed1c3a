"""EngineLifecycle: the local engines started, stopped and relaunched as a whole (motor.v1.NodeManager).

The initial launch runs once at start-up and sets ``launched`` when it has ended (every engine ready,
or failed): registration waits for it. It launches no retired engine (a pod stopped by StopPod stays
stopped across a restart: ``pod_stop``). StartEngines / StopEngines / RelaunchEngines are serialised
by one lock (spawning and stopping only; readiness is awaited outside it, bounded by the call's
deadline). A stop (and a relaunch's stop-then-spawn), once begun, runs to its end even when the
caller gives up, so no engine is left half-stopped for the next call. A start clears the retired flag of the engines it starts and takes them out of the stop
record; every local engine starting into a new DP group drops the scale-down guard of the old one.
The DP master address is checked here: the ip must be an IP address, a port of 0 means the
configured one, else a free one. A start with `join` starts retired ranks as joiners of an elastic
scale-up (docs/engine-protocol-scale-up.md): the running engines are left alone, the joiners stay
retired until their round commits, and a joiner left from an earlier round is stopped first.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import math
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import TypeVar

from nodemanager.config import NodeManagerConfig
from motor.common.ports import listen_port
from nodemanager.endpoints import LocalEndpoint, check_endpoint_ids, check_instance
from nodemanager.errors import DeadlineExceeded, InvalidArgument, Unavailable
from nodemanager.guard import GuardState
from nodemanager.pod_state import PodState
from nodemanager.pod_stop import PodStopRecord
from nodemanager.supervisor import ProcessSupervisor

log = logging.getLogger("nodemanager.engine_lifecycle")

_MAX_GRACE_SEC = 3600.0
_T = TypeVar("_T")


@dataclass(frozen=True)
class Launch:
    """Engines a start or relaunch spawned, and when (the NodeManager's wall clock): any fault it
    observed at or before that instant is about the engines they replaced."""

    endpoints: list[LocalEndpoint]
    launched_at_unix_sec: float


@dataclass(frozen=True)
class EngineView:
    endpoint: LocalEndpoint
    pid: int
    running: bool
    exit_code: int
    retired: bool
    state: str


class EngineLifecycle:
    def __init__(self, config: NodeManagerConfig, supervisor: ProcessSupervisor, state: PodState,
                 guard: GuardState, stop_record: PodStopRecord | None = None,
                 wall: Callable[[], float] = time.time) -> None:
        self._config = config
        self._wall = wall
        self._stop_record = stop_record
        self._instance = config.instance_id
        self._supervisor = supervisor
        self._state = state
        self._guard = guard
        self.dp_master_port = config.dp_master_port
        self.launched = asyncio.Event()
        self._lock = asyncio.Lock()

    async def initial_launch(self) -> None:
        try:
            ids = [i for i in self._supervisor.ids if not self._state.is_retired(i)]
            if len(ids) < len(self._supervisor.ids):
                log.warning("instance=%d initial launch: ranks %s are retired (the pod was stopped), not launched",
                            self._instance, sorted(self._state.retired))
            if not ids:
                return
            async with self._lock:
                self.dp_master_port = self._master_port()
                failed = self._supervisor.spawn(ids, self._config.dp_master_ip, self.dp_master_port, "initial-launch")
            results = {**failed, **await self._supervisor.wait_ready([i for i in ids if i not in failed])}
            bad = {i: why for i, why in results.items() if why}
            if bad:
                log.error("instance=%d initial launch: engines not ready: %s", self._instance, bad)
            else:
                log.info("instance=%d initial launch: every engine ready %s", self._instance, ids)
        finally:
            self.launched.set()

    async def start_engines(self, *, instance_id: int, request_id: str, dp_master_ip: str, dp_master_port: int,
                            endpoint_ids: list[int], timeout_sec: float | None = None, join: bool = False) -> Launch:
        check_instance(instance_id, self._instance)
        if join:
            return await self._start_joiners(request_id, endpoint_ids, timeout_sec)
        ids = check_endpoint_ids(endpoint_ids, local=self._supervisor.ids, allow_empty=True, allow_headless=True,
                                 allow_retired=True) or self._supervisor.ids
        ip = self._master_ip(dp_master_ip, dp_master_port)
        async with self._lock:  # spawning is serialised; readiness is awaited outside the lock
            port = self._master_port(dp_master_port)
            launched_at = self._wall()
            failed = self._supervisor.spawn(ids, ip, port, request_id)
            back = self._state.unretire(ids)
            self._release_stop(ids)
            self.dp_master_port = port
            self._drop_guard_for_new_group(ids, request_id)
        log.info("instance=%d request_id=%s start engines %s master=%s:%d (retired flag cleared for %s)",
                 self._instance, request_id or "-", ids, ip, port, back)
        return Launch(await self._wait_launched(ids, failed, request_id, timeout_sec), launched_at)

    async def _start_joiners(self, request_id: str, endpoint_ids: list[int], timeout_sec: float | None) -> Launch:
        ids = check_endpoint_ids(endpoint_ids, local=self._supervisor.ids, headless=self._supervisor.headless_ids,
                                 allow_retired=True, field="endpoint_ids (join)")
        serving = [i for i in ids if not self._state.is_retired(i)]
        if serving:
            raise InvalidArgument(f"endpoint_ids {serving} are not retired: they serve in the DP group; a join starts "
                                  "only ranks a scale-down removed")
        if not request_id.strip():
            raise InvalidArgument(f"request_id {request_id!r} is empty; a join belongs to one scale-up round")

        async def stop_then_spawn() -> tuple[dict[int, str], float]:
            async with self._lock:
                # A joiner of an earlier round that never finished joins nothing: started afresh.
                stale = [i for i in ids if self._state.is_joining(i)]
                if stale:
                    await self._supervisor.stop(stale, self._config.engine_stop_grace_sec, "joiner started again",
                                                request_id)
                    self._state.end_join(stale)
                launched_at = self._wall()
                failed = self._supervisor.spawn(ids, self._config.dp_master_ip, self.dp_master_port, request_id,
                                                join=True)
                self._state.join([i for i in ids if i not in failed], request_id)
                return failed, launched_at

        failed, launched_at = await _finished_even_if_abandoned(stop_then_spawn())
        log.info("instance=%d request_id=%s start engines %s as joiners (retired until the round commits)",
                 self._instance, request_id, ids)
        return Launch(await self._wait_launched(ids, failed, request_id, timeout_sec), launched_at)

    async def stop_engines(self, *, instance_id: int, request_id: str, grace_sec: float,
                           endpoint_ids: list[int]) -> list[int]:
        check_instance(instance_id, self._instance)
        ids = check_endpoint_ids(endpoint_ids, local=self._supervisor.ids, allow_empty=True, allow_headless=True,
                                 allow_retired=True) or self._supervisor.ids
        grace = self._grace(grace_sec)
        stopped = await _finished_even_if_abandoned(self._stop_locked(ids, grace, request_id))
        log.info("instance=%d request_id=%s stop engines %s: stopped %s", self._instance, request_id or "-", ids,
                 stopped)
        return stopped

    async def _stop_locked(self, ids: list[int], grace_sec: float, request_id: str) -> list[int]:
        async with self._lock:
            return await self._supervisor.stop(ids, grace_sec, "StopEngines", request_id)

    async def relaunch_engines(self, *, instance_id: int, request_id: str, dp_master_ip: str, dp_master_port: int,
                               grace_sec: float, timeout_sec: float | None = None) -> Launch:
        check_instance(instance_id, self._instance)
        grace = self._grace(grace_sec)
        ip = self._master_ip(dp_master_ip, dp_master_port)
        ids = self._supervisor.ids

        async def stop_then_spawn() -> tuple[list[int], int, dict[int, str], list[int], float]:
            async with self._lock:
                stopped = await self._supervisor.stop(ids, grace, "RelaunchEngines", request_id)
                port = self._master_port(dp_master_port)  # after the stop: the old store port is free again
                launched_at = self._wall()
                failed = self._supervisor.spawn(ids, ip, port, request_id)
                back = self._state.unretire(ids)
                self._release_stop(ids)
                self.dp_master_port = port
                self._drop_guard_for_new_group(ids, request_id)
                return stopped, port, failed, back, launched_at

        stopped, port, failed, back, launched_at = await _finished_even_if_abandoned(stop_then_spawn())
        log.info("instance=%d request_id=%s relaunch engines %s (stopped %s, retired flag cleared for %s) "
                 "master=%s:%d", self._instance, request_id or "-", ids, stopped, back, ip, port)
        return Launch(await self._wait_launched(ids, failed, request_id, timeout_sec), launched_at)

    def describe(self) -> list[EngineView]:
        views = []
        for i in self._supervisor.ids:
            s = self._supervisor.slot(i)
            views.append(EngineView(
                endpoint=self._supervisor.endpoint(i), pid=s.pid, running=s.alive,
                exit_code=s.returncode if s.returncode is not None else 0,
                retired=self._state.is_retired(i), state=s.state.value,
            ))
        return views

    def _master_port(self, requested: int = 0) -> int:
        if requested:
            return requested
        if self._config.dp_master_port:
            return self._config.dp_master_port
        return listen_port(self._config.dp_master_ip)

    def _grace(self, grace_sec: float) -> float:
        if grace_sec == 0:
            return self._config.engine_stop_grace_sec
        if not math.isfinite(grace_sec) or not 0 < grace_sec <= _MAX_GRACE_SEC:
            raise InvalidArgument(f"grace_sec={grace_sec!r} is not in [0, {_MAX_GRACE_SEC:g}] (0: the default "
                                  f"{self._config.engine_stop_grace_sec:g}s)")
        return grace_sec

    def _master_ip(self, dp_master_ip: str, dp_master_port: int) -> str:
        """The checked master ip (empty: the configured one); the port is only range-checked."""
        ip = dp_master_ip or self._config.dp_master_ip
        try:
            ipaddress.ip_address(ip)
        except ValueError:
            raise InvalidArgument(f"dp_master_ip {dp_master_ip!r} is not an IP address") from None
        if not 0 <= dp_master_port <= 65535:
            raise InvalidArgument(f"dp_master_port {dp_master_port} is not a port (0: the configured one)")
        return ip

    async def _wait_launched(self, ids: list[int], failed: dict[int, str], request_id: str,
                             timeout_sec: float | None) -> list[LocalEndpoint]:
        waiting = asyncio.ensure_future(self._supervisor.wait_ready([i for i in ids if i not in failed]))
        try:
            results = await asyncio.wait_for(asyncio.shield(waiting), timeout_sec) if timeout_sec else await waiting
        except TimeoutError:
            raise DeadlineExceeded(
                f"engines {ids} started (request_id {request_id!r}) but not all ready within the call's deadline "
                f"({timeout_sec:.1f}s); they keep starting (engine_ready_timeout_sec="
                f"{self._config.engine_ready_timeout_sec:g})"
            ) from None
        bad = {**failed, **{i: why for i, why in results.items() if why}}
        if bad:
            raise Unavailable(f"engines not ready (request_id {request_id!r}): " + "; ".join(
                f"rank {i}: {why}" for i, why in sorted(bad.items())))
        return self._supervisor.endpoints(ids)

    def release_stop(self, ids: list[int]) -> None:
        """`ids` run again (started, or joined by a committed scale-up): out of the stop record."""
        self._release_stop(ids)

    def _release_stop(self, ids: list[int]) -> None:
        if self._stop_record is None:
            return
        try:
            self._stop_record.release(ids)
        except OSError as exc:
            log.error("instance=%d stop record %s not updated for ranks %s launched again: %s", self._instance,
                      self._stop_record.storage.where, ids, exc)

    def _drop_guard_for_new_group(self, ids: list[int], request_id: str) -> None:
        """Every local engine starting into a new DP group voids any scale-down transaction on the old
        one (e.g. a round interrupted by a Controller restart): its guard must not block the next round."""
        if sorted(ids) != sorted(self._supervisor.ids):
            return
        dropped = self._guard.clear()
        if dropped:
            log.warning("instance=%d request_id=%s guard of %s dropped: every engine restarts into a new DP group",
                        self._instance, request_id or "-", dropped)


async def _finished_even_if_abandoned(coro: Coroutine[object, object, _T]) -> _T:
    """Runs ``coro`` to its end even when its caller is cancelled (gRPC cancels a handler whose
    client gave up): a stop abandoned halfway would leave engines STOPPING, which no start accepts,
    and release the lock while they still stop. The caller that stays gets the result."""
    task = asyncio.ensure_future(coro)
    return await asyncio.shield(task)
