"""API-process side of the executor: spawn it, send commands, turn its messages into loop events."""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import os
import signal
import threading
from collections.abc import Callable
from typing import Any

from motor.sim.config import SimConfig
from motor.sim.executor import executor_main
from motor.sim.zygote import ZygoteError, fork_executor

log = logging.getLogger("motor.sim.executor_client")

_EXIT_JOIN_SEC = 5.0


def describe_exit(exitcode: int | None) -> str:
    if exitcode is None:
        return "exit status unknown"
    if exitcode < 0:
        try:
            return f"killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"killed by signal {-exitcode}"
    return f"exit code {exitcode}"


class ExecutorHandle:
    """Owns the executor child; ``on_event`` runs on the event loop for every message and, last,
    once for ``{"ev": "exit", "exitcode": ..., "description": ...}``."""

    def __init__(self, cfg: SimConfig, loop: asyncio.AbstractEventLoop,
                 on_event: Callable[[dict[str, Any]], None]) -> None:
        self.cfg = cfg
        self._loop = loop
        self._on_event = on_event
        self._send_lock = threading.Lock()
        self._conn: Any = None
        self._proc: Any = None
        self._reader: threading.Thread | None = None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def alive(self) -> bool:
        return self._proc is not None and self._proc.is_alive()

    def start(self) -> None:
        # Must run on the main thread: the child's PDEATHSIG is tied to the thread that forks it.
        ctx = multiprocessing.get_context("spawn")
        parent_conn, child_conn = ctx.Pipe(duplex=True)
        self._proc = None
        if self.cfg.executor_zygote is not None:
            try:
                self._proc = fork_executor(self.cfg.executor_zygote, child_conn.fileno(), self.cfg.to_json())
            except ZygoteError as exc:
                log.warning("rank=%d %s; spawning the executor instead", self.cfg.dp_rank, exc)
        if self._proc is None:
            self._proc = ctx.Process(
                target=executor_main,
                args=(child_conn, self.cfg.to_json(), os.getpid()),
                name=f"motor-sim-executor-rank{self.cfg.dp_rank}",
                daemon=False,
            )
            self._proc.start()
        child_conn.close()
        self._conn = parent_conn
        log.info("rank=%d executor process started pid=%d", self.cfg.dp_rank, self._proc.pid)
        self._reader = threading.Thread(target=self._read_loop, name="executor-event-reader", daemon=True)
        self._reader.start()

    def _read_loop(self) -> None:
        # Lives until the executor's end of the pipe closes (its death or exit).
        while True:
            try:
                msg = self._conn.recv()
            except (EOFError, OSError):
                break
            self._post(msg)
        self._proc.join(_EXIT_JOIN_SEC)
        code = self._proc.exitcode
        self._post({"ev": "exit", "exitcode": code, "description": describe_exit(code)})

    def _post(self, msg: dict[str, Any]) -> None:
        try:
            self._loop.call_soon_threadsafe(self._on_event, msg)
        except RuntimeError:  # loop closed during shutdown
            pass

    def send(self, msg: dict[str, Any]) -> bool:
        if self._conn is None:
            return False
        try:
            with self._send_lock:
                self._conn.send(msg)
            return True
        except (OSError, EOFError, ValueError):
            return False

    def kill(self) -> None:
        """Hard executor death (SIGKILL), as when an EngineCore crashes."""
        if self._proc is not None and self._proc.exitcode is None:
            self._proc.kill()

    async def stop(self, grace_sec: float = 3.0) -> None:
        if self._proc is None:
            return
        self.send({"op": "shutdown"})
        await asyncio.to_thread(self._proc.join, grace_sec)
        if self._proc.exitcode is None:
            log.warning("rank=%d executor pid=%d did not exit within %.1fs; killing", self.cfg.dp_rank, self.pid, grace_sec)
            self.kill()
            await asyncio.to_thread(self._proc.join, grace_sec)
        try:
            self._conn.close()
        except OSError:
            pass
