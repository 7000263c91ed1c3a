"""Endpoints reached through their instance's one inference endpoint with the rank pinned (pure): the
route the table chooses, the body the engine gets, the checks of a published `instance_route`, and
its way through the gRPC adapters."""

from __future__ import annotations

import json

import pytest

from gen.motor.v1 import common_pb2
from motor.coordinator.engine_client import base_url, engine_body
from motor.coordinator.routing import Route, RoutingTable
from motor.coordinator.serving_view import (
    EndpointSpec,
    InstanceRoute,
    InstanceSpec,
    RefreshError,
    RefreshErrorCode,
    RefreshEvent,
)
from motor.coordinator.servicer import instance_from_proto, instance_to_proto

MANAGER = InstanceRoute("127.0.0.80", 30000)


def pinned(rank: int, route: InstanceRoute | None = MANAGER, headless: bool = False) -> EndpointSpec:
    return EndpointSpec(id=rank, ip="127.0.0.81", business_port=8000 + rank, instance_route=route, headless=headless)


def instance(*ranks: int, route: InstanceRoute | None = MANAGER) -> InstanceSpec:
    return InstanceSpec(id=1, model="m", endpoints=tuple(pinned(r, route) for r in ranks), dp_size=4)


def test_a_pinned_endpoint_routes_to_the_instance_address_with_its_original_rank() -> None:
    table = RoutingTable()
    table.refresh(RefreshEvent.ADD, [instance(0, 2, 3)], 1)
    chosen = [table.pick("m", 0.0) for _ in range(3)]  # outstanding: each to the least loaded rank
    assert chosen == [Route(1, r, "127.0.0.80", 30000, "m", pinned_rank=r) for r in (0, 2, 3)]
    assert base_url(chosen[1]) == "http://127.0.0.80:30000"
    assert table.route_to(1, 2) == Route(1, 2, "127.0.0.80", 30000, "m", pinned_rank=2)
    # Rank 2 dropped from the view: never chosen again, whatever the load.
    table.refresh(RefreshEvent.ADD, [instance(0, 3)], 2)
    assert {table.pick("m", 0.0).rank for _ in range(6)} == {0, 3}
    assert table.route_to(1, 2) is None


def test_an_endpoint_without_instance_route_keeps_its_own_address() -> None:
    table = RoutingTable()
    table.refresh(RefreshEvent.ADD, [instance(1, route=None)], 1)
    assert table.pick("m", 0.0) == Route(1, 1, "127.0.0.81", 8001, "m")


def test_engine_body_pins_the_rank_and_replaces_the_clients() -> None:
    body = json.dumps({"prompt": "x", "max_tokens": 2, "routed_dp_rank": 0}).encode()
    assert engine_body(Route(1, 3, "h", 1, "m"), body) is body  # not pinned: sent unchanged
    sent = json.loads(engine_body(Route(1, 3, "h", 1, "m", pinned_rank=3), body))
    assert sent == {"prompt": "x", "max_tokens": 2, "routed_dp_rank": 3}
    with pytest.raises(ValueError, match="JSON object, got list"):
        engine_body(Route(1, 3, "h", 1, "m", pinned_rank=3), b"[1]")


@pytest.mark.parametrize(("endpoint", "message"), [
    (pinned(1, InstanceRoute("", 30000)), "instance 1 endpoint 1: instance_route host '' is empty or has spaces"),
    (pinned(1, InstanceRoute("a b", 30000)), "instance 1 endpoint 1: instance_route host 'a b' is empty or has spaces"),
    (pinned(1, InstanceRoute("h", 0)), "instance 1 endpoint 1: instance_route port 0 not in 1..65535"),
    (pinned(1, InstanceRoute("h", 70000)), "instance 1 endpoint 1: instance_route port 70000 not in 1..65535"),
    (pinned(1, headless=True), "instance 1 endpoint 1: instance_route is set on a headless endpoint"),
])
def test_a_bad_instance_route_is_refused_naming_it(endpoint: EndpointSpec, message: str) -> None:
    table = RoutingTable()
    with pytest.raises(RefreshError) as info:
        table.refresh(RefreshEvent.ADD, [InstanceSpec(id=1, model="m", endpoints=(endpoint,))], 1)
    assert info.value.code is RefreshErrorCode.INVALID_ARGUMENT and message in info.value.message
    assert table.revision == 0


def test_instance_route_through_the_adapters() -> None:
    msg = common_pb2.Instance(id=1, model="m", dp_size=2)
    msg.endpoints.add(id=0, ip="127.0.0.81", business_port=8000, instance_route={"host": "127.0.0.80", "port": 30000})
    msg.endpoints.add(id=1, ip="127.0.0.81", business_port=8001)
    spec = instance_from_proto(msg)
    assert [e.instance_route for e in spec.endpoints] == [MANAGER, None]
    bare = instance_to_proto(InstanceSpec(id=1, model="m", endpoints=spec.endpoints))
    assert bare.endpoints[0].instance_route == msg.endpoints[0].instance_route
    assert not bare.endpoints[1].HasField("instance_route")
