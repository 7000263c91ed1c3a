"""The routing table (pure): publication semantics, validation, revisions, selection, accounting."""

from __future__ import annotations

import pytest

from motor.coordinator.routing import NoRoute, NoRouteKind, Route, RoutingTable, TableSnapshot
from motor.coordinator.serving_view import EndpointSpec, InstanceSpec, RefreshError, RefreshErrorCode, RefreshEvent

ADD, DEL, SET, PAUSE, RESUME = (RefreshEvent.ADD, RefreshEvent.DEL, RefreshEvent.SET, RefreshEvent.PAUSE,
                                RefreshEvent.RESUME)


def ep(rank: int, *, port: int | None = None, ip: str = "127.0.0.1", headless: bool = False) -> EndpointSpec:
    return EndpointSpec(id=rank, ip=ip, business_port=8000 + rank if port is None else port, headless=headless)


def inst(instance_id: int, ranks=(0, 1), *, model: str = "m", headless=(), **kw) -> InstanceSpec:
    eps = tuple(ep(r, headless=r in headless, port=9000 + 10 * instance_id + r) for r in ranks)
    return InstanceSpec(id=instance_id, model=model, endpoints=eps, **kw)


def refused(table: RoutingTable, event, instances, revision: int) -> RefreshError:
    before = state(table)
    with pytest.raises(RefreshError) as info:
        table.refresh(event, instances, revision)
    assert state(table) == before, "a refused refresh must change nothing"
    return info.value


def state(table: RoutingTable) -> TableSnapshot:
    return table.snapshot(now=0.0)


def published(table: RoutingTable) -> dict[int, list[int]]:
    return {v.spec.id: v.spec.endpoint_ids for v in state(table).instances}


def picks(table: RoutingTable, n: int, model: str | None = None, now: float = 0.0) -> list[str]:
    """n sequential requests (each finished before the next starts)."""
    out = []
    for _ in range(n):
        route = table.pick(model, now)
        assert isinstance(route, Route), route
        out.append(route.label)
        table.release(route)
    return out


# -- publication ----------------------------------------------------------------------------------

def test_add_publishes_and_acknowledges_revision() -> None:
    t = RoutingTable()
    assert t.revision == 0
    assert t.refresh(ADD, [inst(1), inst(2, (0, 1, 2))], 5) == 5
    assert t.revision == 5
    assert published(t) == {1: [0, 1], 2: [0, 1, 2]}


def test_add_replaces_the_view_of_a_published_instance_and_keeps_its_pause() -> None:
    t = RoutingTable()
    t.refresh(ADD, [inst(1, (0, 1, 2, 3))], 1)
    t.refresh(PAUSE, [inst(1, ())], 2)
    t.refresh(ADD, [inst(1, (0, 2, 3))], 3)
    assert published(t) == {1: [0, 2, 3]}
    assert t.is_paused(1)


def test_add_of_an_instance_without_endpoints_is_invalid() -> None:
    t = RoutingTable()
    err = refused(t, ADD, [inst(4, ())], 1)
    assert err.code is RefreshErrorCode.INVALID_ARGUMENT and "instance 4 has no endpoints" in err.message


def test_del_withdraws_an_exactly_matching_view() -> None:
    t = RoutingTable()
    t.refresh(ADD, [inst(1), inst(2)], 1)
    t.refresh(DEL, [inst(1, (1, 0))], 2)  # order of ids does not matter
    assert published(t) == {2: [0, 1]}
    assert t.revision == 2


@pytest.mark.parametrize("ranks", [(0,), (0, 1, 2), (0, 2), ()])
def test_del_with_a_different_endpoint_set_is_refused_naming_both_sets(ranks) -> None:
    t = RoutingTable()
    t.refresh(ADD, [inst(7, (0, 1))], 1)
    err = refused(t, DEL, [inst(7, ranks)], 2)
    assert err.code is RefreshErrorCode.FAILED_PRECONDITION
    assert "instance 7" in err.message
    assert f"endpoint ids [{', '.join(map(str, ranks))}]" in err.message
    assert "published endpoint ids [0, 1]" in err.message
    assert t.revision == 1


