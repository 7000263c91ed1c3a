"""SIGTERM to a process that holds a LocalCluster: the cluster is torn down (every child process
group gone) and the holder exits 143; a second start of a cluster is refused without touching the
first one's processes. Also the deferral of a SIGTERM that arrives during a teardown."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path

import psutil
import pytest

from motor.common.process import group_alive, tail_file
from motor.launch.shutdown import SIGTERM_EXIT_STATUS

pytestmark = pytest.mark.timeout(300)

HOLDER = Path(__file__).with_name("cluster_holder.py")
READY_TIMEOUT_SEC = 240.0
EXIT_TIMEOUT_SEC = 90.0


def live_groups(pgids: set[int]) -> list[int]:
    return sorted(g for g in pgids if group_alive(g))


def live_pids(pids: set[int]) -> list[int]:
    alive = []
    for pid in sorted(pids):
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                alive.append(pid)
        except psutil.NoSuchProcess:
            pass
    return alive


class Holder:
    def __init__(self, proc: asyncio.subprocess.Process, log: Path) -> None:
        self.proc, self.log = proc, log
        self.pgids: set[int] = {proc.pid}

    def descendants(self) -> set[int]:
        pids = {p.pid for p in psutil.Process(self.proc.pid).children(recursive=True)}
        for pid in pids:
            try:
                self.pgids.add(os.getpgid(pid))
            except ProcessLookupError:
                pass
        return pids

    async def line(self, timeout_sec: float) -> dict:
        try:
            raw = await asyncio.wait_for(self.proc.stdout.readline(), timeout_sec)  # type: ignore[union-attr]
        except TimeoutError:
            raise AssertionError(f"holder printed nothing within {timeout_sec:g}s; log:\n{tail_file(self.log)}") from None
        assert raw, f"holder exited with {self.proc.returncode} before the cluster served; log:\n{tail_file(self.log)}"
        return json.loads(raw)


@pytest.fixture
async def holder(tmp_path: Path) -> AsyncIterator[Holder]:
    log = tmp_path / "holder.log"
    err = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, str(HOLDER), str(tmp_path / "run"), stdout=asyncio.subprocess.PIPE, stderr=err,
            start_new_session=True)
    finally:
        os.close(err)
    h = Holder(proc, log)
    try:
        yield h
    finally:
        # Whatever happened: every process group seen, the holder's included, killed by id.
        for pgid in sorted(h.pgids):
            try:
                os.killpg(pgid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        if proc.returncode is None:
            await asyncio.wait_for(proc.wait(), 10)


async def test_sigterm_tears_the_held_cluster_down_and_exits_nonzero(holder: Holder) -> None:
    ready = await holder.line(READY_TIMEOUT_SEC)
    assert ready["serving"] == [0, 1]
    assert "was already started" in ready["second_start"] and "create a new LocalCluster" in ready["second_start"]
    children = holder.descendants()
    # coordinator, controller, one NodeManager and its two engines, each in its own process group
    assert len(children) >= 5 and len(holder.pgids) >= 6, (children, holder.pgids)
    assert live_pids(children) == sorted(children)  # the refused second start stopped nothing

    holder.proc.send_signal(signal.SIGTERM)
    try:
        code = await asyncio.wait_for(holder.proc.wait(), EXIT_TIMEOUT_SEC)
    except TimeoutError:
        raise AssertionError(f"holder still running {EXIT_TIMEOUT_SEC:g}s after SIGTERM; "
                             f"log:\n{tail_file(holder.log)}") from None
    assert code == SIGTERM_EXIT_STATUS, tail_file(holder.log)
    assert live_pids(children) == []
    assert live_groups(holder.pgids) == []


DEFERRAL = textwrap.dedent("""
    import os, signal, sys
    from motor.launch.shutdown import Terminated, exit_on_sigterm, sigterm_deferred
    with exit_on_sigterm():
        try:
            with sigterm_deferred():
                os.kill(os.getpid(), signal.SIGTERM)
                print("teardown ran to its end", flush=True)
        except Terminated:
            print("terminated after the teardown", flush=True)
            raise
        print("never reached", flush=True)
""")

IMMEDIATE = textwrap.dedent("""
    import os, signal, time
    from motor.launch.shutdown import exit_on_sigterm
    with exit_on_sigterm():
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
            print("never reached", flush=True)
        finally:
            print("finally ran", flush=True)
""")


@pytest.mark.parametrize(("script", "expected"), [
    (DEFERRAL, ["teardown ran to its end", "terminated after the teardown"]),
    (IMMEDIATE, ["finally ran"]),
])
async def test_sigterm_becomes_an_exit_that_runs_cleanup(script: str, expected: list[str]) -> None:
    proc = await asyncio.create_subprocess_exec(sys.executable, "-c", script, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 30)
    assert out.decode().splitlines() == expected, err.decode()
    assert proc.returncode == SIGTERM_EXIT_STATUS, err.decode()
