"""vLLM's round rules on a real 4-rank group (``--ft-dialect vllm --scale-down-checkin-sec 2``), as one
story whose steps build on each other (so it passes alone and in any order): a survivor that never
checks in fails the round within the check-in window and a failed retry leaves the survivors
unhealthy; then one survivor voting no in the scale-down that follows makes every survivor dead."""

from __future__ import annotations

import pytest

from motor.sim.client import SimClient
from motor.sim.cluster import SimCluster
from motor.sim.ft_state import RECOVERY_FAILED_INFO

from .sim_vllm_helpers import start_group, status_is, watch, watch_ranks

pytestmark = pytest.mark.timeout(120)

SURVIVORS = (0, 1, 2)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, stop_at_end) -> SimCluster:
    return stop_at_end(start_group(tmp_path_factory.mktemp("sim-vllm-vote"), ["--scale-down-checkin-sec", "2"]))


def test_a_missing_check_in_fails_the_retry_then_one_no_vote_turns_every_survivor_dead(
        clients: list[SimClient]) -> None:
    _a_missing_check_in_fails_the_round_and_a_failed_retry_stays_unhealthy(clients)
    _one_no_vote_turns_every_survivor_dead(clients)


def _a_missing_check_in_fails_the_round_and_a_failed_retry_stays_unhealthy(clients: list[SimClient]) -> None:
    assert clients[3].inject("executor_death").status == 200
    watch(clients[3], status_is("dead"), "rank 3 dead")
    assert clients[0].complete("wake up", 2).status == 503  # the wave's collective meets the dead peer
    # No diagnosing phase here: unhealthy at once (the informative mask may follow later).
    entries, _ = watch_ranks(clients, SURVIVORS, status_is("unhealthy"), "survivors unhealthy")
    for r, e in entries.items():
        assert (e["id"], e["fault_info"], "ft_state" in e) == (r, "RuntimeError", False), e
    for r in SURVIVORS:  # a retry keeps rank 3 in the group, and rank 3 never checks in
        assert clients[r].apply("retry", "retry-1").status == 202
    entries, _ = watch_ranks(clients, SURVIVORS, lambda e: "ft_error" in e, "retry outcome")
    for e in entries.values():
        assert e["status"] == "unhealthy" and e["last_ft_request_id"] == "retry-1", e
        assert ("dp ranks [3] did not join DP group 'retry-1' (members [0, 1, 2, 3]) within the 2s check-in window"
                in e["ft_error"]), e


def _one_no_vote_turns_every_survivor_dead(clients: list[SimClient]) -> None:
    assert clients[2].inject("fail_vote", reason="experts not loaded").status == 200
    for r in SURVIVORS:
        assert clients[r].apply("scale_down", "vote-1", {"removed_dp_ranks": [3]}).status == 202
    entries, _ = watch_ranks(clients, SURVIVORS, status_is("dead"), "survivors dead")
    for r, e in entries.items():
        assert {k: e[k] for k in ("id", "status", "fault_info", "last_ft_request_id")} == {
            "id": r, "status": "dead", "fault_info": RECOVERY_FAILED_INFO, "last_ft_request_id": "vote-1"}
        assert "recovery vote of round vote-1 failed: 2 of 3 members voted to commit" in e["ft_error"], e
    assert "this rank voted no: experts not loaded" in clients[2].entry()["ft_error"]
    assert clients[0].complete("after the vote", 1).status == 503
    assert clients[0].request("GET", "/health").status == 200
    again = clients[0].apply("scale_down", "vote-2", {"removed_dp_ranks": [3]})
    assert again.status == 400 and "rank 0 is dead" in again.body["detail"]
