"""The SGLang-shaped instance FT manager's rules (pure): the document, the apply's answers and the
error codes after the 202, the links and re-admission of a relaunched rank."""

from __future__ import annotations

import json

import pytest

from motor.sim.instance_ft_state import ACCEPTED_MESSAGE, ApplyRefused, InstanceFtState, RankView, parse_apply

H, U, D = RankView("healthy"), RankView("unhealthy"), RankView("dead")


def body(**doc) -> bytes:
    return json.dumps(doc).encode()


def test_bad_bodies_are_refused_with_a_message() -> None:
    for raw, message in [
        (b"{", "Request body is not valid JSON."),
        (body(instruction="reboot"), "Invalid instruction: 'reboot'."),
        (body(instruction="scale_down", params={"removed_dp_ranks": [4]}), "contains a rank out of range"),
        (body(instruction="scale_down", params={"removed_dp_ranks": ["1"]}), "non-negative integers"),
    ]:
        with pytest.raises(ApplyRefused, match=message):
            parse_apply(raw, 4)
    req = parse_apply(body(instruction="scale_down", params={"removed_dp_ranks": [1], "dp_master_ip": "x"}), 4)
    assert (req.removed_dp_ranks, req.request_id) == ((1,), "")  # extra params ignored, request_id optional


def test_a_round_202_then_409_while_it_runs_and_the_sticky_outcome() -> None:
    state = InstanceFtState(4, lease_sec=2.0)
    req = parse_apply(body(instruction="scale_down", params={"removed_dp_ranks": [1]}, request_id="r1"), 4)
    assert state.admit(req) == (202, {"message": ACCEPTED_MESSAGE, "request_id": "r1"})
    assert state.admit(req) == (409, {"message": "ft_operation_in_progress"})
    views = {0: U, 1: D, 2: U, 3: U}
    assert state.precheck(req, views) is None
    assert state.removed_after(req) == [1] and state.survivors(req) == [0, 2, 3]
    state.finish(req, None)
    after = {0: H, 1: None, 2: H, 3: H}
    assert state.document(after) == {"schema_version": 1, "total_engines": 4, "last_ft_request_id": "r1",
                                     "engines": [{"id": 0, "status": "healthy"}, {"id": 1, "status": "dead"},
                                                 {"id": 2, "status": "healthy"}, {"id": 3, "status": "healthy"}]}
    # Rank 1 is no longer expected: asking again is refused by code, after the 202.
    again = parse_apply(body(instruction="scale_down", params={"removed_dp_ranks": [1, 2]}, request_id="r2"), 4)
    assert state.precheck(again, {**after, 2: U}) == "scale_down_requires_expected_ranks"
    state.finish(again, "scale_down_requires_expected_ranks")
    assert state.document(after)["ft_error"] == "scale_down_requires_expected_ranks"
    assert state.removed_after(parse_apply(body(instruction="scale_down", params={"removed_dp_ranks": [0]}), 4)) \
        == [0, 1]


def test_the_error_codes_before_anything_runs() -> None:
    state = InstanceFtState(2, lease_sec=2.0)

    def code(removed: list[int], views) -> str | None:
        return state.precheck(parse_apply(body(instruction="scale_down", params={"removed_dp_ranks": removed}), 2),
                              views)

    assert code([1], {0: H, 1: H}) == "scale_down_requires_unresolved_expected_dp_fault"
    assert code([0, 1], {0: U, 1: D}) == "cannot_scale_down_all_expected_ranks"
    assert code([], {0: U, 1: D}) == "scale_down_requires_ranks"
    retry = parse_apply(body(instruction="retry"), 2)
    assert state.precheck(retry, {0: U, 1: D}) == "retry_requires_all_expected_processes_alive"
    assert state.precheck(retry, {0: U, 1: U}) is None
    state.fail_next = "injected"
    assert code([1], {0: U, 1: D}) == "injected" and state.fail_next is None


def test_links_lapse_to_dead_and_a_relaunched_rank_is_expected_again() -> None:
    state = InstanceFtState(2, lease_sec=2.0)
    state.register(0, "http://a/ft", "run-a", now=0.0)
    state.register(1, "http://b/ft", "run-b", now=0.0)
    assert state.linked(1.0) == {0: "http://a/ft", 1: "http://b/ft"}
    state.register(0, "http://a/ft", "run-a", now=2.5)
    assert state.linked(3.0) == {0: "http://a/ft"}  # rank 1's link lapsed: it reads dead
    state.expected[1] = False
    assert not state.register(1, "http://b/ft", "run-b", now=3.0)  # the same process: still removed
    assert state.register(1, "http://b/ft", "run-b2", now=3.1) and state.expected[1]
    state.busy_next = 1
    req = parse_apply(body(instruction="retry"), 2)
    assert state.admit(req)[0] == 409 and state.admit(req)[0] == 202


def test_inference_admission_pins_refuses_inactive_ranks_pauses_and_round_robins() -> None:
    from motor.sim.instance_ft_state import RouteRefusal

    state = InstanceFtState(3, lease_sec=2.0)
    for r in range(3):
        state.register(r, f"http://h:{r}/motor/internal/ft", "run", now=0.0)
    assert state.active_ranks(1.0) == []  # no view observed yet
    state.observe({0: H, 1: U, 2: D})
    assert state.active_ranks(1.0) == [0, 1]  # unhealthy still takes requests (it answers 503 itself)
    assert state.route(2, 1.0) == RouteRefusal(503, "routed_dp_rank=2 is not active")
    assert [state.route(None, 1.0) for _ in range(3)] == [0, 1, 0]
    assert state.route(1, 1.0) == 1
    req = parse_apply(body(instruction="scale_down", params={"removed_dp_ranks": [2]}), 3)
    state.admit(req)
    assert state.route(0, 1.0) == RouteRefusal(503, "fault_tolerance_paused")
    assert state.route(2, 1.0) == RouteRefusal(503, "routed_dp_rank=2 is not active")  # checked first, as SGLang
    state.finish(req, None)
    state.observe({0: H, 1: H, 2: H})
    assert state.route(2, 1.0) == RouteRefusal(503, "routed_dp_rank=2 is not active")  # removed: not expected
    assert state.active_ranks(5.0) == []  # every link lapsed
    assert state.pinned_requests == {2: 3, 1: 1, 0: 1} and state.forwarded_requests == {0: 2, 1: 2}
    assert state.unpinned_requests == 3


def test_routed_dp_rank_values() -> None:
    from motor.sim.instance_ft_inference import BadRequest, inference_url, parse_routed_dp_rank

    assert parse_routed_dp_rank(body(prompt="x"), 4) is None
    assert parse_routed_dp_rank(body(routed_dp_rank=None), 4) is None
    assert parse_routed_dp_rank(body(routed_dp_rank=3), 4) == 3
    for value in ["1", 1.0, False, -1, 4]:
        with pytest.raises(BadRequest, match=f"routed_dp_rank must be an integer in 0..3, got {json.dumps(value)}"):
            parse_routed_dp_rank(body(routed_dp_rank=value), 4)
    for raw in (b"{", b"[]"):
        with pytest.raises(BadRequest, match="request body"):
            parse_routed_dp_rank(raw, 4)
    state = InstanceFtState(1, lease_sec=2.0)
    state.register(0, "http://h:7/motor/internal/ft", "run", now=0.0)
    assert inference_url(state, 0, "/v1/completions") == "http://h:7/v1/completions"
