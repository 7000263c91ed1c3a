"""ProcessSupervisor: starts the local engine processes, waits for their readiness, watches them.

Each engine runs in its own process group (motor.common.process) with its log appended to
``<log_dir>/rank<r>.log``. Exit is seen at once through a pidfd (polling where pidfds are missing),
independently of the engine's FT status route, and handed to ``on_exit`` exactly once per run with
``intentional`` telling a stop the NodeManager asked for from a death. Readiness is ``GET /health``
= 200 within ``engine_ready_timeout_sec``; an engine that is not ready in time is stopped and counts
as a failed (unintended) run. Headless engines have no API: they are ready once spawned.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from motor.common.config.addresses import parse_host_port
from motor.common.ports import listen_port, port_free
from motor.common.waiting import end_tasks
from motor.common.process import (
    ManagedProcess,
    ProcessError,
    ProcessExitedError,
    ReadyTimeoutError,
    describe_returncode,
    start_process,
)
from nodemanager.config import EngineSpec, NodeManagerConfig
from nodemanager.endpoints import LocalEndpoint
from nodemanager.engine_command import engine_argv
from nodemanager.engine_http import EngineAddress
from nodemanager.errors import FailedPrecondition

log = logging.getLogger("nodemanager.supervisor")

_REAP_POLL_SEC = 0.02
_REAP_BOUND_SEC = 10.0
_FALLBACK_POLL_SEC = 0.2


class RunState(StrEnum):
    NEVER_STARTED = "never_started"
    STARTING = "starting"
    READY = "ready"
    STOPPING = "stopping"
    STOPPED = "stopped"  # stopped on purpose
    EXITED = "exited"  # died, or failed to start


@dataclass(frozen=True)
class EngineExit:
    endpoint_id: int
    run_id: int
    pid: int
    returncode: int | None
    intentional: bool
    was_ready: bool
    note: str = ""  # why the NodeManager stopped it, when it was not intentional (readiness timeout)

    @property
    def description(self) -> str:
        if not self.pid:
            return f"engine could not be started: {self.note}"
        text = f"engine process {self.pid} exited with {describe_returncode(self.returncode)}"
        if not self.was_ready:
            text += " before it was ready"
        return f"{text}; {self.note}" if self.note else text


@dataclass
class EngineSlot:
    spec: EngineSpec
    host: str
    port: int = 0
    proc: ManagedProcess | None = None
    run_id: int = 0
    state: RunState = RunState.NEVER_STARTED
    intentional: bool = False
    was_ready: bool = False
    note: str = ""
    returncode: int | None = None
    watcher: asyncio.Task[None] | None = field(default=None, repr=False)
    ready_task: asyncio.Task[str | None] | None = field(default=None, repr=False)

    @property
    def endpoint_id(self) -> int:
        return self.spec.dp_rank

    @property
    def alive(self) -> bool:
        """The process exists and was not asked to stop."""
        return self.state in (RunState.STARTING, RunState.READY)

    @property
    def pid(self) -> int:
        return self.proc.pid if self.proc is not None and self.state in (
            RunState.STARTING, RunState.READY, RunState.STOPPING) else 0


async def _wait_exit(proc: ManagedProcess, pidfd: int | None) -> int | None:
    """Waits for the process to end and returns its exit status (reaping it)."""
    if pidfd is not None:
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()

        def readable() -> None:
            if not done.done():
                done.set_result(None)

        loop.add_reader(pidfd, readable)
        try:
            await done
        finally:
            loop.remove_reader(pidfd)
            os.close(pidfd)
        deadline = time.monotonic() + _REAP_BOUND_SEC
        while (rc := proc.popen.poll()) is None and time.monotonic() < deadline:
            await asyncio.sleep(_REAP_POLL_SEC)  # another thread (a stop) may hold the wait lock
        return rc
    while (rc := proc.popen.poll()) is None:
        await asyncio.sleep(_FALLBACK_POLL_SEC)
    return rc


class ProcessSupervisor:
    def __init__(
        self,
        config: NodeManagerConfig,
        log_dir: Path,
        *,
        on_ready: Callable[[int, int], None],
        on_exit: Callable[[EngineExit], None],
        on_stopping: Callable[[int], None] = lambda _: None,
    ) -> None:
        self._config = config
        self._on_stopping = on_stopping
        self._log_dir = log_dir
        self._on_ready = on_ready
        self._on_exit = on_exit
        self._slots = {spec.dp_rank: EngineSlot(spec=spec, host=config.pod_ip) for spec in config.engines}
        self._labels = f"instance={config.instance_id}"
        address = config.engine_inference_address
        self._instance_route = parse_host_port(address) if address else None

    # -- views ------------------------------------------------------------------------------
    @property
    def ids(self) -> list[int]:
        return sorted(self._slots)

    @property
    def headless_ids(self) -> set[int]:
        return {i for i, s in self._slots.items() if s.spec.headless}

    def slot(self, endpoint_id: int) -> EngineSlot:
        return self._slots[endpoint_id]

    def alive_ids(self) -> list[int]:
        return sorted(i for i, s in self._slots.items() if s.alive)

    def endpoint(self, endpoint_id: int) -> LocalEndpoint:
        s = self._slots[endpoint_id]
        if not s.port and not s.spec.headless:
            # Not launched yet (a stopped or replacement pod's retired rank): described at the port
            # its launch will take (kept while free), never at port 0, which the Controller refuses.
            cfg = self._config
            s.port = self._choose_port(s, cfg.dp_master_port if cfg.dp_master_ip == s.host else 0)
        return LocalEndpoint(endpoint_id, s.host, s.port, s.spec.headless, tuple(s.spec.device_infos),
                             self._instance_route)

    def endpoints(self, ids: Iterable[int] | None = None) -> list[LocalEndpoint]:
        return [self.endpoint(i) for i in (self.ids if ids is None else ids)]

    def address(self, endpoint_id: int) -> EngineAddress | None:
        """Where the engine's API is, once it has a port (None for headless engines)."""
        s = self._slots.get(endpoint_id)
        if s is None or s.spec.headless or not s.port:
            return None
        return EngineAddress(endpoint_id, s.host, s.port)

    # -- start ------------------------------------------------------------------------------
    def _choose_port(self, s: EngineSlot, taken: int) -> int:
        """`taken`: the DP master's port on this host (0: none here). Not bound until the master
        rank's group forms, so the kernel may offer it as free: never the engine's HTTP port."""
        if s.spec.port:
            return s.spec.port
        if s.port and s.port != taken and port_free(s.host, s.port):
            return s.port  # keep the endpoint's address across relaunches when possible
        for _ in range(8):
            if (port := listen_port(s.host)) != taken:
                return port
        raise ProcessError(f"rank {s.endpoint_id}: no free port on {s.host} but the DP master's {taken}")

    def _spawn(self, s: EngineSlot, dp_master_ip: str, dp_master_port: int, request_id: str, join: bool) -> int | None:
        s.port = self._choose_port(s, dp_master_port if dp_master_ip == s.host else 0)
        argv = engine_argv(self._config, dp_rank=s.endpoint_id, port=s.port,
                           dp_master_ip=dp_master_ip, dp_master_port=dp_master_port, join=join)
        log_path = self._log_dir / f"rank{s.endpoint_id}.log"
        self._log_dir.mkdir(parents=True, exist_ok=True)
        with open(log_path, "a", encoding="utf-8") as fh:
            fh.write(f"\n=== nodemanager: run {s.run_id + 1} of rank {s.endpoint_id} at {time.strftime('%Y-%m-%dT%H:%M:%S')}"
                     f" request_id={request_id or '-'}: {' '.join(argv)}\n")
        s.proc = start_process(argv, log_path=log_path, name=f"engine-rank{s.endpoint_id}")
        s.run_id += 1
        s.state = RunState.STARTING
        s.intentional = False
        s.was_ready = False
        s.note = ""
        s.returncode = None
        try:
            pidfd: int | None = os.pidfd_open(s.proc.pid)
        except (AttributeError, OSError):
            pidfd = None
        s.watcher = asyncio.create_task(self._watch(s, s.run_id, s.proc, pidfd), name=f"watch-rank{s.endpoint_id}")
        log.info("%s rank=%d request_id=%s engine started pid=%d port=%d master=%s:%d log=%s",
                 self._labels, s.endpoint_id, request_id or "-", s.proc.pid, s.port, dp_master_ip, dp_master_port,
                 log_path)
        return s.proc.pid

    def spawn(self, ids: list[int], dp_master_ip: str, dp_master_port: int, request_id: str = "",
              ready_timeout_sec: float | None = None, join: bool = False) -> dict[int, str]:
        """Spawns every engine in ``ids`` (all first: a DP group forms only once every rank runs)
        and starts waiting for their readiness in the background (``wait_ready``). Returns the ids
        that could not even be spawned, with why. Refuses when one of them is still running.
        `join`: as joiners of an elastic scale-up (the engine's join mode)."""
        busy = [i for i in ids if self._slots[i].state in (RunState.STARTING, RunState.READY, RunState.STOPPING)]
        if busy:
            pids = [self._slots[i].pid for i in busy]
            raise FailedPrecondition(f"engines {busy} are already running (pids {pids}); stop or relaunch them first")
        timeout = self._config.engine_ready_timeout_sec if ready_timeout_sec is None else ready_timeout_sec
        deadline = time.monotonic() + timeout
        failed: dict[int, str] = {}
        for i in ids:
            s = self._slots[i]
            try:
                self._spawn(s, dp_master_ip, dp_master_port, request_id, join)
            except (OSError, ValueError) as exc:
                failed[i] = f"cannot start engine of rank {i}: {exc}"
                s.run_id += 1
                s.state = RunState.EXITED
                s.ready_task = None
                s.proc = None
                log.error("%s rank=%d request_id=%s %s", self._labels, i, request_id or "-", failed[i])
                self._on_exit(EngineExit(i, s.run_id, 0, None, False, False, str(exc)))
                continue
            s.ready_task = asyncio.create_task(self._await_ready(s, s.run_id, deadline, request_id),
                                               name=f"ready-rank{i}")
        return failed

    async def wait_ready(self, ids: list[int]) -> dict[int, str | None]:
        """id → None once ready, or why it is not (exited, stopped, not ready in time)."""
        out: dict[int, str | None] = {}
        for i in ids:
            task = self._slots[i].ready_task
            if task is None:
                out[i] = f"engine of rank {i} was not started"
                continue
            out[i] = await asyncio.shield(task)
        return out

    async def launch(self, ids: list[int], dp_master_ip: str, dp_master_port: int, request_id: str = "",
                     ready_timeout_sec: float | None = None) -> dict[int, str | None]:
        failed = self.spawn(ids, dp_master_ip, dp_master_port, request_id, ready_timeout_sec)
        results: dict[int, str | None] = dict(failed)
        results.update(await self.wait_ready([i for i in ids if i not in failed]))
        return results

    async def _await_ready(self, s: EngineSlot, run_id: int, deadline: float, request_id: str) -> str | None:
        proc = s.proc
        assert proc is not None
        if not s.spec.headless:
            url = f"{self.address(s.endpoint_id).base_url}/health"  # type: ignore[union-attr]
            try:
                await proc.await_http_ok(url, max(0.1, deadline - time.monotonic()))
            except ProcessExitedError as exc:
                return f"engine of rank {s.endpoint_id} exited before it was ready ({describe_returncode(exc.returncode)})"
            except ReadyTimeoutError:
                if s.run_id != run_id or s.state is not RunState.STARTING:
                    return f"engine of rank {s.endpoint_id} was stopped before it was ready"
                note = f"not ready ({url} not 200) within {self._config.engine_ready_timeout_sec:g}s; stopped"
                s.note = note
                log.error("%s rank=%d request_id=%s engine pid=%d %s", self._labels, s.endpoint_id,
                          request_id or "-", proc.pid, note)
                await self._stop_proc(s, self._config.engine_stop_grace_sec)
                return f"engine of rank {s.endpoint_id} {note}"
        if s.run_id != run_id or s.state is not RunState.STARTING:
            return f"engine of rank {s.endpoint_id} was stopped before it was ready"
        s.state = RunState.READY
        s.was_ready = True
        log.info("%s rank=%d request_id=%s engine ready pid=%d port=%d", self._labels, s.endpoint_id,
                 request_id or "-", proc.pid, s.port)
        self._on_ready(s.endpoint_id, run_id)
        return None

    # -- watch ------------------------------------------------------------------------------
    async def _watch(self, s: EngineSlot, run_id: int, proc: ManagedProcess, pidfd: int | None) -> None:
        rc = await _wait_exit(proc, pidfd)
        if s.run_id != run_id:
            return
        s.returncode = rc
        intentional = s.intentional
        s.state = RunState.STOPPED if intentional else RunState.EXITED
        event = EngineExit(s.endpoint_id, run_id, proc.pid, rc, intentional, s.was_ready, s.note)
        if intentional:
            log.info("%s rank=%d engine stopped: %s", self._labels, s.endpoint_id, event.description)
        else:
            log.error("%s rank=%d engine died: %s", self._labels, s.endpoint_id, event.description)
        try:
            self._on_exit(event)
        except Exception:  # noqa: BLE001 - a callback bug must not hide the next exit
            log.exception("%s rank=%d exit handler failed", self._labels, s.endpoint_id)

    # -- stop -------------------------------------------------------------------------------
    async def _stop_proc(self, s: EngineSlot, grace_sec: float) -> None:
        proc = s.proc
        if proc is None:
            return
        try:
            await proc.astop(grace_sec)
        except ProcessError as exc:
            log.error("%s rank=%d cannot stop engine pid=%d: %s", self._labels, s.endpoint_id, proc.pid, exc)
        if s.watcher is not None:
            try:
                await asyncio.wait_for(asyncio.shield(s.watcher), _REAP_BOUND_SEC)
            except TimeoutError:
                log.error("%s rank=%d exit of engine pid=%d not seen", self._labels, s.endpoint_id, proc.pid)

    async def stop(self, ids: Iterable[int], grace_sec: float, reason: str, request_id: str = "") -> list[int]:
        """Stops the engines of ``ids`` on purpose (their exit is not a fault); returns those that ran."""
        targets = [self._slots[i] for i in ids if self._slots[i].state in
                   (RunState.STARTING, RunState.READY, RunState.STOPPING)]
        for s in targets:
            s.intentional = True
            s.state = RunState.STOPPING
            self._on_stopping(s.endpoint_id)
            log.info("%s rank=%d request_id=%s stopping engine pid=%d (%s, grace %gs)", self._labels,
                     s.endpoint_id, request_id or "-", s.pid, reason, grace_sec)
        await asyncio.gather(*(self._stop_proc(s, grace_sec) for s in targets))
        return sorted(s.endpoint_id for s in targets)

    async def stop_all(self, grace_sec: float, reason: str) -> list[int]:
        return await self.stop(self.ids, grace_sec, reason)

    async def close(self, bound_sec: float) -> None:
        """Ends the exit watchers and readiness waits, waiting at most `bound_sec` for them."""
        tasks = [task for s in self._slots.values() for task in (s.watcher, s.ready_task) if task is not None]
        await end_tasks(tasks, bound_sec, f"{self._labels} supervisor close")
