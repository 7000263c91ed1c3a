"""Fault injection and the ``retry`` instruction on 2-rank groups. Checks that leave the group as
they found it share one group; every test that breaks its group gets a fresh one, so every test
passes alone and in any order.

The group serves the FT API under vLLM 0.33.0's prefix ``/fault_tolerance`` and uses a short
recovery timeout so that "a peer never joins" resolves in seconds.
"""

from __future__ import annotations

import os
import signal
import socket
import time
import urllib.error
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from motor.common.process import read_json_file
from motor.sim.client import SimClient
from motor.sim.cluster import SimCluster
from motor.testing.waits import wait_for

pytestmark = pytest.mark.timeout(120)  # per test, module fixtures included

HOSTS = ["127.0.0.1", "127.0.0.2"]
PREFIX = "/fault_tolerance"
RECOVERY_TIMEOUT_SEC = 4.0
COLLECTIVE_TIMEOUT_SEC = 3.0
REPO_ROOT = Path(__file__).resolve().parents[3]


def start_group(run_dir: Path, zygote: str) -> SimCluster:
    return SimCluster.start(
        run_dir, 2, hosts=HOSTS, cwd=REPO_ROOT, ready_timeout_sec=90, zygote=zygote,
        extra_args=[
            "--enable-fault-tolerance", "--enable-fault-injection", "--ft-api-prefix", PREFIX,
            "--ft-dialect", "rfc", "--diagnosing-sec", "0",  # asserts ft_state, unhealthy at once
            "--num-experts", "2", "--num-redundant-experts", "2",
            "--per-token-latency-sec", "0.005", "--collective-timeout-sec", str(COLLECTIVE_TIMEOUT_SEC),
            "--engine-recovery-timeout-sec", str(RECOVERY_TIMEOUT_SEC),
        ],
    )


@pytest.fixture(scope="module")
def shared_clients(tmp_path_factory: pytest.TempPathFactory, executor_zygote: str) -> Iterator[list[SimClient]]:
    """A group for the checks that leave it healthy."""
    c = start_group(tmp_path_factory.mktemp("sim-faults-shared"), executor_zygote)
    try:
        yield [SimClient(r.url, ft_prefix=PREFIX) for r in c.ranks]
    finally:
        c.stop(grace_sec=5)


@pytest.fixture
def cluster(tmp_path: Path, executor_zygote: str) -> Iterator[SimCluster]:
    """A fresh group for a test that breaks it."""
    c = start_group(tmp_path / "sim-faults", executor_zygote)
    try:
        yield c
    finally:
        c.stop(grace_sec=5)


@pytest.fixture
def clients(cluster: SimCluster) -> list[SimClient]:
    return [SimClient(r.url, ft_prefix=PREFIX) for r in cluster.ranks]


def wait_entry(client: SimClient, pred, what: str, timeout_sec: float = 20.0) -> dict[str, Any]:
    # An engine in the middle of a fault may not answer yet: that is "not yet", not a failure.
    return wait_for(client.entry, timeout_sec, what, until=pred, ignoring=Exception)


def make_both_unhealthy(clients: list[SimClient]) -> None:
    for c in clients:
        assert c.inject("unhealthy", reason="test setup").status == 200
    for c in clients:
        wait_entry(c, lambda e: e["status"] == "unhealthy", "unhealthy")


def retry_both(clients: list[SimClient], request_id: str) -> None:
    for c in clients:
        res = c.apply("retry", request_id)
        assert res.status == 202 and res.body["request_id"] == request_id, res.body


def test_prefix_is_configurable(shared_clients: list[SimClient]) -> None:
    assert shared_clients[0].request("GET", "/v1/fault_tolerance/status").status == 404
    assert shared_clients[0].status()["engines"] == [{"id": 0, "status": "healthy"}]


@pytest.mark.parametrize(
    "body, named",
    [
        ({"fault": "meteor"}, "unknown fault 'meteor'"),
        ({"fault": "hang_status", "duration_sec": -1}, "duration_sec must be a number > 0, got -1"),
        ({"fault": "slow_rebuild"}, "needs 'delay_sec'"),
        ({"fault": "slow_rebuild", "delay_sec": "1"}, "got '1'"),
        ({"fault": "unhealthy", "reason": ""}, "reason must be a non-blank string"),
    ],
)
def test_bad_inject_bodies_get_400(shared_clients: list[SimClient], body: dict[str, Any], named: str) -> None:
    res = shared_clients[0].request("POST", "/motor/admin/inject", body)
    assert res.status == 400 and named in res.body["detail"], res.body
    assert shared_clients[0].entry()["status"] == "healthy"


