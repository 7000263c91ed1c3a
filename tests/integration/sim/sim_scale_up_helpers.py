"""Shared by the scale_up engine tests: 4-rank groups on 127.0.0.150..157, joiners started in place
of a removed rank, and status watching over every participant."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from motor.common.ports import free_port
from motor.sim.client import SimClient
from motor.sim.cluster import SimCluster
from motor.sim.toy_model import expected_completion
from motor.testing.waits import wait_for

REPO_ROOT = Path(__file__).resolve().parents[3]
WAIT_SEC = 20.0
VLLM_HOSTS = ["127.0.0.150", "127.0.0.151", "127.0.0.152", "127.0.0.153"]
RFC_HOSTS = ["127.0.0.154", "127.0.0.155", "127.0.0.156", "127.0.0.157"]
# 4 logical experts in 8 slots, 2 per rank: removing ranks 1 and 0 leaves every expert a replica.
BASE_ARGS = [
    "--enable-fault-tolerance", "--enable-fault-injection",
    "--num-experts", "4", "--num-redundant-experts", "4",
    "--per-token-latency-sec", "0.005", "--collective-timeout-sec", "3", "--engine-recovery-timeout-sec", "20",
]

Entry = dict[str, Any]


def start_group(run_dir: Path, hosts: Sequence[str], extra_args: Sequence[str]) -> SimCluster:
    return SimCluster.start(run_dir, len(hosts), hosts=hosts, cwd=REPO_ROOT, ready_timeout_sec=90,
                            extra_args=[*BASE_ARGS, *extra_args])


def entries(clients: Sequence[SimClient], ranks: Sequence[int]) -> dict[int, Entry]:
    return {r: clients[r].entry() for r in ranks}


def wait_entries(clients: Sequence[SimClient], ranks: Sequence[int], pred: Callable[[Entry], bool],
                 what: str, timeout_sec: float = WAIT_SEC) -> dict[int, Entry]:
    # A rank in the middle of a rebuild may not answer yet: that is "not yet", not a failure.
    return wait_for(lambda: entries(clients, ranks), timeout_sec, what,
                    until=lambda seen: all(pred(seen[r]) for r in ranks), ignoring=Exception)


def status_is(status: str) -> Callable[[Entry], bool]:
    return lambda e: e["status"] == status


def healthy_clean(e: Entry) -> bool:
    return e["status"] == "healthy" and "ft_state" not in e and "ft_error" not in e


def kill_and_scale_down(clients: Sequence[SimClient], dead: int, survivors: Sequence[int], removed: list[int],
                        master_ip: str, request_id: str) -> None:
    """Rank ``dead``'s executor dies; traffic makes the survivors unhealthy (an idle survivor of the
    rfc dialect notices nothing while the store host's death only shows to its idle polls); they
    scale down."""
    assert clients[dead].inject("executor_death").status == 200
    wait_entries(clients, [dead], status_is("dead"), f"rank {dead} dead")
    for r in survivors:
        clients[r].complete("traffic after the death", 2)
    wait_entries(clients, survivors, status_is("unhealthy"), "survivors unhealthy")
    port = free_port(master_ip)
    for r in survivors:
        res = clients[r].scale_down(request_id, removed, master_ip, port)
        assert res.status == 202, res.body
    wait_entries(clients, survivors, healthy_clean, f"{request_id}: survivors healthy")


def pids(clients: Sequence[SimClient], ranks: Sequence[int]) -> dict[int, tuple[int, int]]:
    return {r: (s["pid"], s["executor_pid"]) for r in ranks for s in [clients[r].admin_state()]}


def assert_grown_group(clients: Sequence[SimClient], request_id: str, master: dict[str, Any]) -> None:
    """Every rank is in one 4-rank group formed by the round, its experts placed over all four."""
    for r in range(4):
        state = clients[r].admin_state()
        group = state["group"]
        assert (group["tag"], group["members"], group["size"], group["dense_rank"]) == (
            request_id, [0, 1, 2, 3], 4, r), group
        assert group["master"] == master and group["is_store_server"] == (r == 0), group
        assert state["removed_dp_ranks"] == [] and state["members"] == [0, 1, 2, 3]
        assert sorted(state["placement"]["by_rank"]) == ["0", "1", "2", "3"] and len(state["local_experts"]) == 2
        assert not state["standby"] and state["serving"]


def assert_every_rank_serves_in_lockstep(clients: Sequence[SimClient]) -> None:
    """Requests on every rank at once: one wave, every step an all-reduce over the 4-rank group."""
    results: dict[int, Any] = {}

    def run(rank: int) -> None:
        results[rank] = clients[rank].complete(f"grown {rank}", 12, timeout_sec=30)

    threads = [threading.Thread(target=run, args=(r,)) for r in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(40)
    for r in range(4):
        assert results[r].status == 200, results[r].body
        assert results[r].body["motor_dp_rank"] == r
        assert results[r].body["choices"][0]["text"] == expected_completion(f"grown {r}", 12)


def assert_missing_rank_failed_the_round(failed: dict[int, Entry], missing: int, request_id: str) -> None:
    """Rank 0 serves the round's store and its check-in window ends first: it names the rank that
    never came; the others fail on the same window or on the store closing with it."""
    assert f"dp ranks [{missing}] did not join DP group '{request_id}' (members [0, 1, 2, 3])" in (
        failed[0]["ft_error"]), failed
    for r, e in failed.items():
        assert e["status"] == "unhealthy" and e["last_ft_request_id"] == request_id, failed
        assert e["ft_error"].startswith("scale_up failed: ") or r == missing, failed
