"""4-rank engine groups: read-only checks on one group, and the RFC's rows driven step by step on a
group of their own, inside one test (so every test passes alone and in any order).

Ranks sit on 127.0.0.1..4 to emulate pods. Experts: 4 logical + 4 redundant, 2 slots per rank,
which survives removing rank 1 and then rank 0, but not a third rank afterwards.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from motor.common.ports import free_port
from motor.sim.client import SimClient
from motor.sim.cluster import SimCluster
from motor.sim.toy_model import expected_completion
from motor.testing.waits import wait_for

pytestmark = pytest.mark.timeout(120)  # per test, module fixtures included

HOSTS = ["127.0.0.1", "127.0.0.2", "127.0.0.3", "127.0.0.4"]
REPO_ROOT = Path(__file__).resolve().parents[3]
STATUS_WAIT_SEC = 20.0


def start_group(run_dir: Path, zygote: str) -> SimCluster:
    return SimCluster.start(
        run_dir, 4, hosts=HOSTS, cwd=REPO_ROOT, ready_timeout_sec=90, zygote=zygote,
        extra_args=[
            "--enable-fault-tolerance", "--enable-fault-injection",
            "--ft-dialect", "rfc", "--diagnosing-sec", "0",  # asserts ft_state, unhealthy at once
            "--num-experts", "4", "--num-redundant-experts", "4",
            "--per-token-latency-sec", "0.01", "--collective-timeout-sec", "10",
            "--engine-recovery-timeout-sec", "20",
        ],
    )


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, stop_at_end, executor_zygote: str) -> SimCluster:
    return stop_at_end(start_group(tmp_path_factory.mktemp("sim-flow"), executor_zygote))


def entries(clients: list[SimClient], ranks: list[int]) -> dict[int, dict[str, Any]]:
    return {r: clients[r].entry() for r in ranks}


def wait_entries(clients: list[SimClient], ranks: list[int], pred, what: str) -> dict[int, dict[str, Any]]:
    # A rank in the middle of a rebuild may not answer yet: that is "not yet", not a failure.
    return wait_for(lambda: entries(clients, ranks), STATUS_WAIT_SEC, what,
                    until=lambda seen: all(pred(seen[r]) for r in ranks), ignoring=Exception)


def wait_idle(clients: list[SimClient], ranks: list[int]) -> None:
    """A response is sent before the wave's closing all-reduce: wait until every wave is over."""
    wait_for(lambda: not any(clients[r].admin_state()["wave"]["active"] for r in ranks), 10, "no wave active",
             ignoring=Exception)


def healthy_clean(e: dict[str, Any]) -> bool:
    return e["status"] == "healthy" and "ft_state" not in e


def assert_serves(client: SimClient, rank: int) -> None:
    res = client.complete("ping after recovery", 4)
    assert res.status == 200, res.body
    assert res.body["motor_dp_rank"] == rank
    assert res.body["choices"][0]["text"] == expected_completion("ping after recovery", 4)


def test_four_ranks_serve_stream_and_non_stream(clients: list[SimClient]) -> None:
    prompt = "the quick brown fox"
    for rank, client in enumerate(clients):
        res = client.complete(prompt, 6)
        assert res.status == 200, res.body
        assert res.headers["X-Motor-DP-Rank"] == str(rank)
        assert res.body["motor_dp_rank"] == rank
        choice = res.body["choices"][0]
        assert choice["text"] == expected_completion(prompt, 6)
        assert choice["finish_reason"] == "length"
        assert res.body["usage"] == {"prompt_tokens": 4, "completion_tokens": 6, "total_tokens": 10}

        status, headers, events = client.stream("/v1/completions", {"prompt": prompt, "max_tokens": 5})
        assert status == 200 and headers["X-Motor-DP-Rank"] == str(rank)
        assert events[-1] == "[DONE]"
        chunks = events[:-1]
        assert "".join(c["choices"][0]["text"] for c in chunks) == expected_completion(prompt, 5)
        assert all(c["motor_dp_rank"] == rank for c in chunks)

        chat = client.chat("hello there", 3)
        assert chat.status == 200 and chat.body["object"] == "chat.completion"
        assert chat.body["choices"][0]["message"]["role"] == "assistant"
        status, _, events = client.stream(
            "/v1/chat/completions",
            {"messages": [{"role": "user", "content": "hello there"}], "max_tokens": 3,
             "stream_options": {"include_usage": True}},
        )
        assert status == 200 and events[-1] == "[DONE]"
        content = "".join(c["choices"][0]["delta"].get("content", "") for c in events[:-1] if c["choices"])
        assert content == chat.body["choices"][0]["message"]["content"]
        assert events[-2]["usage"]["completion_tokens"] == 3


