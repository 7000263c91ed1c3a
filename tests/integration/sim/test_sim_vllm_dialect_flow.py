"""vLLM's FT state machine on a real 4-rank group (``--ft-dialect vllm --diagnosing-sec 2.5``), one
story whose steps build on each other, so it is one test (it passes alone and in any order): the
store host dies, survivors go diagnosing -> unhealthy and refuse commands meanwhile; a scale_down
that removes the lowest alive rank needs a new address; after the commit idle ranks keep stepping,
so a later death is seen without traffic; the lowest alive rank (1, not 0) keeps serving the store
for the next round."""

from __future__ import annotations

import pytest

from motor.common.ports import free_port
from motor.sim.client import SimClient
from motor.sim.cluster import SimCluster
from motor.sim.toy_model import expected_completion
from motor.testing.waits import wait_for

from .sim_vllm_helpers import HOSTS, start_group, status_is, watch, watch_ranks

pytestmark = pytest.mark.timeout(120)

@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, stop_at_end) -> SimCluster:
    args = ["--diagnosing-sec", "2.5", "--scale-down-checkin-sec", "5", "--idle-step-interval-sec", "0.1"]
    return stop_at_end(start_group(tmp_path_factory.mktemp("sim-vllm-flow"), args))


def assert_serves(client: SimClient) -> None:
    res = client.complete("after the round", 3)
    assert res.status == 200, res.body
    assert res.body["choices"][0]["text"] == expected_completion("after the round", 3)


def diagnosing_comes_first_and_commands_are_refused_meanwhile(clients: list[SimClient]) -> None:
    assert clients[0].inject("executor_death").status == 200  # rank 0 hosts the DP store
    assert watch(clients[0], status_is("dead"), "rank 0 dead") == {"id": 0, "status": "dead",
                                                                   "fault_info": "EngineDeadError"}
    for r in (1, 2, 3):  # each survivor fails to start a wave on the dead store host
        assert clients[r].complete("wake up", 2).status == 503
    assert clients[1].entry() == {"id": 1, "status": "diagnosing"}
    refused = clients[1].scale_down("too-early", [0], HOSTS[1], 1)
    assert refused.status == 400 and "rank 1 is diagnosing" in refused.body["detail"], refused.body
    assert clients[1].entry() == {"id": 1, "status": "diagnosing", "last_ft_request_id": "too-early",
                                  "ft_error": refused.body["detail"]}
    assert clients[1].complete("while diagnosing", 1).status == 503
    assert clients[1].request("GET", "/health").status == 200
    entries, seen = watch_ranks(clients, (1, 2, 3), status_is("unhealthy"), "survivors unhealthy")
    for r in (1, 2, 3):
        assert seen[r] == ["diagnosing", "unhealthy"], seen
        # A new push: the refused request's fields are gone; fault_info is only a type name.
        assert entries[r] == {"id": r, "status": "unhealthy", "fault_info": "RuntimeError"}, entries


def removing_the_lowest_alive_rank_needs_a_new_address(clients: list[SimClient]) -> int:
    """→ the new store port."""
    for r in (1, 2, 3):
        assert clients[r].apply("scale_down", "no-address", {"removed_dp_ranks": [0]}).status == 202
        e = clients[r].entry()
        assert e["status"] == "unhealthy" and e["last_ft_request_id"] == "no-address" and "ft_state" not in e
        assert e["ft_error"] == "params.dp_master_ip is required (dp master rank 0, the lowest alive rank, is removed)"
    store_port = free_port(HOSTS[1])
    for r in (1, 2, 3):
        assert clients[r].scale_down("round-1", [0], HOSTS[1], store_port).status == 202
    entries, _ = watch_ranks(clients, (1, 2, 3), status_is("healthy"), "survivors healthy")
    # Replaced wholesale on success: no ft_state, and no request id either.
    assert entries == {r: {"id": r, "status": "healthy"} for r in (1, 2, 3)}
    state = clients[1].admin_state()
    assert state["group"]["members"] == [1, 2, 3] and state["group"]["is_store_server"]
    assert state["master"] == {"ip": HOSTS[1], "port": store_port}
    assert_serves(clients[2])
    return store_port


def after_the_commit_an_idle_death_is_seen_without_traffic(clients: list[SimClient]) -> None:
    # No traffic from here on: no request in flight, the survivors stepping idle (the commit's keep-stepping).
    wait_for(lambda: all(s["in_flight_requests"] == 0 and s["wave"]["active"]
                         for s in (clients[r].admin_state() for r in (1, 2, 3))), 10,
             "no request in flight, every survivor stepping", ignoring=Exception)
    assert all(clients[r].entry()["status"] == "healthy" for r in (1, 2, 3))
    assert clients[3].inject("executor_death").status == 200
    entries, seen = watch_ranks(clients, (1, 2), status_is("unhealthy"), "survivors unhealthy")
    for r in (1, 2):
        assert seen[r][-2:] == ["diagnosing", "unhealthy"], seen
        # The mask is informative (a peer still blocked in the collective may miss the probe window).
        assert {k: entries[r][k] for k in ("id", "status", "fault_info")} == {
            "id": r, "status": "unhealthy", "fault_info": "RuntimeError"}, entries
        assert 3 in entries[r]["mask"] and "ft_state" not in entries[r], entries


def the_lowest_alive_rank_keeps_the_store_for_the_next_round(clients: list[SimClient], store_port: int) -> None:
    # Rank 1 (not rank 0) is the master now and survives: no address needed, earlier rounds implied.
    for r in (1, 2):
        assert clients[r].apply("scale_down", "round-2", {"removed_dp_ranks": [3]}).status == 202
    entries, _ = watch_ranks(clients, (1, 2), status_is("healthy"), "survivors healthy")
    assert entries == {r: {"id": r, "status": "healthy"} for r in (1, 2)}
    state = clients[2].admin_state()
    assert state["group"]["members"] == [1, 2] and state["removed_dp_ranks"] == [0, 3]
    assert state["master"] == {"ip": HOSTS[1], "port": store_port}
    for r in (1, 2):
        assert_serves(clients[r])


def test_two_rounds_from_a_store_host_death_to_an_idle_death(clients: list[SimClient]) -> None:
    diagnosing_comes_first_and_commands_are_refused_meanwhile(clients)
    store_port = removing_the_lowest_alive_rank_needs_a_new_address(clients)
    after_the_commit_an_idle_death_is_seen_without_traffic(clients)
    the_lowest_alive_rank_keeps_the_store_for_the_next_round(clients, store_port)
