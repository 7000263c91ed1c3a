"""The SGLang-shaped instance FT manager's one inference endpoint over real ranks: `routed_dp_rank`
pins a request to a rank, without it the manager picks an active rank; a removed or dead rank is 503
`routed_dp_rank=N is not active`, a malformed value 400, and every request 503 while an apply runs.
Streams are relayed as they come. Each group is a manager process and two reference-engine ranks
(real gloo) linked to it."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from motor.testing.instance_ft_group import InstanceFtGroup as Group
from motor.testing.waits import wait_for

pytestmark = pytest.mark.timeout(150)

@pytest.fixture(scope="module")
def group(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Group]:
    g = Group.start(tmp_path_factory.mktemp("instance-ft-inference"))
    try:
        yield g
    finally:
        g.stop()


@pytest.fixture
def own_group(tmp_path: Path) -> Iterator[Group]:
    g = Group.start(tmp_path, token_latency_sec=0.05)
    try:
        yield g
    finally:
        g.stop()


def served_by(result) -> int:
    assert result.status == 200, result.body
    return result.body["motor_dp_rank"]


def test_pinned_requests_go_to_their_rank_and_the_rest_round_robin(group: Group) -> None:
    c = group.client
    before = group.admin()
    assert [served_by(c.complete("pin", 2, routed_dp_rank=r)) for r in (1, 1, 0)] == [1, 1, 0]
    assert served_by(c.chat("pin", 2, routed_dp_rank=1)) == 1
    assert sorted(served_by(c.complete("free", 2)) for _ in range(4)) == [0, 0, 1, 1]
    after = group.admin()
    pinned = {r: after["pinned_requests"].get(str(r), 0) - before["pinned_requests"].get(str(r), 0) for r in (0, 1)}
    assert pinned == {0: 1, 1: 3}
    status, headers, events = c.stream("/v1/completions", {"prompt": "s", "max_tokens": 3, "routed_dp_rank": 1})
    assert status == 200 and headers["Content-Type"].startswith("text/event-stream")
    assert events[-1] == "[DONE]" and {e["motor_dp_rank"] for e in events[:-1]} == {1}
    models = c.request("GET", "/v1/models")
    assert models.status == 200 and models.body["data"][0]["id"] == "motor-sim"


def test_malformed_routed_dp_rank_is_400_naming_the_value(group: Group) -> None:
    for value in ["1", 1.5, True, -1, 2, [0]]:
        res = group.client.complete("bad", 2, routed_dp_rank=value)
        assert res.status == 400, (value, res.body)
        assert res.body["error"]["message"] == f"routed_dp_rank must be an integer in 0..1, got {json.dumps(value)}"
    assert group.client.request("POST", "/v1/completions", raw=b"[1]").status == 400
    assert served_by(group.client.complete("null is unpinned", 2, routed_dp_rank=None)) in (0, 1)


def _first_event_then_rest(url: str, body: dict) -> tuple[http.client.HTTPResponse, bytes]:
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    conn.request("POST", "/v1/completions", json.dumps({**body, "stream": True}),
                 {"Content-Type": "application/json"})
    resp = conn.getresponse()
    assert resp.status == 200
    first = b""
    while not first.endswith(b"\n\n"):
        first += resp.read1(1)
    return resp, first


def test_a_dead_rank_is_not_active_a_stream_is_relayed_as_it_comes_and_applies_pause(own_group: Group) -> None:
    g = own_group
    ranks = [g.ranks.client(r) for r in (0, 1)]
    # A long stream on rank 1: its first event arrives while the rank is still generating.
    resp, first = _first_event_then_rest(g.url, {"prompt": "long", "max_tokens": 400, "routed_dp_rank": 1})
    assert json.loads(first.removeprefix(b"data: "))["motor_dp_rank"] == 1
    assert ranks[1].inject("executor_death").status == 200
    try:
        rest = resp.read()
    except http.client.IncompleteRead as exc:  # the rank's abort may cut the chunked stream
        rest = exc.partial
    assert b"[DONE]" not in rest
    refused = wait_for(lambda: g.client.complete("to the dead", 2, routed_dp_rank=1), 20, "rank 1 not active",
                       until=lambda r: r.status == 503 and r.body["error"]["message"] == "routed_dp_rank=1 is not active")
    assert refused.status == 503
    assert 1 not in g.admin()["active_ranks"]
    # The survivor turns unhealthy at its next collective; an apply removes rank 1. While it runs
    # (each rebuild slowed) every request is 503 fault_tolerance_paused.
    assert ranks[0].complete("wake", 2).status == 503
    wait_for(lambda: g.client.request("GET", "/v1/fault_tolerance/status").body["engines"][0]["status"], 20,
             "rank 0 unhealthy", until=lambda s: s == "unhealthy")
    assert ranks[0].inject("slow_rebuild", delay_sec=3.0).status == 200
    res = g.client.request("POST", "/v1/fault_tolerance/apply",
                           {"instruction": "scale_down", "params": {"removed_dp_ranks": [1]}, "request_id": "r1"})
    assert res.status == 202, res.body
    paused = g.client.complete("during", 2)
    assert (paused.status, paused.body["error"]["message"]) == (503, "fault_tolerance_paused")
    status = wait_for(lambda: g.client.request("GET", "/v1/fault_tolerance/status").body, 40, "the apply done",
                      until=lambda d: d.get("last_ft_request_id") == "r1")
    assert "ft_error" not in status, status
    assert [e["status"] for e in status["engines"]] == ["healthy", "dead"]
    assert served_by(wait_for(lambda: g.client.complete("after", 2), 10, "rank 0 serving",
                              until=lambda r: r.status == 200)) == 0
    forwarded_to_1 = g.admin()["forwarded_requests"].get("1", 0)
    assert all(served_by(g.client.complete("after", 2)) == 0 for _ in range(3))
    removed = g.client.complete("to the removed", 2, routed_dp_rank=1)
    assert (removed.status, removed.body["error"]["message"]) == (503, "routed_dp_rank=1 is not active")
    assert g.admin()["forwarded_requests"].get("1", 0) == forwarded_to_1
