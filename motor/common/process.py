"""Start, watch and stop OS processes: the NodeManager's engine supervisor, the local-cluster
launcher and real-process tests.

Every process runs in its own session/process group (``start_new_session=True``) with stdout and
stderr appended to one log file, so it and everything it forks can be stopped as a unit by pid:
SIGTERM to the group, SIGKILL to the group after a grace period. Readiness is a JSON ready file
or an HTTP 200, each waited for with a deadline while watching for an early exit (the error then
carries the tail of the log). Sync and ``async`` variants are provided; the async ones never block
the event loop for longer than one short poll.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_POLL_SEC = 0.05
_KILL_WAIT_SEC = 5.0


class ProcessError(RuntimeError):
    """A managed process did not become ready or could not be stopped."""


class ProcessExitedError(ProcessError):
    def __init__(self, name: str, returncode: int, log_tail: str) -> None:
        self.returncode = returncode
        super().__init__(f"process {name} exited with {describe_returncode(returncode)} before it was ready; "
                         f"log tail:\n{log_tail}")


class ReadyTimeoutError(ProcessError):
    pass


def describe_returncode(returncode: int | None) -> str:
    if returncode is None:
        return "no exit status"
    if returncode < 0:
        try:
            return f"signal {signal.Signals(-returncode).name}"
        except ValueError:
            return f"signal {-returncode}"
    return f"exit code {returncode}"


def read_json_file(path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The JSON object in ``path``, or None while it is missing or not yet complete."""
    try:
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
    except (FileNotFoundError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def tail_file(path: str | os.PathLike[str], lines: int = 40, max_bytes: int = 64 * 1024) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - max_bytes))
            data = fh.read()
    except OSError as exc:
        return f"<log {path} unreadable: {exc}>"
    return "\n".join(data.decode("utf-8", "replace").splitlines()[-lines:])