def test_concurrent_requests_on_all_ranks(clients: list[SimClient]) -> None:
    results: dict[int, Any] = {}

    def run(rank: int) -> None:
        results[rank] = clients[rank].complete(f"prompt {rank}", 20, timeout_sec=30)

    threads = [threading.Thread(target=run, args=(r,)) for r in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(40)
    for rank in range(4):
        assert results[rank].status == 200
        assert results[rank].body["choices"][0]["text"] == expected_completion(f"prompt {rank}", 20)


def test_status_document_and_group(clients: list[SimClient]) -> None:
    for rank, client in enumerate(clients):
        assert client.status() == {"schema_version": 1, "total_engines": 1,
                                   "engines": [{"id": rank, "status": "healthy"}],
                                   "supported_instructions": ["retry", "scale_down", "scale_up"]}
        state = client.admin_state()
        assert state["group"]["members"] == [0, 1, 2, 3]
        assert state["group"]["dense_rank"] == rank
        assert state["group"]["master"]["ip"] == HOSTS[0]
        assert state["placement"]["slots_per_rank"] == 2
        assert client.request("GET", "/health").status == 200
        models = client.request("GET", "/v1/models")
        assert models.status == 200 and models.body["data"][0]["id"] == "motor-sim"


MALFORMED = [
    (b"not json", "not valid JSON"),
    (b"[1, 2]", "list"),
    (b'{"request_id": "r1"}', "instruction"),
    (b'{"instruction": "explode", "request_id": "r1"}', "explode"),
    (b'{"instruction": 7, "request_id": "r1"}', "7"),
    (b'{"instruction": "scale_down", "request_id": "r1", "params": [1]}', "[1]"),
    (b'{"instruction": "scale_down", "request_id": "r1", "params": null}', "None"),
    (b'{"instruction": "scale_down", "params": {}}', "request_id"),
    (b'{"instruction": "scale_down", "request_id": "   ", "params": {}}', "'   '"),
    (b'{"instruction": "scale_down", "request_id": 12, "params": {}}', "12"),
]


@pytest.mark.parametrize("raw, named", MALFORMED)
def test_malformed_apply_body_gets_400(clients: list[SimClient], raw: bytes, named: str) -> None:
    res = clients[2].request("POST", "/v1/fault_tolerance/apply", raw=raw)
    assert res.status == 400, res.body
    assert isinstance(res.body["detail"], str) and named in res.body["detail"], res.body
    assert clients[2].entry() == {"id": 2, "status": "healthy"}


def _apply_on_healthy_rank_is_rejected_in_status(clients: list[SimClient]) -> None:
    res = clients[3].scale_down("healthy-probe", [1], HOSTS[0], 1)
    assert res.status == 202 and res.body["request_id"] == "healthy-probe"
    entry = clients[3].entry()
    assert entry["status"] == "healthy"
    assert entry["ft_state"] == "failed"
    assert entry["last_ft_request_id"] == "healthy-probe"
    assert "healthy" in entry["ft_error"]
    state = clients[3].admin_state()
    assert state["group"]["tag"] == "init" and state["group"]["generation"] == 0
    assert clients[3].complete("still serving", 2).status == 200


def _idle_executor_death_leaves_survivors_healthy(clients: list[SimClient]) -> None:
    wait_idle(clients, [0, 1, 2, 3])
    assert clients[1].inject("executor_death").status == 200
    wait_entries(clients, [1], lambda e: e["status"] == "dead", "rank 1 dead")
    dead = clients[1].entry()
    assert "SIGKILL" in dead["fault_info"]
    # Kept sleep: no traffic, so nobody runs a collective and nobody may notice. The fault was seen
    # (rank 1 dead, above); what must NOT happen has no event, and the survivors' idle store polls
    # are not counted anywhere: 1.5 s is ~75 polls at 0.02 s and one 1 s back-off of a failing poll.
    time.sleep(1.5)
    now = entries(clients, [0, 2, 3])
    assert now[0] == {"id": 0, "status": "healthy"}
    assert now[2] == {"id": 2, "status": "healthy"}
    assert now[3]["status"] == "healthy"  # still carries the rejected probe's ft_state
    res = clients[1].complete("to the dead rank", 2)
    assert res.status == 503 and res.body["motor_dp_rank"] == 1
    assert clients[1].request("GET", "/health").status == 200


def _traffic_makes_survivors_unhealthy(clients: list[SimClient]) -> None:
    res = clients[0].complete("traffic after death", 4)
    assert res.status == 503, res.body
    assert "unhealthy" in res.body["error"]["message"]
    seen = wait_entries(clients, [0, 2, 3], lambda e: e["status"] == "unhealthy" and "mask" in e,
                        "survivors unhealthy with a mask")
    for rank in (0, 2, 3):
        assert seen[rank]["mask"] == [1]
        assert "all_reduce" in seen[rank]["fault_info"]
        assert "ft_state" not in seen[rank]  # rank 3's stale 'failed' is cleared by the new fault
    assert clients[2].complete("new request while unhealthy", 2).status == 503


def _scale_down_removes_rank_1(clients: list[SimClient], cluster: SimCluster) -> None:
    port = free_port(HOSTS[0])
    for rank in (0, 2, 3):
        res = clients[rank].scale_down("round-1", [1], HOSTS[0], port)
        assert res.status == 202 and res.body["request_id"] == "round-1", res.body
    seen = wait_entries(clients, [0, 2, 3], healthy_clean, "3-rank group healthy")
    assert {e["id"] for e in seen.values()} == {0, 2, 3}
    for rank in (0, 2, 3):
        assert seen[rank]["last_ft_request_id"] == "round-1"
        state = clients[rank].admin_state()
        assert state["group"]["members"] == [0, 2, 3]
        assert state["group"]["dense_rank"] == [0, 2, 3].index(rank)
        assert state["group"]["master"] == {"ip": HOSTS[0], "port": port}
        assert state["removed_dp_ranks"] == [1]
        assert sorted(state["placement"]["by_rank"]) == ["0", "2", "3"]
        assert_serves(clients[rank], rank)
    # Duplicate delivery of the same apply is harmless.
    assert clients[2].scale_down("round-1", [1], HOSTS[0], port).status == 202
    assert healthy_clean(clients[2].entry())
    # The dead rank rejects in status and stays dead.
    assert clients[1].scale_down("round-1", [0], HOSTS[0], port).status == 202
    assert clients[1].entry()["status"] == "dead" and clients[1].entry()["ft_state"] == "failed"


def _in_flight_stream_is_aborted_when_a_peer_dies(clients: list[SimClient]) -> None:
    outcome: dict[str, Any] = {}

    def long_stream() -> None:
        outcome["result"] = clients[2].stream("/v1/completions", {"prompt": "long", "max_tokens": 1000},
                                              timeout_sec=60)

    t = threading.Thread(target=long_stream)
    t.start()
    wait_for(lambda: clients[2].admin_state()["in_flight_requests"] == 1, 10, "stream in flight", ignoring=Exception)
    time.sleep(0.3)
    assert clients[0].inject("executor_death").status == 200  # the store host and dense rank 0
    t.join(30)
    status, _, events = outcome["result"]
    assert status == 200
    assert events and "error" in events[-1] and events[-1]["error"]["code"] == 503
    assert "[DONE]" not in events
    assert 0 < len(events) - 1 < 1000
    # The wave was running on every member, so both survivors fail without more traffic.
    wait_entries(clients, [2, 3], lambda e: e["status"] == "unhealthy", "2 and 3 unhealthy")
    wait_entries(clients, [0], lambda e: e["status"] == "dead", "rank 0 dead")


def _second_round_removes_rank_0_with_new_master(clients: list[SimClient]) -> None:
    new_master = HOSTS[2]
    port = free_port(new_master)
    # Rank 0 hosted the store, so the old master must change: the same one is refused.
    res = clients[2].scale_down("round-2-bad", [1, 0], HOSTS[0], clients[2].admin_state()["master"]["port"])
    assert res.status == 202
    e = clients[2].entry()
    assert e["ft_state"] == "failed" and "master" in e["ft_error"] and e["last_ft_request_id"] == "round-2-bad"
    for rank in (2, 3):
        assert clients[rank].scale_down("round-2", [1, 0], new_master, port).status == 202
    seen = wait_entries(clients, [2, 3], healthy_clean, "2-rank group healthy")
    assert {e["id"] for e in seen.values()} == {2, 3}
    for rank in (2, 3):
        state = clients[rank].admin_state()
        assert state["group"]["members"] == [2, 3]
        assert state["group"]["master"] == {"ip": new_master, "port": port}
        assert state["group"]["is_store_server"] == (rank == 2)
        assert state["removed_dp_ranks"] == [0, 1]
        assert seen[rank]["last_ft_request_id"] == "round-2"
        assert_serves(clients[rank], rank)


def _insufficient_redundancy_ends_failed(clients: list[SimClient]) -> None:
    assert clients[3].inject("executor_death").status == 200
    wait_entries(clients, [3], lambda e: e["status"] == "dead", "rank 3 dead")
    assert clients[2].complete("trigger", 2).status == 503
    wait_entries(clients, [2], lambda e: e["status"] == "unhealthy", "rank 2 unhealthy")
    assert clients[2].scale_down("round-3", [0, 1, 3], HOSTS[2], free_port(HOSTS[2])).status == 202
    entry = clients[2].entry()
    assert entry["status"] == "unhealthy"
    assert entry["ft_state"] == "failed"
    assert entry["last_ft_request_id"] == "round-3"
    assert "insufficient expert redundancy" in entry["ft_error"]
    assert clients[2].admin_state()["group"]["members"] == [2, 3]  # untouched


@pytest.mark.timeout(400)
def test_rfc_rows_in_order_on_a_group_of_their_own(tmp_path: Path, executor_zygote: str) -> None:
    """Each step starts from the state the previous one left: a rejected probe, an idle death, the
    survivors' faults under traffic, round 1, a death mid-stream, round 2 with a new master, and a
    third removal the experts cannot survive."""
    story = start_group(tmp_path / "rows", executor_zygote)
    try:
        clients = [story.client(r) for r in range(4)]
        _apply_on_healthy_rank_is_rejected_in_status(clients)
        _idle_executor_death_leaves_survivors_healthy(clients)
        _traffic_makes_survivors_unhealthy(clients)
        _scale_down_removes_rank_1(clients, story)
        _in_flight_stream_is_aborted_when_a_peer_dies(clients)
        _second_round_removes_rank_0_with_new_master(clients)
        _insufficient_redundancy_ends_failed(clients)
    finally:
        story.stop(grace_sec=5)