def test_del_is_all_or_nothing_across_instances() -> None:
    t = RoutingTable()
    t.refresh(ADD, [inst(1), inst(2)], 1)
    err = refused(t, DEL, [inst(1), inst(2, (0,))], 2)
    assert err.code is RefreshErrorCode.FAILED_PRECONDITION and "instance 2" in err.message
    assert "instance 1" not in err.message
    assert published(t) == {1: [0, 1], 2: [0, 1]}


def test_del_forgets_the_pause_flag() -> None:
    t = RoutingTable()
    t.refresh(ADD, [inst(1)], 1)
    t.refresh(PAUSE, [inst(1, ())], 2)
    t.refresh(DEL, [inst(1)], 3)
    t.refresh(ADD, [inst(1)], 4)
    assert not t.is_paused(1)


def test_del_of_an_unpublished_instance_is_a_failed_precondition() -> None:
    t = RoutingTable()
    t.refresh(ADD, [inst(1)], 1)
    err = refused(t, DEL, [inst(9)], 2)
    assert err.code is RefreshErrorCode.FAILED_PRECONDITION
    assert "instance 9 with endpoint ids [0, 1] is not published" in err.message


def test_del_identity_counts_headless_endpoints() -> None:
    t = RoutingTable()
    t.refresh(ADD, [inst(1, (0, 1, 2), headless=(2,))], 1)
    refused(t, DEL, [inst(1, (0, 1))], 2)
    t.refresh(DEL, [inst(1, (0, 1, 2))], 2)
    assert published(t) == {}


def test_set_replaces_everything_and_forgets_pauses_of_withdrawn_instances() -> None:
    t = RoutingTable()
    t.refresh(ADD, [inst(1), inst(2), inst(3)], 1)
    t.refresh(PAUSE, [inst(1, ()), inst(2, ())], 2)
    t.refresh(SET, [inst(2, (0,)), inst(4)], 3)
    assert published(t) == {2: [0], 4: [0, 1]}
    assert t.is_paused(2) and not t.is_paused(4)
    t.refresh(ADD, [inst(1)], 4)
    assert not t.is_paused(1), "a withdrawn instance published again starts unpaused"


def test_empty_set_withdraws_everything() -> None:
    t = RoutingTable()
    t.refresh(ADD, [inst(1)], 1)
    t.refresh(SET, [], 2)
    assert published(t) == {} and t.revision == 2


@pytest.mark.parametrize("event", [ADD, DEL, PAUSE, RESUME])
def test_other_events_need_at_least_one_instance(event) -> None:
    t = RoutingTable()
    err = refused(t, event, [], 1)
    assert err.code is RefreshErrorCode.INVALID_ARGUMENT and event.value in err.message


def test_pause_and_resume_toggle_routing() -> None:
    t = RoutingTable()
    t.refresh(ADD, [inst(1, (0,))], 1)
    t.refresh(PAUSE, [inst(1, ())], 2)
    assert t.is_paused(1) and t.is_published(1)
    choice = t.select("m", 0.0)
    assert isinstance(choice, NoRoute) and choice.kind is NoRouteKind.UNAVAILABLE and "paused" in choice.message
    t.refresh(PAUSE, [inst(1, ())], 3)  # idempotent
    t.refresh(RESUME, [inst(1, ())], 4)
    assert isinstance(t.select("m", 0.0), Route)


@pytest.mark.parametrize("event", [PAUSE, RESUME])
def test_pause_or_resume_of_an_unknown_instance_is_not_found(event) -> None:
    t = RoutingTable()
    t.refresh(ADD, [inst(1)], 1)
    err = refused(t, event, [inst(1, ()), inst(5, ())], 2)
    assert err.code is RefreshErrorCode.NOT_FOUND and "[5]" in err.message
    assert not t.is_paused(1)


@pytest.mark.parametrize("revision", [3, 2, 0, -1])
def test_a_revision_not_above_the_last_one_is_refused_naming_both(revision: int) -> None:
    t = RoutingTable()
    t.refresh(ADD, [inst(1)], 3)
    err = refused(t, ADD, [inst(2)], revision)
    assert err.code is RefreshErrorCode.FAILED_PRECONDITION
    assert f"revision {revision} " in err.message and "last acknowledged revision 3" in err.message


def test_first_revision_must_exceed_zero() -> None:
    err = refused(RoutingTable(), ADD, [inst(1)], 0)
    assert "last acknowledged revision 0" in err.message