def test_hang_status_for_a_window_then_until_clear(shared_clients: list[SimClient]) -> None:
    assert shared_clients[1].inject("hang_status", duration_sec=1.5).status == 200
    with pytest.raises((TimeoutError, socket.timeout, urllib.error.URLError)):
        shared_clients[1].status(timeout_sec=0.5)
    assert shared_clients[1].request("GET", "/health", timeout_sec=2).status == 200
    assert shared_clients[1].complete("still serving", 2).status == 200
    wait_for(lambda: shared_clients[1].status(timeout_sec=0.5) is not None, 5, "status answers again",
             ignoring=Exception)
    assert shared_clients[1].inject("hang_status").status == 200
    with pytest.raises((TimeoutError, socket.timeout, urllib.error.URLError)):
        shared_clients[1].status(timeout_sec=0.5)
    assert shared_clients[1].inject("clear").status == 200
    assert shared_clients[1].status(timeout_sec=2)["engines"][0]["status"] == "healthy"


def test_hung_peer_times_out_the_collective(clients: list[SimClient], cluster: SimCluster) -> None:
    executor_pid = int((read_json_file(cluster.ranks[1].ready_file) or {})["executor_pid"])
    os.kill(executor_pid, signal.SIGSTOP)
    try:
        started = time.monotonic()
        res = clients[0].complete("nobody answers", 2, timeout_sec=30)
        elapsed = time.monotonic() - started
        assert res.status == 503, res.body
        assert elapsed >= COLLECTIVE_TIMEOUT_SEC * 0.9
        e0 = wait_entry(clients[0], lambda e: e["status"] == "unhealthy" and "mask" in e, "rank 0 unhealthy")
        assert "Timed out" in e0["fault_info"] and e0["mask"] == [1]
        assert clients[1].entry() == {"id": 1, "status": "healthy"}  # its API is up; it knows nothing yet
    finally:
        os.kill(executor_pid, signal.SIGCONT)
    # Woken up, it joins the pending wave and meets the torn-down group.
    wait_entry(clients[1], lambda e: e["status"] == "unhealthy", "rank 1 unhealthy after SIGCONT")
    retry_both(clients, "retry-0")
    for c in clients:
        wait_entry(c, lambda e: e["status"] == "healthy" and "ft_state" not in e, "healthy after retry")


def test_injected_unhealthy_then_traffic_then_retry(clients: list[SimClient]) -> None:
    assert clients[0].inject("unhealthy", reason="link flap").status == 200
    e0 = clients[0].entry()
    assert e0["status"] == "unhealthy" and e0["fault_info"] == "injected: link flap"
    assert clients[1].entry() == {"id": 1, "status": "healthy"}
    assert clients[0].complete("x", 2).status == 503
    assert clients[1].complete("x", 2).status == 503  # its first collective meets a torn-down peer
    e1 = wait_entry(clients[1], lambda e: e["status"] == "unhealthy" and "mask" in e, "rank 1 unhealthy")
    assert e1["mask"] == [0]
    retry_both(clients, "retry-1")
    for rank, c in enumerate(clients):
        e = wait_entry(c, lambda e: e["status"] == "healthy" and "ft_state" not in e, "healthy after retry")
        assert e == {"id": rank, "status": "healthy", "last_ft_request_id": "retry-1"}
        state = c.admin_state()
        assert state["group"]["members"] == [0, 1] and state["group"]["generation"] == 1  # one rebuild
        assert state["group"]["tag"] == "retry-1"
        assert c.complete("after retry", 3).status == 200


def test_fail_next_apply(clients: list[SimClient]) -> None:
    assert clients[1].inject("fail_next_apply", reason="disk on fire").status == 200
    make_both_unhealthy(clients)
    retry_both(clients, "retry-2")
    e1 = wait_entry(clients[1], lambda e: e.get("ft_state") == "failed", "rank 1 failed", 5)
    assert e1["ft_error"] == "injected failure: disk on fire" and e1["last_ft_request_id"] == "retry-2"
    e0 = wait_entry(clients[0], lambda e: e.get("ft_state") == "failed", "rank 0 failed", RECOVERY_TIMEOUT_SEC + 10)
    assert e0["status"] == "unhealthy" and e0["last_ft_request_id"] == "retry-2"
    assert "dp ranks [1] did not join" in e0["ft_error"]


