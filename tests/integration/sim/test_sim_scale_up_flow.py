"""Elastic scale_up on real engine processes in vLLM's dialect, one story whose steps build on each
other (so it is one test; it passes alone and in any order): rank 1's executor dies and the
survivors scale down; a joiner for rank 1 waits healthy without serving; refusals are 400s that
leave everyone ready; the round re-admits rank 1 without restarting a survivor (one survivor's
apply pauses the others at one batch boundary before their own applies come); then failed rounds:
an injected apply failure, a survivor whose apply never comes, and a no vote (survivors dead)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from motor.common.ports import free_port
from motor.sim.cluster import SimCluster
from motor.sim.ft_state import RECOVERY_FAILED_INFO
from motor.sim.toy_model import expected_completion
from motor.testing.waits import wait_for

from .sim_scale_up_helpers import (
    VLLM_HOSTS as HOSTS,
    assert_every_rank_serves_in_lockstep,
    assert_grown_group,
    assert_missing_rank_failed_the_round,
    healthy_clean,
    kill_and_scale_down,
    pids,
    start_group,
    status_is,
    wait_entries,
)

pytestmark = pytest.mark.timeout(400)

CHECKIN_SEC = 6.0
ARGS = ["--ft-dialect", "vllm", "--diagnosing-sec", "0.3", "--scale-down-checkin-sec", f"{CHECKIN_SEC:g}",
        "--idle-step-interval-sec", "0.05"]
SURVIVORS = (0, 2, 3)
EVERYONE = (0, 2, 3, 1)


def _joiner_is_healthy_but_serves_nothing(cluster: SimCluster) -> None:
    cluster.start_joiner(1)
    joiner = cluster.client(1)
    assert joiner.status() == {"schema_version": 1, "total_engines": 1, "engines": [{"id": 1, "status": "healthy"}],
                               "supported_instructions": ["retry", "scale_down", "scale_up"]}
    refused = joiner.complete("before the round", 2)
    assert refused.status == 503 and "started with --join" in refused.body["error"]["message"], refused.body
    assert joiner.request("GET", "/health").status == 200
    state = joiner.admin_state()
    assert (state["group"], state["members"], state["standby"], state["serving"]) == (None, [], True, False)


def _refusals_are_400s_that_leave_everyone_ready(cluster: SimCluster) -> None:
    clients = [cluster.client(r) for r in range(4)]
    port = free_port(HOSTS[0])
    for rank, added, named in [(2, [2, 1], "names this engine's own rank 2"),
                               (0, [3, 1], "names ranks [3] that are in the DP group now (members [0, 2, 3])"),
                               (1, [0], "does not name this engine's own rank 1")]:
        res = clients[rank].scale_up("bad", added, [], HOSTS[0], port)
        assert res.status == 400 and named in res.body["detail"], res.body
    res = clients[3].apply("scale_up", "bad", {"added_dp_ranks": [1], "removed_dp_ranks": []})
    assert res.status == 400 and "params.dp_master_ip is required" in res.body["detail"], res.body
    assert all(clients[r].entry() == {"id": r, "status": "healthy"} for r in range(4))


def _scale_up_re_admits_rank_1(cluster: SimCluster) -> None:
    clients = [cluster.client(r) for r in range(4)]
    before = pids(clients, SURVIVORS)
    port = free_port(HOSTS[0])
    # A request the drain left running on rank 3 (every survivor steps for it).
    outcome: dict[str, Any] = {}
    stream = threading.Thread(target=lambda: outcome.setdefault("events", clients[3].stream(
        "/v1/completions", {"prompt": "long", "max_tokens": 2000}, timeout_sec=60)))
    stream.start()
    wait_for(lambda: clients[3].admin_state()["in_flight_requests"] == 1, 10, "stream in flight", ignoring=Exception)
    res = clients[0].scale_up("up-1", [1], [], HOSTS[0], port)
    assert res.status == 202 and res.body["request_id"] == "up-1", res.body
    assert clients[0].entry() == {"id": 0, "status": "unhealthy"}  # left healthy before the 202
    # Rank 0 left the group at a batch boundary and took its peers along: they wait, healthy, for
    # their own apply, and serve nothing meanwhile; the running request ends with a 503 event.
    for r in (2, 3):
        wait_for(lambda r=r: clients[r].admin_state()["standby"], 5, f"rank {r} paused by its peer's round",
                 ignoring=Exception)
    stream.join(30)
    status, _, events = outcome["events"]
    assert status == 200 and events[-1]["error"]["code"] == 503 and "[DONE]" not in events, events[-1:]
    assert len(events) - 1 < 2000  # cut short
    assert clients[2].entry() == {"id": 2, "status": "healthy"}
    assert clients[2].complete("while paused", 2).status == 503
    for r in (2, 3, 1):
        res = clients[r].scale_up("up-1", [1], [], HOSTS[0], port)
        assert res.status == 202, res.body
        assert clients[r].entry()["status"] == "unhealthy"
    done = wait_entries(clients, range(4), healthy_clean, "4-rank group healthy")
    assert done == {r: {"id": r, "status": "healthy"} for r in range(4)}
    assert pids(clients, SURVIVORS) == before  # no survivor restarted, not even its executor
    assert_grown_group(clients, "up-1", {"ip": HOSTS[0], "port": port})
    res = clients[1].complete("rank 1 is back", 5)
    assert res.status == 200 and res.body["motor_dp_rank"] == 1, res.body
    assert res.body["choices"][0]["text"] == expected_completion("rank 1 is back", 5)
    assert_every_rank_serves_in_lockstep(clients)
    # A duplicate delivery of the committed round changes nothing.
    assert clients[2].scale_up("up-1", [1], [], HOSTS[0], port).status == 202
    assert clients[2].entry() == {"id": 2, "status": "healthy"}


def _an_injected_apply_failure_leaves_everyone_unhealthy(cluster: SimCluster) -> None:
    clients = [cluster.client(r) for r in range(4)]
    kill_and_scale_down(clients, 1, list(SURVIVORS), [1], HOSTS[0], "down-2")
    cluster.start_joiner(1)
    clients = [cluster.client(r) for r in range(4)]
    before = pids(clients, SURVIVORS)
    assert clients[2].inject("fail_next_apply", reason="weights missing").status == 200
    port = free_port(HOSTS[0])
    for r in EVERYONE:
        assert clients[r].scale_up("up-2", [1], [], HOSTS[0], port).status == 202
    failed = wait_entries(clients, EVERYONE, lambda e: "ft_error" in e, "every participant failed")
    assert failed[2] == {"id": 2, "status": "unhealthy", "last_ft_request_id": "up-2",
                         "ft_error": "injected failure: weights missing"}
    assert_missing_rank_failed_the_round(failed, 2, "up-2")  # nobody is dead: no vote was held
    assert pids(clients, SURVIVORS) == before
    assert clients[0].complete("after the failure", 1).status == 503


def _retry_survivors(cluster: SimCluster, request_id: str) -> None:
    clients = [cluster.client(r) for r in range(4)]
    for r in SURVIVORS:
        assert clients[r].apply("retry", request_id).status == 202
    wait_entries(clients, SURVIVORS, healthy_clean, f"{request_id}: survivors healthy again")


def _a_survivor_whose_apply_never_comes_faults_after_the_window(cluster: SimCluster) -> None:
    _retry_survivors(cluster, "retry-1")
    cluster.start_joiner(1)
    clients = [cluster.client(r) for r in range(4)]
    port = free_port(HOSTS[0])
    for r in (0, 3, 1):  # rank 2 is left out
        assert clients[r].scale_up("up-3", [1], [], HOSTS[0], port).status == 202
    wait_for(lambda: clients[2].admin_state()["standby"], 5, "rank 2 paused by its peers", ignoring=Exception)
    failed = wait_entries(clients, (0, 3, 1), lambda e: "ft_error" in e, "the round failed")
    assert_missing_rank_failed_the_round(failed, 2, "up-3")
    # Not left healthy without a group: past the check-in window it faults like any rank.
    seen = wait_entries(clients, [2], status_is("unhealthy"), "rank 2 unhealthy", timeout_sec=CHECKIN_SEC + 10)
    assert seen[2] == {"id": 2, "status": "unhealthy", "fault_info": "RuntimeError"}, seen


def _a_no_vote_turns_the_survivors_dead_and_the_joiner_unhealthy(cluster: SimCluster) -> None:
    _retry_survivors(cluster, "retry-2")
    cluster.start_joiner(1)
    clients = [cluster.client(r) for r in range(4)]
    assert clients[3].inject("fail_vote", reason="experts not loaded").status == 200
    port = free_port(HOSTS[0])
    for r in EVERYONE:
        assert clients[r].scale_up("up-4", [1], [], HOSTS[0], port).status == 202
    failed = wait_entries(clients, EVERYONE, lambda e: "ft_error" in e, "the vote failed everywhere")
    for r in SURVIVORS:
        assert (failed[r]["status"], failed[r]["fault_info"]) == ("dead", RECOVERY_FAILED_INFO), failed
        assert "recovery vote of round up-4 failed: 3 of 4 members voted to commit" in failed[r]["ft_error"], failed
    assert failed[1]["status"] == "unhealthy" and "recovery vote of round up-4 failed" in failed[1]["ft_error"]


def test_scale_down_then_scale_up_and_failed_rounds(tmp_path: Path) -> None:
    cluster = start_group(tmp_path / "vllm", HOSTS, ARGS)
    try:
        clients = [cluster.client(r) for r in range(4)]
        kill_and_scale_down(clients, 1, list(SURVIVORS), [1], HOSTS[0], "down-1")
        _joiner_is_healthy_but_serves_nothing(cluster)
        _refusals_are_400s_that_leave_everyone_ready(cluster)
        _scale_up_re_admits_rank_1(cluster)
        _an_injected_apply_failure_leaves_everyone_unhealthy(cluster)
        _a_survivor_whose_apply_never_comes_faults_after_the_window(cluster)
        _a_no_vote_turns_the_survivors_dead_and_the_joiner_unhealthy(cluster)
    finally:
        cluster.stop(grace_sec=5)