def test_refused_request_does_not_consume_its_revision() -> None:
    t = RoutingTable()
    t.refresh(ADD, [inst(1)], 1)
    refused(t, DEL, [inst(1, (0,))], 2)
    refused(t, ADD, [inst(2, ())], 2)
    refused(t, PAUSE, [inst(3, ())], 2)
    assert t.refresh(DEL, [inst(1)], 2) == 2


def test_unknown_event_is_invalid() -> None:
    err = refused(RoutingTable(), "ADDD", [inst(1)], 1)
    assert err.code is RefreshErrorCode.INVALID_ARGUMENT and "'ADDD'" in err.message


@pytest.mark.parametrize(
    ("instance", "named"),
    [
        (InstanceSpec(1, "m", (ep(0), ep(0, port=9001))), "endpoint id 0 appears more than once"),
        (InstanceSpec(1, "m", (ep(-1),)), "endpoint id -1 is negative"),
        (InstanceSpec(1, "m", (ep(0, ip=""),)), "ip '' is empty"),
        (InstanceSpec(1, "m", (ep(0, ip=" 127.0.0.1"),)), "ip ' 127.0.0.1'"),
        (InstanceSpec(1, "m", (ep(0, port=0),)), "business_port 0 not in 1..65535"),
        (InstanceSpec(1, "m", (ep(0, port=65536),)), "business_port 65536 not in 1..65535"),
        (InstanceSpec(1, "m", (EndpointSpec(0, "h", 80, mgmt_port=70000),)), "mgmt_port 70000"),
        (InstanceSpec(-2, "m", (ep(0),)), "instance id -2 is negative"),
    ],
)
@pytest.mark.parametrize("event", [ADD, SET])
def test_invalid_views_are_refused_naming_the_value(event, instance: InstanceSpec, named: str) -> None:
    t = RoutingTable()
    t.refresh(ADD, [inst(9)], 1)
    err = refused(t, event, [inst(8), instance], 2)
    assert err.code is RefreshErrorCode.INVALID_ARGUMENT and named in err.message


def test_a_headless_endpoint_needs_no_business_port() -> None:
    t = RoutingTable()
    t.refresh(ADD, [InstanceSpec(1, "m", (ep(0), EndpointSpec(1, "127.0.0.2", 0, headless=True)))], 1)
    assert published(t) == {1: [0, 1]}


def test_duplicate_instance_ids_in_one_request_are_invalid() -> None:
    err = refused(RoutingTable(), ADD, [inst(1), inst(1, (0,))], 1)
    assert err.code is RefreshErrorCode.INVALID_ARGUMENT and "instance 1 appears more than once" in err.message


def test_invalid_argument_takes_precedence_over_a_stale_revision() -> None:
    t = RoutingTable()
    t.refresh(ADD, [inst(1)], 5)
    assert refused(t, ADD, [inst(2, ())], 1).code is RefreshErrorCode.INVALID_ARGUMENT


# -- selection ------------------------------------------------------------------------------------

def test_least_outstanding_wins() -> None:
    t = RoutingTable()
    t.refresh(ADD, [inst(1, (0, 1, 2))], 1)
    a = t.pick(None, 0.0)
    b = t.pick(None, 0.0)
    c = t.pick(None, 0.0)
    assert [r.label for r in (a, b, c)] == ["1/0", "1/1", "1/2"]
    t.release(b)
    assert t.pick(None, 0.0).label == "1/1"
    assert t.outstanding((1, 1)) == 1 and t.total_outstanding() == 3


def test_ties_go_to_the_lowest_rank_then_round_robin_across_instances() -> None:
    t = RoutingTable()
    t.refresh(ADD, [inst(3, (0, 1)), inst(1, (1, 2)), inst(2, (0,))], 1)
    # Sequential requests: equal load, lowest rank 0 is on instances 2 and 3: they alternate.
    assert picks(t, 4) == ["2/0", "3/0", "2/0", "3/0"]
    # Concurrent requests spread over every endpoint by outstanding count, lowest rank first.
    held = [t.pick(None, 0.0) for _ in range(5)]
    assert sorted(r.label for r in held) == ["1/1", "1/2", "2/0", "3/0", "3/1"]
    assert {t.outstanding(r.key) for r in held} == {1}