def test_slow_rebuild(clients: list[SimClient]) -> None:
    assert clients[0].inject("slow_rebuild", delay_sec=1.0).status == 200
    make_both_unhealthy(clients)
    started = time.monotonic()
    retry_both(clients, "retry-3")
    for c in clients:
        wait_entry(c, lambda e: e["status"] == "healthy" and "ft_state" not in e, "healthy after slow rebuild")
    assert time.monotonic() - started >= 1.0
    assert clients[0].inject("clear").body["injections"]["slow_rebuild_sec"] == 0.0


def test_store_host_dies_while_idle_then_scale_down_to_one_rank(cluster: SimCluster, clients: list[SimClient]) -> None:
    # A response is sent before the wave's closing all-reduce: wait until the wave is over.
    wait_for(lambda: not any(c.admin_state()["wave"]["active"] for c in clients), 10, "no wave active",
             ignoring=Exception)
    assert clients[0].inject("executor_death").status == 200  # rank 0 hosts the DP store
    wait_entry(clients[0], lambda e: e["status"] == "dead", "rank 0 dead")
    # Idle: rank 1's store polls fail, which must not make it unhealthy. The executor counts them only
    # in its log (no status field), so the wait is for its warning about the first failed poll.
    log = cluster.ranks[1].proc.log_path
    wait_for(lambda: "polls failed), staying healthy" in log.read_text(errors="replace"), 20,
             "rank 1's warning about a failed idle store poll", ignoring=Exception)
    assert clients[1].entry() == {"id": 1, "status": "healthy"}
    assert clients[1].complete("wake up", 2).status == 503
    e1 = wait_entry(clients[1], lambda e: e["status"] == "unhealthy", "rank 1 unhealthy")
    assert "cannot start DP wave" in e1["fault_info"]
    res = clients[1].scale_down("down-to-one", [0], HOSTS[1], clients[1].admin_state()["master"]["port"])
    assert res.status == 202
    e1 = wait_entry(clients[1], lambda e: e["status"] == "healthy" and "ft_state" not in e, "rank 1 alone, healthy")
    assert e1["last_ft_request_id"] == "down-to-one"
    state = clients[1].admin_state()
    assert state["group"]["members"] == [1] and state["group"]["is_store_server"]
    assert state["placement"]["by_rank"] == {"1": [0, 1]}
    assert clients[1].complete("alone", 3).status == 200


def test_stall_next_apply(clients: list[SimClient]) -> None:
    assert clients[1].inject("stall_next_apply").status == 200
    assert clients[1].inject("unhealthy", reason="test setup").status == 200
    assert clients[1].apply("retry", "retry-4").status == 202
    wait_entry(clients[1], lambda e: e.get("ft_state") == "recovering" and e.get("last_ft_request_id") == "retry-4",
               "rank 1 recovering for retry-4")
    # Kept sleep: the check is that the recovery timeout does NOT end a stalled apply, and nothing
    # shows that timeout passing; once past it (and a margin), the recovery must still be running.
    time.sleep(RECOVERY_TIMEOUT_SEC + 1.0)
    e1 = clients[1].entry()
    assert e1["ft_state"] == "recovering" and e1["last_ft_request_id"] == "retry-4"
    # Another request id while one recovery runs leaves the running one in charge of status.
    assert clients[1].apply("retry", "retry-5").status == 202
    assert clients[1].entry() == e1
    assert clients[1].complete("x", 1).status == 503


def test_kill_process(clients: list[SimClient], cluster: SimCluster) -> None:
    rank1 = cluster.ranks[1]
    executor_pid = (read_json_file(rank1.ready_file) or {}).get("executor_pid")
    assert clients[1].inject("kill_process").status == 200
    assert rank1.proc.wait_exit(10) == -9
    with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
        clients[1].status(timeout_sec=1)

    def executor_gone() -> bool:
        try:
            with open(f"/proc/{executor_pid}/stat") as fh:
                return fh.read().rsplit(")", 1)[-1].split()[0] == "Z"
        except FileNotFoundError:
            return True

    wait_for(executor_gone, 10, "executor of the killed rank gone", ignoring=Exception)
    assert clients[0].entry()["status"] == "healthy"  # the other process's API is unaffected (idle)
