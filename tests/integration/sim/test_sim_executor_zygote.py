"""Executors forked by the executor zygote behave as spawned ones: they serve, their exit status
reaches their engine, they end with their API process, and an engine whose zygote cannot be reached
spawns its executor."""

from __future__ import annotations

import os
import secrets
import signal
import socket
from collections.abc import Callable
from pathlib import Path

import pytest

from motor.common.process import read_json_file
from motor.sim.cluster import SimCluster
from motor.testing.waits import wait_for

pytestmark = pytest.mark.timeout(120)

def _parent(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(status.split("PPid:", 1)[1].split()[0])


def _gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


def _executor_pid(cluster: SimCluster, rank: int = 0) -> int:
    return int((read_json_file(cluster.ranks[rank].ready_file) or {})["executor_pid"])


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, stop_at_end: Callable[[SimCluster], SimCluster]) -> SimCluster:
    return stop_at_end(SimCluster.start(tmp_path_factory.mktemp("zygote"), 2))


def _address(cluster: SimCluster) -> str:
    return cluster.extra_args[cluster.extra_args.index("--executor-zygote") + 1]


def _single(run_dir: Path, zygote_address: str, *args: str) -> SimCluster:
    """One rank whose executor the zygote at `zygote_address` forks."""
    return SimCluster.start(run_dir, 1, extra_args=["--dp-master-port", "0", "--executor-zygote", zygote_address, *args],
                            zygote=False)


def test_every_executor_is_a_child_of_the_zygote_and_the_group_serves(cluster: SimCluster) -> None:
    assert cluster.zygote is not None
    for rank in range(2):
        assert _parent(_executor_pid(cluster, rank)) == cluster.zygote.pid
    assert cluster.client(0).complete("forked", 4).status == 200


def test_a_malformed_request_is_refused_and_the_zygote_serves_the_next(
        cluster: SimCluster, tmp_path: Path, stop_at_end: Callable[[SimCluster], SimCluster]) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.connect("\0" + _address(cluster)[1:])
        sock.sendall(b"\x00\x00\x00\x05hello")  # no descriptors
        try:
            answer = sock.recv(4)
        except ConnectionResetError:  # closed with the body unread
            answer = b""
        assert answer == b""  # closed unanswered
    wait_for(lambda: "a malformed request (4-byte header, 0 descriptors)" in (cluster.run_dir / "executor-zygote.log")
             .read_text(), 10, "the refusal logged")
    single = stop_at_end(_single(tmp_path, _address(cluster)))
    assert _parent(_executor_pid(single)) == cluster.zygote.pid


def test_a_stopped_executor_is_killed_once_its_api_process_is_gone(
        cluster: SimCluster, tmp_path: Path, stop_at_end: Callable[[SimCluster], SimCluster]) -> None:
    # A stopped executor reads no EOF from its pipe; the zygote sees the API process's end close.
    single = stop_at_end(_single(tmp_path, _address(cluster)))
    executor = _executor_pid(single)
    os.kill(executor, signal.SIGSTOP)
    os.kill(single.ranks[0].proc.pid, signal.SIGKILL)
    wait_for(lambda: _gone(executor), 30, f"executor {executor} gone with its API process")


def test_an_unreachable_zygote_leaves_the_engine_to_spawn_its_executor(
        tmp_path: Path, stop_at_end: Callable[[SimCluster], SimCluster]) -> None:
    address = f"@motor-test-no-zygote-{secrets.token_hex(6)}"
    single = stop_at_end(_single(tmp_path, address))
    engine = single.ranks[0].proc.pid
    assert _parent(_executor_pid(single)) == engine
    log = (tmp_path / "rank0.log").read_text()
    assert f"the executor zygote at {address!r}" in log and "spawning the executor instead" in log


def test_a_killed_executor_reports_its_signal_to_its_engine(
        cluster: SimCluster, tmp_path: Path, stop_at_end: Callable[[SimCluster], SimCluster]) -> None:
    single = stop_at_end(_single(tmp_path, _address(cluster), "--enable-fault-tolerance", "--enable-fault-injection"))
    client = single.client(0)
    executor = _executor_pid(single)
    assert client.inject("executor_death").status == 200
    wait_for(client.entry, 30, "rank 0 dead", until=lambda e: e["status"] == "dead")
    assert f"status dead: executor process {executor} exited (killed by SIGKILL)" in \
        (tmp_path / "rank0.log").read_text()
