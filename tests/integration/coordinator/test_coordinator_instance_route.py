"""An in-process Coordinator in front of the SGLang-shaped instance (the real instance FT manager and
two reference-engine ranks): endpoints published with an `instance_route` are reached through the
manager's one endpoint with `routed_dp_rank` = the endpoint's rank; a rank withdrawn from the view
is never named again; a rank the manager refuses (503, not active) is retried on another one."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

from gen.motor.v1 import common_pb2
from motor.testing.instance_ft_group import InstanceFtGroup
from motor.testing.waits import wait_for

from .coordinator_helpers import ADD, MODEL_A, CoordinatorFactory, completion, instances_view, post_json, post_stream

pytestmark = pytest.mark.timeout(150)


def pinned_view(group: InstanceFtGroup, ranks: list[int]) -> common_pb2.Instance:
    msg = common_pb2.Instance(id=1, role=common_pb2.ROLE_UNION, model=MODEL_A, dp_size=len(group.ranks.ranks))
    for r in group.ranks.ranks:
        if r.rank in ranks:
            ep = msg.endpoints.add(id=r.rank, ip=r.host, business_port=r.port or 0, mgmt_port=r.port or 0)
            ep.instance_route.host, ep.instance_route.port = group.host, group.port
    return msg


@pytest.fixture(scope="module")
def group(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InstanceFtGroup]:
    g = InstanceFtGroup.start(tmp_path_factory.mktemp("coordinator-instance-route"))
    try:
        yield g
    finally:
        g.stop()


@pytest.fixture
def own_group(tmp_path: Path) -> Iterator[InstanceFtGroup]:
    g = InstanceFtGroup.start(tmp_path, token_latency_sec=0.02)
    try:
        yield g
    finally:
        g.stop()


async def test_requests_go_through_the_instance_endpoint_with_the_rank_pinned(
        start_coordinator: CoordinatorFactory, group: InstanceFtGroup, http: aiohttp.ClientSession) -> None:
    coordinator = await start_coordinator()
    await coordinator.refresh(ADD, [pinned_view(group, [0, 1])])
    listed = (await instances_view(http, coordinator.http_url))["instances"][0]["endpoints"]
    assert [e["instance_route"] for e in listed] == [{"host": group.host, "port": group.port}] * 2
    before = {r: group.pinned(r) for r in (0, 1)}
    url = coordinator.http_url + "/v1/completions"
    # A client's own routed_dp_rank is replaced by the rank the Coordinator chose.
    replies = await asyncio.gather(*(post_json(http, url, completion(f"p{i}", 2, routed_dp_rank=1)) for i in range(6)))
    served = []
    for reply in replies:
        assert reply.status == 200, reply.body
        rank = int(reply.headers["X-Motor-Endpoint"].split("/")[1])
        assert reply.body["motor_dp_rank"] == rank
        served.append(rank)
    assert set(served) == {0, 1}
    assert {r: group.pinned(r) - before[r] for r in (0, 1)} == {r: served.count(r) for r in (0, 1)}
    stream = await post_stream(http, url, completion("s", 3))
    assert stream.done and {e["motor_dp_rank"] for e in stream.events[:-1]} == {int(
        stream.headers["X-Motor-Endpoint"].split("/")[1])}
    # Rank 1 withdrawn from the view: never named again.
    await coordinator.refresh(ADD, [pinned_view(group, [0])])
    pinned_1 = group.pinned(1)
    for reply in await asyncio.gather(*(post_json(http, url, completion(f"q{i}", 2)) for i in range(4))):
        assert reply.status == 200 and reply.headers["X-Motor-Endpoint"] == "1/0" and reply.body["motor_dp_rank"] == 0
    assert group.pinned(1) == pinned_1


async def test_a_rank_the_manager_refuses_is_retried_on_another(
        start_coordinator: CoordinatorFactory, own_group: InstanceFtGroup, http: aiohttp.ClientSession) -> None:
    g = own_group
    # Rank 1 dies and the manager removes it (as a round would), while the Coordinator still
    # publishes it: its pinned requests are 503 `routed_dp_rank=1 is not active` and tried on rank 0.
    assert g.ranks.client(1).inject("executor_death").status == 200
    wait_for(lambda: g.admin()["active_ranks"], 20, "rank 1 not active", until=lambda a: a == [0])
    assert g.ranks.client(0).complete("wake", 2).status == 503  # its collective fails: unhealthy
    res = g.client.request("POST", "/v1/fault_tolerance/apply",
                           {"instruction": "scale_down", "params": {"removed_dp_ranks": [1]}, "request_id": "r1"})
    assert res.status == 202, res.body
    status = wait_for(lambda: g.client.request("GET", "/v1/fault_tolerance/status").body, 40, "the apply done",
                      until=lambda d: d.get("last_ft_request_id") == "r1")
    assert "ft_error" not in status, status
    coordinator = await start_coordinator()
    await coordinator.refresh(ADD, [pinned_view(g, [0, 1])])
    url = coordinator.http_url + "/v1/completions"
    before = g.pinned(1)
    # Concurrent: the least-loaded choice spreads them over both published ranks.
    replies = await asyncio.gather(*(post_json(http, url, completion(f"r{i}", 4)) for i in range(4)))
    assert [r.status for r in replies] == [200] * 4, [r.body for r in replies]
    assert {r.headers["X-Motor-Endpoint"] for r in replies} == {"1/0"}
    assert g.pinned(1) > before  # tried, refused, and served elsewhere
