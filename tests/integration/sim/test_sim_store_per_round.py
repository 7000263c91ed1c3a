"""The reference engine forms every scale-down round's DP group through a fresh TCPStore at the address
the apply names, while its previous round's store server still holds its port (as a real engine's
does): a round that repeats the previous round's port cannot bind it and fails, one with a new port
succeeds. Ranks on 127.0.0.1..4 emulate pods; rank 0 stays the store master throughout."""

from __future__ import annotations

from typing import Any

import pytest

from motor.common.ports import free_port
from motor.sim.client import SimClient
from motor.sim.cluster import SimCluster
from motor.testing.waits import wait_for

from .sim_vllm_helpers import HOSTS, REPO_ROOT

pytestmark = pytest.mark.timeout(180)

WAIT_SEC = 20.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, stop_at_end) -> SimCluster:
    return stop_at_end(SimCluster.start(
        tmp_path_factory.mktemp("sim-store-per-round"), 4, hosts=HOSTS, cwd=REPO_ROOT, ready_timeout_sec=90,
        extra_args=[
            "--enable-fault-tolerance", "--enable-fault-injection", "--ft-dialect", "rfc", "--diagnosing-sec", "0",
            "--num-experts", "2", "--num-redundant-experts", "6", "--per-token-latency-sec", "0.005",
            "--collective-timeout-sec", "3", "--engine-recovery-timeout-sec", "20",
        ],
    ))


def wait_entries(clients: list[SimClient], ranks: list[int], pred, what: str) -> dict[int, dict[str, Any]]:
    """The ranks' status entries once every one satisfies `pred` (a late wait shows the last ones)."""
    return wait_for(lambda: {r: clients[r].entry() for r in ranks}, WAIT_SEC, what, interval_sec=0.05,
                    until=lambda seen: all(pred(seen[r]) for r in ranks))


def kill_under_traffic(clients: list[SimClient], dead: int, survivors: list[int]) -> None:
    assert clients[dead].inject("executor_death").status == 200
    wait_entries(clients, [dead], lambda e: e["status"] == "dead", f"rank {dead} dead")
    assert clients[survivors[0]].complete("traffic after the death", 2).status == 503
    wait_entries(clients, survivors, lambda e: e["status"] == "unhealthy", "survivors unhealthy")


def test_a_round_repeating_the_previous_rounds_store_port_cannot_bind_it(clients: list[SimClient]) -> None:
    port = free_port(HOSTS[0])
    kill_under_traffic(clients, 3, [0, 1, 2])
    for rank in (0, 1, 2):
        assert clients[rank].scale_down("round-1", [3], HOSTS[0], port).status == 202
    wait_entries(clients, [0, 1, 2], lambda e: e["status"] == "healthy" and "ft_state" not in e, "round 1 healthy")
    assert clients[0].admin_state()["group"]["master"] == {"ip": HOSTS[0], "port": port}

    kill_under_traffic(clients, 2, [0, 1])
    for rank in (0, 1):
        assert clients[rank].scale_down("round-2", [2, 3], HOSTS[0], port).status == 202
    seen = wait_entries(clients, [0], lambda e: e.get("ft_state") == "failed", "round 2 failed on the master")
    assert f"cannot bind DP store at {HOSTS[0]}:{port}" in seen[0]["ft_error"], seen
