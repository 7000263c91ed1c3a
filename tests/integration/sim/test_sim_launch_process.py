"""motor.common.process / ports with small real processes."""

from __future__ import annotations

import socket
import sys
import textwrap
import time
from pathlib import Path

import pytest

from motor.common.ports import free_port, free_ports
from motor.common.process import (
    ProcessExitedError,
    ReadyTimeoutError,
    group_alive,
    start_process,
    stop_process_group,
)
from motor.testing.waits import wait_for

pytestmark = pytest.mark.timeout(60)  # per test, module fixtures included


def py(code: str) -> list[str]:
    return [sys.executable, "-c", textwrap.dedent(code)]


def pid_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_ready_file_then_sigterm(tmp_path: Path) -> None:
    ready = tmp_path / "ready.json"
    proc = start_process(py(f"""
        import json, os, time
        time.sleep(0.2)
        open({str(ready)!r} + ".tmp", "w").write(json.dumps({{"port": 1234, "pid": os.getpid()}}))
        os.replace({str(ready)!r} + ".tmp", {str(ready)!r})
        print("ready", flush=True)
        time.sleep(60)
    """), log_path=tmp_path / "p.log", name="writer")
    try:
        doc = proc.wait_ready_file(ready, 10, required_keys=("port",))
        assert doc == {"port": 1234, "pid": proc.pid}
        assert proc.running
    finally:
        proc.stop(grace_sec=5)
    assert proc.returncode == -15
    assert not group_alive(proc.pid)
    assert "ready" in proc.log_tail()


def test_stubborn_group_is_killed_after_grace(tmp_path: Path) -> None:
    child_pid_file = tmp_path / "child.pid"
    proc = start_process(py(f"""
        import os, signal, subprocess, sys, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        child = subprocess.Popen([sys.executable, "-c",
            "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"])
        open({str(child_pid_file)!r}, "w").write(str(child.pid))
        time.sleep(60)
    """), log_path=tmp_path / "p.log")
    try:
        try:
            child_pid = int(wait_for(lambda: child_pid_file.exists() and child_pid_file.read_text(), 10,
                                     "the child's pid file"))
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{proc.log_tail()}") from None
        started = time.monotonic()
        proc.stop(grace_sec=0.5)
        assert time.monotonic() - started >= 0.5
    finally:
        proc.kill()
    assert proc.returncode == -9
    wait_for(lambda: not pid_alive(child_pid), 5, "the child that ignores SIGTERM killed with its group")


def test_early_exit_reports_log_tail(tmp_path: Path) -> None:
    proc = start_process(py("print('bad flag --x'); raise SystemExit(2)"), log_path=tmp_path / "p.log", name="quitter")
    with pytest.raises(ProcessExitedError, match="exit code 2") as info:
        proc.wait_ready_file(tmp_path / "never.json", 10)
    assert "bad flag --x" in str(info.value)
    proc.stop()


def test_ready_timeout(tmp_path: Path) -> None:
    proc = start_process(py("import time; time.sleep(30)"), log_path=tmp_path / "p.log", name="sleeper")
    try:
        with pytest.raises(ReadyTimeoutError, match="within 0.3s"):
            proc.wait_ready_file(tmp_path / "never.json", 0.3)
    finally:
        proc.stop(grace_sec=2)


async def test_async_http_ready_and_stop(tmp_path: Path) -> None:
    port = free_port("127.0.0.1")
    proc = start_process([sys.executable, "-m", "http.server", "--bind", "127.0.0.1", str(port)],
                         log_path=tmp_path / "http.log", name="http", cwd=tmp_path)
    try:
        await proc.await_http_ok(f"http://127.0.0.1:{port}/", 15)
        assert await proc.await_exit(0.2) is None
    finally:
        code = await proc.astop(grace_sec=5)
    assert code is not None and not group_alive(proc.pid)
    assert await proc.await_exit(1) == code


def test_sync_http_ready_and_stop_by_pid_only(tmp_path: Path) -> None:
    port = free_port("127.0.0.2")
    proc = start_process([sys.executable, "-m", "http.server", "--bind", "127.0.0.2", str(port)],
                         log_path=tmp_path / "http.log", name="http", cwd=tmp_path)
    try:
        proc.wait_http_ok(f"http://127.0.0.2:{port}/", 15)
        stop_process_group(proc.pid, grace_sec=5)  # as a supervisor that only knows the pid would
    finally:
        proc.stop(grace_sec=2)
    assert proc.returncode is not None


def test_free_ports_are_distinct_and_bindable() -> None:
    ports = free_ports(5, "127.0.0.3")
    assert len(set(ports)) == 5
    with socket.socket() as s:
        s.bind(("127.0.0.3", ports[0]))
    with pytest.raises(ValueError):
        free_ports(0)
    assert free_port() > 0