def test_route_carries_the_endpoint_address_and_model() -> None:
    t = RoutingTable()
    t.refresh(ADD, [InstanceSpec(4, "llama", (EndpointSpec(2, "127.0.0.3", 8123),))], 1)
    assert t.pick("llama", 0.0) == Route(instance_id=4, rank=2, ip="127.0.0.3", port=8123, model="llama")


def test_model_filter_and_unknown_model() -> None:
    t = RoutingTable()
    t.refresh(ADD, [inst(1, (0,), model="a"), inst(2, (0,), model="b")], 1)
    assert set(picks(t, 3, "b")) == {"2/0"}
    unknown = t.select("c", 0.0)
    assert isinstance(unknown, NoRoute) and unknown.kind is NoRouteKind.UNKNOWN_MODEL and "`c`" in unknown.message
    assert {picks(t, 1)[0] for _ in range(4)} == {"1/0", "2/0"}, "no model: any instance"
    assert t.models() == ["a", "b"]


def test_a_withdrawn_model_is_unavailable_not_unknown() -> None:
    # The drain of a scale-down withdraws the only instance of a model for a while: clients get 503.
    t = RoutingTable()
    t.refresh(ADD, [inst(1, model="a"), inst(2, model="b")], 1)
    t.refresh(DEL, [inst(1)], 2)
    choice = t.select("a", 0.0)
    assert isinstance(choice, NoRoute) and choice.kind is NoRouteKind.UNAVAILABLE
    assert "no instance serving model `a` is published now" in choice.message
    assert t.models() == ["b"]
    t.refresh(SET, [inst(3, model="c")], 3)
    assert t.select("b", 0.0).kind is NoRouteKind.UNAVAILABLE, "SET withdrew b: known, so 503"
    assert t.select("z", 0.0).kind is NoRouteKind.UNKNOWN_MODEL


def test_nothing_published_is_unavailable_even_for_a_named_model() -> None:
    t = RoutingTable()
    assert t.select("a", 0.0).kind is NoRouteKind.UNAVAILABLE
    t.refresh(ADD, [inst(1, model="a")], 1)
    t.refresh(SET, [], 2)
    assert t.select("never-seen", 0.0).kind is NoRouteKind.UNAVAILABLE


def test_paused_model_is_unavailable_not_unknown() -> None:
    t = RoutingTable()
    t.refresh(ADD, [inst(1, model="a")], 1)
    t.refresh(PAUSE, [inst(1, ())], 2)
    choice = t.select("a", 0.0)
    assert isinstance(choice, NoRoute) and choice.kind is NoRouteKind.UNAVAILABLE
    assert t.models() == ["a"], "paused instances stay published"


def test_nothing_published_is_unavailable_for_requests_without_model() -> None:
    choice = RoutingTable().select(None, 0.0)
    assert isinstance(choice, NoRoute) and choice.kind is NoRouteKind.UNAVAILABLE


def test_headless_endpoints_are_never_routed_to() -> None:
    t = RoutingTable()
    t.refresh(ADD, [inst(1, (0, 1, 2), headless=(0, 2))], 1)
    held = [t.pick(None, 0.0) for _ in range(5)]
    assert {r.label for r in held} == {"1/1"}
    t.refresh(ADD, [inst(2, (0,), headless=(0,))], 2)
    choice = t.select(None, 0.0, exclude=[(1, 1)])
    assert isinstance(choice, NoRoute) and "headless" in choice.message


def test_excluded_endpoints_are_skipped_for_the_retry() -> None:
    t = RoutingTable()
    t.refresh(ADD, [inst(1, (0, 1))], 1)
    assert t.pick(None, 0.0, exclude=[(1, 0)]).label == "1/1"
    none = t.select(None, 0.0, exclude=[(1, 0), (1, 1)])
    assert isinstance(none, NoRoute) and "2 already tried" in none.message


def test_a_retry_prefers_another_instance_but_falls_back_to_the_same_one() -> None:
    t = RoutingTable()
    t.refresh(ADD, [inst(1, (0, 1)), inst(2, (5,))], 1)
    busy = t.select(None, 0.0, exclude=[(1, 0), (1, 1)])
    t.acquire(busy)
    t.acquire(busy)
    assert busy.label == "2/5" and t.outstanding((2, 5)) == 2
    assert t.select(None, 0.0, exclude=[(1, 0)]).label == "1/1", "no preference: least outstanding"
    assert t.select(None, 0.0, exclude=[(1, 0)], avoid_instances={1}).label == "2/5", "retry: another instance"
    assert t.select(None, 0.0, exclude=[(1, 0), (2, 5)], avoid_instances={1, 2}).label == "1/1", "fallback"


