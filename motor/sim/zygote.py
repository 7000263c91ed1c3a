"""The executor zygote: one process that has imported torch forks the executors of every reference
engine on its machine that names it (``motor-engine-sim --executor-zygote ADDRESS``).

Why: a spawned executor spends about 1.5 s of CPU importing torch before it forms its group, and a
local cluster starts one per rank, again after every reconfiguration. Forked from a process that
imported torch once, an executor starts in milliseconds. It is the executor ``spawn`` would start:
the same entry point, given the API process's end of the pipe, its stdout and stderr, environment
and working directory. Two things differ, and both are taken care of: its parent is the zygote, so
it ends when its pipe closes (the API process's death) rather than by PDEATHSIG, and the zygote, not
the API process, reaps it, so the zygote sends the exit status back.

Protocol (a Unix stream socket; ``@name`` is an abstract address; only the zygote's own user may
connect), one connection per executor:
  API process → zygote: a 4-byte length and a JSON request ``{"cfg": ..., "env": ..., "cwd": ...}``,
      with the executor's end of the pipe, stdout and stderr as SCM_RIGHTS descriptors;
  zygote → API process: the executor's pid (4 bytes) with a pidfd of it, then, once it has been
      reaped, its exit code (4 bytes, negative for a signal, as multiprocessing reports it).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import secrets
import select
import selectors
import signal
import socket
import struct
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from motor.common.process import ManagedProcess, start_process

log = logging.getLogger("motor.sim.zygote")

_INT = struct.Struct("!i")
_MAX_REQUEST_BYTES = 1 << 20
_REQUEST_FDS = 3
_REQUEST_TIMEOUT_SEC = 5.0
# The zygote is up (the launcher waited for it), so an answer comes unless it is still importing
# torch (a few seconds on a loaded machine) or is gone.
_ANSWER_TIMEOUT_SEC = 60.0
# Between the executor's end (its pidfd) and the zygote's report of its status.
_STATUS_TIMEOUT_SEC = 5.0


class ZygoteError(RuntimeError):
    """The zygote could not be reached or did not start the executor."""


def _bind_address(address: str) -> str:
    """``@name`` → the abstract socket name (no file, nothing to clean up); a path otherwise."""
    return "\0" + address[1:] if address.startswith("@") else address


def _recv_exactly(sock: socket.socket, size: int) -> bytes | None:
    data = b""
    while len(data) < size:  # bounded: each pass reads at least one byte or returns
        chunk = sock.recv(size - len(data))
        if not chunk:
            return None
        data += chunk
    return data


# ---- the API process's side ---------------------------------------------------------------------


class ZygoteChild:
    """An executor forked by the zygote, as the API process sees it: the part of
    ``multiprocessing.Process`` that ``ExecutorHandle`` uses (its reader thread and its stop may
    join at once)."""

    def __init__(self, sock: socket.socket, pid: int, pidfd: int) -> None:
        self._sock = sock
        self.pid = pid
        # Kept open for the object's life: another thread may be waiting on it.
        self._pidfd = pidfd
        self.exitcode: int | None = None
        self._reported = False
        self._lock = threading.Lock()

    def _ended(self, timeout: float | None) -> bool:
        return bool(select.select([self._pidfd], [], [], timeout)[0])

    def is_alive(self) -> bool:
        return not self._reported and not self._ended(0)

    def join(self, timeout: float | None = None) -> None:
        if self._reported or not self._ended(timeout):
            return
        with self._lock:
            if self._reported:
                return
            self._sock.settimeout(_STATUS_TIMEOUT_SEC)
            try:
                raw = _recv_exactly(self._sock, _INT.size)
            except OSError:
                raw = None
            # None when the zygote is gone: the executor has ended, its status is unknown.
            self.exitcode = _INT.unpack(raw)[0] if raw is not None else None
            self._reported = True
            self._sock.close()

    def kill(self) -> None:
        try:
            signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)
        except ProcessLookupError:
            pass  # already reaped

    def __del__(self) -> None:
        os.close(self._pidfd)


def fork_executor(address: str, executor_fd: int, cfg_json: dict[str, Any]) -> ZygoteChild:
    """Asks the zygote at ``address`` for an executor on ``executor_fd`` (this process's stdout,
    stderr, environment and working directory go with it); its pid once forked."""
    request = json.dumps({"cfg": cfg_json, "env": dict(os.environ), "cwd": os.getcwd()}).encode()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(_ANSWER_TIMEOUT_SEC)
        sock.connect(_bind_address(address))
        payload = _INT.pack(len(request)) + request
        sent = socket.send_fds(sock, [payload], [executor_fd, 1, 2])
        sock.sendall(payload[sent:])
        data, fds, _flags, _addr = socket.recv_fds(sock, _INT.size, 1)
        if len(data) != _INT.size or len(fds) != 1:
            for fd in fds:
                os.close(fd)
            raise ZygoteError(f"the executor zygote at {address!r} closed without starting the executor")
    except OSError as exc:
        sock.close()
        raise ZygoteError(f"the executor zygote at {address!r}: {exc}") from exc
    except ZygoteError:
        sock.close()
        raise
    sock.settimeout(None)
    return ZygoteChild(sock, _INT.unpack(data)[0], fds[0])


def start_zygote(run_dir: Path, timeout_sec: float = 60.0, cwd: Path | None = None) -> tuple[ManagedProcess, str]:
    """A zygote for the engines of one local cluster (logs to ``<run_dir>/executor-zygote.log``),
    and its abstract address, once it accepts requests (torch may still be loading)."""
    address = f"@motor-sim-zygote-{os.getpid()}-{secrets.token_hex(6)}"
    ready = run_dir / "executor-zygote.ready.json"
    ready.unlink(missing_ok=True)
    proc = start_process([sys.executable, "-m", "motor.sim.zygote", "--address", address, "--ready-file", str(ready)],
                         log_path=run_dir / "executor-zygote.log", name="executor-zygote", cwd=cwd)
    try:
        proc.wait_ready_file(ready, timeout_sec, required_keys=("pid", "address"))
    except BaseException:
        proc.stop(grace_sec=5)
        raise
    return proc, address


# ---- the zygote ---------------------------------------------------------------------------------


class Zygote:
    """Accepts requests and forks executors; reaps them and reports their exit status."""

    def __init__(self, listener: socket.socket) -> None:
        self._listener = listener
        self._sel = selectors.DefaultSelector()
        self._children: dict[int, tuple[int, socket.socket]] = {}  # pidfd → (pid, requester)

    def serve(self) -> None:
        """Until the process is signalled to end."""
        self._sel.register(self._listener, selectors.EVENT_READ, None)
        while True:  # noqa: the zygote's lifetime; SIGTERM ends the process
            for key, _ in self._sel.select():
                if key.data is None:
                    self._accept()
                elif key.fileobj == key.data:
                    self._reap(key.data)
                else:
                    self._requester_gone(key.data)

    def _accept(self) -> None:
        try:
            conn, _ = self._listener.accept()
        except OSError as exc:  # out of descriptors, say: the requester sees its connection fail
            log.warning("accepting an executor request failed: %s", exc)
            return
        fds: list[int] = []
        try:
            _pid, uid, _gid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                                  struct.calcsize("3i")))
            if uid != os.getuid():
                raise ZygoteError(f"a request from uid {uid}, not the zygote's uid {os.getuid()}")
            conn.settimeout(_REQUEST_TIMEOUT_SEC)
            head, fds, _flags, _addr = socket.recv_fds(conn, _INT.size, _REQUEST_FDS)
            size = _INT.unpack(head)[0] if len(head) == _INT.size else -1
            if len(fds) != _REQUEST_FDS or not 0 < size <= _MAX_REQUEST_BYTES:
                raise ZygoteError(f"a malformed request ({len(head)}-byte header, {len(fds)} descriptors)")
            body = _recv_exactly(conn, size)
            if body is None:
                raise ZygoteError("the requester closed before its request was whole")
            request = json.loads(body)
            self._fork(conn, fds, request["cfg"], request["env"], request["cwd"])
        except (OSError, ValueError, KeyError, TypeError, ZygoteError) as exc:
            log.warning("executor request refused: %s", exc)
            conn.close()
        finally:
            for fd in fds:
                os.close(fd)

    def _fork(self, conn: socket.socket, fds: list[int], cfg: dict[str, Any], env: dict[str, str],
              cwd: str) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            self._become_executor(conn, fds, cfg, env, cwd)
        pidfd = os.pidfd_open(pid)
        self._children[pidfd] = (pid, conn)
        self._sel.register(pidfd, selectors.EVENT_READ, pidfd)
        # The requester's end closes when the API process dies: the executor goes with it, as the
        # PDEATHSIG of a spawned one would see to (even a stopped executor, which reads no EOF).
        self._sel.register(conn, selectors.EVENT_READ, pidfd)
        socket.send_fds(conn, [_INT.pack(pid)], [pidfd])
        log.info("rank=%s executor forked pid=%d", cfg.get("dp_rank"), pid)

    def _requester_gone(self, pidfd: int) -> None:
        pid, conn = self._children[pidfd]
        self._sel.unregister(conn)
        log.info("executor pid=%d: its API process is gone; killing it", pid)
        try:
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def _reap(self, pidfd: int) -> None:
        pid, conn = self._children.pop(pidfd)
        self._sel.unregister(pidfd)
        if self._registered(conn):
            self._sel.unregister(conn)
        os.close(pidfd)
        _, status = os.waitpid(pid, 0)
        try:
            conn.sendall(_INT.pack(os.waitstatus_to_exitcode(status)))
        except OSError:
            pass  # the API process is gone
        conn.close()

    def _registered(self, sock: socket.socket) -> bool:
        try:
            self._sel.get_key(sock)
        except KeyError:
            return False
        return True

    def _become_executor(self, conn: socket.socket, fds: list[int], cfg: dict[str, Any],
                         env: dict[str, str], cwd: str) -> None:
        code = 70
        try:
            self._sel.close()
            self._listener.close()
            conn.close()
            for pidfd, (_pid, other) in self._children.items():
                os.close(pidfd)
                other.close()
            os.setsid()  # the API process's, not the zygote's: stopping the zygote leaves it running
            executor_fd, out_fd, err_fd = fds
            os.dup2(out_fd, 1)
            os.dup2(err_fd, 2)
            os.close(out_fd)
            os.close(err_fd)
            os.environ.clear()
            os.environ.update(env)
            os.chdir(cwd)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            from multiprocessing.connection import Connection

            from motor.sim.executor import executor_main
            executor_main(Connection(executor_fd), cfg, parent_pid=None)
            code = 0
        except BaseException:
            log.exception("rank=%s executor forked by the zygote failed", cfg.get("dp_rank"))
        finally:
            os._exit(code)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m motor.sim.zygote", description=__doc__.split("\n\n")[0])
    parser.add_argument("--address", required=True, help="Unix socket to serve (@name: abstract)")
    parser.add_argument("--ready-file", default=None, help='written once bound: {"pid": ..., "address": ...}')
    parser.add_argument("--log-level", choices=["DEBUG", "INFO", "WARNING", "ERROR"], default="INFO")
    ns = parser.parse_args(argv)
    logging.basicConfig(level=getattr(logging, ns.log_level),
                        format="%(asctime)s %(levelname)s %(name)s[zygote pid=%(process)d]: %(message)s")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(_bind_address(ns.address))
    if not ns.address.startswith("@"):
        os.chmod(ns.address, 0o600)
    listener.listen(64)
    # Requests queue in the backlog while torch loads, so the engines need not wait for it.
    if ns.ready_file:
        tmp = Path(ns.ready_file + ".tmp")
        tmp.write_text(json.dumps({"pid": os.getpid(), "address": ns.address}))
        tmp.replace(ns.ready_file)
    # A process with live thread pools cannot fork safely: torch's OpenMP and OpenBLAS pools start
    # at import unless limited to one thread (an executor's collectives need no pool).
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    import motor.sim.dp_group  # noqa: F401  (torch: what every executor would import)
    import motor.sim.executor  # noqa: F401
    threads = len(os.listdir("/proc/self/task"))
    if threads != 1:
        log.error("the zygote runs %d threads after importing torch; it must run one to fork", threads)
        raise SystemExit(2)
    log.info("executor zygote serving on %s", ns.address)
    Zygote(listener).serve()


if __name__ == "__main__":
    main()
