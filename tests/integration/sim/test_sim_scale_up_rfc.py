"""Elastic scale_up on real engine processes in the RFC-era dialect, one story (it passes alone and in
any order): ranks 1 and then 0 die and are scaled down (the store master moves to rank 2); joiners
for both come back in one round, whose store rank 0 (a joiner) serves; the participants read
(unhealthy, recovering) from the 202 on, then (healthy, -); an injected failure reads
(unhealthy, failed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from motor.common.ports import free_port
from motor.sim.cluster import SimCluster

from .sim_scale_up_helpers import (
    RFC_HOSTS as HOSTS,
    assert_every_rank_serves_in_lockstep,
    assert_grown_group,
    assert_missing_rank_failed_the_round,
    kill_and_scale_down,
    pids,
    start_group,
    wait_entries,
)

pytestmark = pytest.mark.timeout(300)

ARGS = ["--ft-dialect", "rfc", "--diagnosing-sec", "0", "--engine-recovery-timeout-sec", "6"]


def done(request_id: str):
    return lambda e: e["status"] == "healthy" and "ft_state" not in e and e.get("last_ft_request_id") == request_id


def _two_removed_ranks_come_back_in_one_round(cluster: SimCluster) -> None:
    clients = [cluster.client(r) for r in range(4)]
    kill_and_scale_down(clients, 1, [0, 2, 3], [1], HOSTS[0], "down-1")
    kill_and_scale_down(clients, 0, [2, 3], [0, 1], HOSTS[2], "down-2")
    assert clients[3].admin_state()["group"]["master"]["ip"] == HOSTS[2]
    cluster.start_joiner(0)
    cluster.start_joiner(1)
    clients = [cluster.client(r) for r in range(4)]
    assert all(clients[r].entry() == {"id": r, "status": "healthy"} for r in (0, 1))
    before = pids(clients, (2, 3))
    port = free_port(HOSTS[0])  # the grown group's lowest rank, a joiner, serves the fresh store
    for r in (2, 3, 1, 0):
        res = clients[r].scale_up("up-1", [1, 0], [], HOSTS[0], port)
        assert res.status == 202, res.body
        e = clients[r].entry()
        assert (e["status"], e["ft_state"], e["last_ft_request_id"]) == ("unhealthy", "recovering", "up-1"), e
    wait_entries(clients, range(4), done("up-1"), "4-rank group healthy")
    assert pids(clients, (2, 3)) == before
    assert_grown_group(clients, "up-1", {"ip": HOSTS[0], "port": port})
    assert_every_rank_serves_in_lockstep(clients)  # idle ranks start a wave through the new store


def _an_injected_failure_reads_unhealthy_failed(cluster: SimCluster) -> None:
    clients = [cluster.client(r) for r in range(4)]
    kill_and_scale_down(clients, 3, [0, 1, 2], [3], HOSTS[0], "down-3")
    cluster.start_joiner(3)
    clients = [cluster.client(r) for r in range(4)]
    assert clients[1].inject("fail_next_apply").status == 200
    port = free_port(HOSTS[0])
    for r in (0, 1, 2, 3):
        assert clients[r].scale_up("up-2", [3], [], HOSTS[0], port).status == 202
    failed = wait_entries(clients, range(4), lambda e: e.get("ft_state") == "failed", "every participant failed")
    assert failed[1]["ft_error"] == "injected failure: injected apply failure"
    assert_missing_rank_failed_the_round(failed, 1, "up-2")


def test_two_ranks_removed_one_after_the_other_come_back_together(tmp_path: Path) -> None:
    cluster = start_group(tmp_path / "rfc", HOSTS, ARGS)
    try:
        _two_removed_ranks_come_back_in_one_round(cluster)
        _an_injected_failure_reads_unhealthy_failed(cluster)
    finally:
        cluster.stop(grace_sec=5)