def http_status(url: str, timeout_sec: float, ssl_context: ssl.SSLContext | None = None) -> int | None:
    """HTTP status of GET ``url`` (https with ``ssl_context``), or None when nothing answered."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_sec, context=ssl_context) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except (urllib.error.URLError, OSError, ValueError):
        return None


def _group_members(pgid: int) -> list[int] | None:
    """Live (non-zombie) pids of process group ``pgid``; None when /proc cannot tell."""
    try:
        entries = os.listdir("/proc")
    except OSError:
        return None
    members = []
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as fh:
                stat = fh.read()
        except OSError:
            continue
        # Fields after the parenthesised command: state ppid pgrp ...
        rest = stat.rsplit(")", 1)[-1].split()
        if len(rest) >= 3 and rest[0] != "Z" and int(rest[2]) == pgid:
            members.append(int(entry))
    return members


def group_alive(pgid: int) -> bool:
    # No member at all (zombies included): answered without reading /proc, which costs a read per
    # process on the machine (with thousands of engine processes on one host, every stop would scan
    # them all, several times).
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    members = _group_members(pgid)
    if members is not None:
        return bool(members)
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def signal_group(pgid: int, sig: int) -> None:
    """``sig`` to process group ``pgid``; a group that is gone (or not ours) is left alone."""
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def stop_process_group(pid: int, *, grace_sec: float = 5.0, popen: subprocess.Popen[bytes] | None = None) -> None:
    """SIGTERM the process group led by ``pid``, SIGKILL it after ``grace_sec``.

    ``popen`` (when this process started it) lets the leader be reaped so it is not left a zombie.
    """
    def leader_gone() -> bool:
        if popen is not None:
            return popen.poll() is not None
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False
        members = _group_members(pid)
        return members is not None and pid not in members

    def gone_within(sec: float) -> bool:
        deadline = time.monotonic() + sec
        while time.monotonic() < deadline:
            if leader_gone() and not group_alive(pid):
                return True
            time.sleep(_POLL_SEC)
        return False

    signal_group(pid, signal.SIGTERM)
    if gone_within(grace_sec):
        return
    signal_group(pid, signal.SIGKILL)
    if gone_within(_KILL_WAIT_SEC):
        return
    raise ProcessError(f"process group {pid} still alive {_KILL_WAIT_SEC:g}s after SIGKILL")


async def astop_process_group(pid: int, *, grace_sec: float = 5.0,
                              popen: subprocess.Popen[bytes] | None = None) -> None:
    """``stop_process_group`` without blocking the event loop."""
    await asyncio.to_thread(stop_process_group, pid, grace_sec=grace_sec, popen=popen)


@dataclass
class ManagedProcess:
    name: str
    argv: list[str]
    log_path: Path
    popen: subprocess.Popen[bytes]
    started_at_monotonic: float = field(default_factory=time.monotonic)

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def returncode(self) -> int | None:
        return self.popen.poll()

    @property
    def running(self) -> bool:
        return self.popen.poll() is None

    def log_tail(self, lines: int = 40) -> str:
        return tail_file(self.log_path, lines)

    def _check_alive(self) -> None:
        code = self.popen.poll()
        if code is not None:
            raise ProcessExitedError(self.name, code, self.log_tail())

    def _ready_file_poll(self, path: Path, required_keys: Sequence[str], deadline: float,
                         timeout_sec: float) -> dict[str, Any] | None:
        """One look at the ready file: its document, None to look again, or the timeout error."""
        doc = read_json_file(path)
        if doc is not None and all(k in doc for k in required_keys):
            return doc
        self._check_alive()
        if time.monotonic() >= deadline:
            raise ReadyTimeoutError(f"process {self.name} (pid {self.pid}) wrote no ready file {path} "
                                    f"within {timeout_sec:g}s; log tail:\n{self.log_tail()}")
        return None

    def wait_ready_file(self, path: str | os.PathLike[str], timeout_sec: float,
                        required_keys: Sequence[str] = ()) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_sec
        while (doc := self._ready_file_poll(Path(path), required_keys, deadline, timeout_sec)) is None:
            time.sleep(_POLL_SEC)
        return doc

    async def await_ready_file(self, path: str | os.PathLike[str], timeout_sec: float,
                               required_keys: Sequence[str] = ()) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_sec
        while (doc := self._ready_file_poll(Path(path), required_keys, deadline, timeout_sec)) is None:
            await asyncio.sleep(_POLL_SEC)
        return doc

    @staticmethod
    def _probe_timeout(deadline: float) -> float:
        return min(1.0, max(0.05, deadline - time.monotonic()))

    def _http_poll_done(self, url: str, status: int | None, deadline: float, timeout_sec: float) -> bool:
        """True once ``url`` answered 200; raises the timeout error when the deadline passed."""
        if status == 200:
            return True
        if time.monotonic() >= deadline:
            raise ReadyTimeoutError(f"process {self.name} (pid {self.pid}): {url} not 200 within "
                                    f"{timeout_sec:g}s; log tail:\n{self.log_tail()}")
        return False

    def wait_http_ok(self, url: str, timeout_sec: float, ssl_context: ssl.SSLContext | None = None) -> None:
        deadline = time.monotonic() + timeout_sec
        while True:
            self._check_alive()
            status = http_status(url, self._probe_timeout(deadline), ssl_context)
            if self._http_poll_done(url, status, deadline, timeout_sec):
                return
            time.sleep(_POLL_SEC * 2)

    async def await_http_ok(self, url: str, timeout_sec: float, ssl_context: ssl.SSLContext | None = None) -> None:
        deadline = time.monotonic() + timeout_sec
        while True:
            self._check_alive()
            status = await asyncio.to_thread(http_status, url, self._probe_timeout(deadline), ssl_context)
            if self._http_poll_done(url, status, deadline, timeout_sec):
                return
            await asyncio.sleep(_POLL_SEC * 2)

    async def await_exit(self, timeout_sec: float) -> int | None:
        """Return code once the leader exits, or None if it still runs after ``timeout_sec``."""
        deadline = time.monotonic() + timeout_sec
        while self.popen.poll() is None and time.monotonic() < deadline:
            await asyncio.sleep(_POLL_SEC)
        return self.popen.poll()

    def wait_exit(self, timeout_sec: float) -> int | None:
        try:
            return self.popen.wait(timeout=timeout_sec)
        except subprocess.TimeoutExpired:
            return None

    def stop(self, grace_sec: float = 5.0) -> int | None:
        """Stop the whole process group (idempotent); returns the leader's return code."""
        stop_process_group(self.pid, grace_sec=grace_sec, popen=self.popen)
        return self.popen.poll()

    async def astop(self, grace_sec: float = 5.0) -> int | None:
        await astop_process_group(self.pid, grace_sec=grace_sec, popen=self.popen)
        return self.popen.poll()

    def kill(self) -> None:
        """SIGKILL the whole group now (a crash, as seen from outside)."""
        signal_group(self.pid, signal.SIGKILL)
        self.wait_exit(_KILL_WAIT_SEC)


def start_process(
    argv: Sequence[str],
    *,
    log_path: str | os.PathLike[str],
    name: str | None = None,
    cwd: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    extra_env: Mapping[str, str] | None = None,
) -> ManagedProcess:
    """Start ``argv`` in a new session, stdout+stderr appended to ``log_path``."""
    log_file = Path(log_path)
    log_file.parent.mkdir(parents=True, exist_ok=True)
    full_env = dict(os.environ if env is None else env)
    if extra_env:
        full_env.update(extra_env)
    full_env.setdefault("PYTHONUNBUFFERED", "1")
    with open(log_file, "ab") as out:
        popen = subprocess.Popen(
            list(argv), stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            cwd=None if cwd is None else str(cwd), env=full_env, start_new_session=True,
        )
    return ManagedProcess(name=name or Path(argv[0]).name, argv=list(argv), log_path=log_file, popen=popen)