def test_failed_endpoint_cools_down_then_comes_back() -> None:
    t = RoutingTable(cooldown_sec=2.0)
    t.refresh(ADD, [inst(1, (0, 1))], 1)
    t.mark_failed((1, 0), now=10.0)
    assert picks(t, 3, now=10.0) == ["1/1"] * 3
    assert picks(t, 1, now=11.99) == ["1/1"]
    assert picks(t, 1, now=12.0) == ["1/0"]
    assert t.cooling_down((1, 0), 11.0) and not t.cooling_down((1, 0), 12.0)


def test_all_endpoints_cooling_is_unavailable() -> None:
    t = RoutingTable(cooldown_sec=2.0)
    t.refresh(ADD, [inst(1, (0,))], 1)
    t.mark_failed((1, 0), now=0.0)
    choice = t.select(None, 1.0)
    assert isinstance(choice, NoRoute) and choice.kind is NoRouteKind.UNAVAILABLE and "cooling down" in choice.message


def test_zero_cooldown_disables_skipping() -> None:
    t = RoutingTable(cooldown_sec=0.0)
    t.refresh(ADD, [inst(1, (0,))], 1)
    t.mark_failed((1, 0), now=0.0)
    assert picks(t, 1) == ["1/0"]


def test_negative_cooldown_is_refused() -> None:
    with pytest.raises(ValueError, match="cooldown_sec=-1"):
        RoutingTable(cooldown_sec=-1)


def test_cooldown_of_a_withdrawn_endpoint_is_forgotten() -> None:
    t = RoutingTable(cooldown_sec=5.0)
    t.refresh(ADD, [inst(1, (0,))], 1)
    t.mark_failed((1, 0), now=0.0)
    t.refresh(DEL, [inst(1, (0,))], 2)
    t.refresh(ADD, [inst(1, (0,))], 3)
    assert picks(t, 1, now=1.0) == ["1/0"]
    t.mark_failed((9, 9), now=0.0)  # never published: ignored
    assert not t.cooling_down((9, 9), 0.0)


def test_withdrawn_endpoint_gets_no_new_request_but_its_in_flight_ones_are_released() -> None:
    t = RoutingTable()
    t.refresh(ADD, [inst(1, (0, 1))], 1)
    in_flight = t.pick(None, 0.0)
    assert in_flight.label == "1/0"
    t.refresh(DEL, [inst(1, (0, 1))], 2)
    t.refresh(ADD, [inst(1, (1,))], 3)
    assert picks(t, 3) == ["1/1"] * 3
    assert t.outstanding((1, 0)) == 1
    t.release(in_flight)
    assert t.outstanding((1, 0)) == 0 and t.total_outstanding() == 0


def test_outstanding_counts_survive_republication() -> None:
    t = RoutingTable()
    t.refresh(ADD, [inst(1, (0, 1))], 1)
    a = t.pick(None, 0.0)
    t.refresh(ADD, [inst(1, (0, 1))], 2)
    assert t.pick(None, 0.0).label == "1/1", "rank 0 still has one in flight"
    assert state(t).instances[0].outstanding == {0: 1, 1: 1}
    t.release(a)
    t.release(a)  # extra release never goes below zero
    assert t.outstanding((1, 0)) == 0


def test_snapshot_lists_instances_by_id_with_endpoints_by_rank() -> None:
    t = RoutingTable(cooldown_sec=2.0)
    t.refresh(ADD, [inst(5, (2, 0)), inst(3, (1,))], 7)
    t.refresh(PAUSE, [inst(5, ())], 8)
    t.mark_failed((5, 2), now=1.0)
    snap = t.snapshot(now=1.5)
    assert snap.revision == 8
    assert [v.spec.id for v in snap.instances] == [3, 5]
    view = snap.instances[1]
    assert view.paused and [e.spec.id for e in view.endpoints] == [0, 2]
    assert [e.cooling_down for e in view.endpoints] == [False, True]
