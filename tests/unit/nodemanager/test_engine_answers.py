"""The engine FT API's documents: status identity contract, malformed answers, diagnosing, proto
mapping, the apply body and the apply answer (202 / 400 with string or list detail)."""

from __future__ import annotations

import json

import pytest

from gen.motor.v1 import common_pb2
from nodemanager.engine_answers import (
    EngineIdentityError,
    EngineStatusMalformed,
    build_scale_down_body,
    parse_apply_answer,
    parse_status,
)


def doc(*entries: dict, **extra: object) -> bytes:
    return json.dumps({"schema_version": 1, "total_engines": len(entries), "engines": list(entries), **extra}).encode()


def test_healthy_entry_is_accepted() -> None:
    e = parse_status(3, 200, doc({"id": 3, "status": "healthy"}), 12.5)
    assert (e.id, e.status, e.ft_state, e.mask, e.observed_at_unix_sec) == (3, "healthy", None, (), 12.5)
    pb = e.to_pb()
    assert pb.status == common_pb2.ENGINE_HEALTH_HEALTHY and pb.ft_state == common_pb2.FT_STATE_UNSPECIFIED


def test_full_entry_maps_every_field() -> None:
    e = parse_status(1, 200, doc({"id": 1, "status": "unhealthy", "fault_info": "peer 2 gone", "mask": [2],
                                  "ft_state": "failed", "last_ft_request_id": "r9", "ft_error": "boom"}))
    pb = e.to_pb()
    assert pb.status == common_pb2.ENGINE_HEALTH_UNHEALTHY and pb.ft_state == common_pb2.FT_STATE_FAILED
    assert (pb.fault_info, pb.last_ft_request_id, pb.ft_error, list(pb.mask)) == ("peer 2 gone", "r9", "boom", [2])
    assert parse_status(1, 200, doc({"id": 1, "status": "dead", "ft_state": "recovering"})).to_pb().ft_state == \
        common_pb2.FT_STATE_RECOVERING


def test_diagnosing_is_a_known_status_passed_through() -> None:
    # vLLM's transient state after a fault while it queries its all2all mask: never a protocol error.
    e = parse_status(2, 200, doc({"id": 2, "status": "diagnosing", "dp_rank": 2}))
    assert (e.id, e.status, e.ft_state, e.mask) == (2, "diagnosing", None, ())
    assert e.to_pb().status == common_pb2.ENGINE_HEALTH_DIAGNOSING


def test_extra_keys_are_ignored() -> None:
    e = parse_status(4, 200, doc({"id": 4, "status": "unhealthy", "dp_rank": 4, "mask": [1], "future": {"x": 1}},
                                 future_top_level=True))
    assert (e.status, e.mask) == ("unhealthy", (1,))


def test_unknown_status_names_every_known_one() -> None:
    with pytest.raises(EngineStatusMalformed) as info:
        parse_status(1, 200, doc({"id": 1, "status": "rebuilding"}))
    expected = "engines[0].status is rebuilding, not one of ['dead', 'diagnosing', 'healthy', 'unhealthy']"
    assert expected in str(info.value)


def test_long_bad_values_are_quoted_shortened() -> None:
    with pytest.raises(EngineStatusMalformed) as info:
        parse_status(1, 200, doc({"id": 1, "status": "healthy", "fault_info": ["x" * 500]}))
    text = str(info.value)
    assert "engines[0].fault_info must be a string, received ['xxx" in text and text.endswith("...")
    assert len(text) < 200


def test_unknown_ft_state_is_kept_raw() -> None:
    pb = parse_status(0, 200, doc({"id": 0, "status": "unhealthy", "ft_state": "rebuilding"})).to_pb()
    assert pb.ft_state == common_pb2.FT_STATE_UNKNOWN and pb.raw_ft_state == "rebuilding"


def test_null_optional_fields_count_as_absent() -> None:
    e = parse_status(0, 200, doc({"id": 0, "status": "healthy", "ft_state": None, "mask": None}))
    assert e.ft_state is None and e.mask == ()


@pytest.mark.parametrize(
    ("entries", "expected"),
    [
        ([{"id": 7, "status": "healthy"}], "the single entry has id 7, expected 1"),
        ([], "no engines entry"),
        ([{"id": 1, "status": "healthy"}, {"id": 1, "status": "dead"}], "duplicate engine ids [1]"),
        ([{"id": 1, "status": "healthy"}, {"id": 4, "status": "healthy"}], "unknown engine ids [4] beside it"),
        ([{"id": 0, "status": "healthy"}, {"id": 4, "status": "healthy"}], "unknown engine ids [0, 4] and no entry"),
        ([{"status": "healthy"}], "engines[0].id is missing"),
        ([{"id": "1", "status": "healthy"}], "engines[0].id is missing or not an integer"),
        ([{"id": True, "status": "healthy"}], "not an integer"),
    ],
)
def test_identity_violations_are_never_fixed_up(entries: list, expected: str) -> None:
    with pytest.raises(EngineIdentityError) as info:
        parse_status(1, 200, doc(*entries))
    text = str(info.value)
    assert text.startswith("engine identity contract violated: endpoint 1: ")
    assert expected in text


@pytest.mark.parametrize(
    ("status", "body", "expected"),
    [
        (200, b"<html>", "status body is not JSON: received '<html>'"),
        (200, b"[1, 2]", "not a JSON object"),
        (200, b'{"engines": {"id": 1}}', "'engines' is not a list"),
        (200, b'{"engines": ["x"]}', "engines[0] is not an object"),
        (200, doc({"id": 1, "status": "zombie"}), "engines[0].status is zombie, not one of"),
        (200, doc({"id": 1}), "engines[0].status is None"),
        (200, doc({"id": 1, "status": "healthy", "mask": "2"}), "mask must be a list of integers"),
        (200, doc({"id": 1, "status": "healthy", "ft_error": 5}), "engines[0].ft_error must be a string, received 5"),
        (500, b"internal", "status route answered HTTP 500: 'internal'"),
        (404, b"", "HTTP 404"),
    ],
)
def test_malformed_answers_are_named(status: int, body: bytes, expected: str) -> None:
    with pytest.raises(EngineStatusMalformed) as info:
        parse_status(1, status, body)
    assert str(info.value).startswith("engine status malformed: endpoint 1: ")
    assert expected in str(info.value)


def test_scale_down_body_is_exact_and_sorted() -> None:
    body = build_scale_down_body("rid-1", [3, 1], "127.0.0.2", 29601)
    assert json.loads(body) == {
        "instruction": "scale_down", "request_id": "rid-1",
        "params": {"removed_dp_ranks": [1, 3], "dp_master_ip": "127.0.0.2", "dp_store_port": 29601},
    }
    assert list(json.loads(body)) == ["instruction", "request_id", "params"]


def test_apply_202_takes_the_engines_request_id() -> None:
    assert parse_apply_answer(202, b'{"message": "ok", "request_id": "server-7"}') == (True, "server-7", "ok")
    assert parse_apply_answer(202, b"") == (True, "", "")


def test_apply_400_with_string_detail() -> None:
    accepted, rid, message = parse_apply_answer(400, b'{"detail": "Invalid instruction"}')
    assert (accepted, rid) == (False, "") and message == "HTTP 400: Invalid instruction"


def test_apply_400_with_list_detail_vllm_033() -> None:
    body = json.dumps({"detail": [{"type": "missing", "loc": ["body"], "msg": "Field required", "input": None}]})
    accepted, _, message = parse_apply_answer(400, body.encode())
    assert not accepted and message == "HTTP 400: body: Field required"


def test_apply_other_answers_are_not_accepted() -> None:
    assert parse_apply_answer(200, b'{"request_id": "x"}')[0] is False
    assert parse_apply_answer(500, b"oops") == (False, "", "HTTP 500: 'oops'")


def test_apply_202_body_is_informative_only() -> None:
    # 202 means accepted; a key of the wrong type is dropped rather than turning it into a failure.
    assert parse_apply_answer(202, b'{"message": "ok", "request_id": 5}') == (True, "", "ok")
    body = b'{"request_id": "r", "message": null}'
    assert parse_apply_answer(202, body) == (True, "r", body.decode())
    assert parse_apply_answer(202, b"[1]") == (True, "", "[1]")


def test_apply_error_details_of_other_shapes_are_rendered() -> None:
    body = json.dumps({"detail": ["plain", {"no_msg": 1}, {"msg": "bad", "loc": ["body", None, "params"]}]})
    assert parse_apply_answer(400, body.encode())[2] == 'HTTP 400: plain; {"no_msg": 1}; body.params: bad'
    assert parse_apply_answer(409, b'{"detail": {"code": 7}}')[2] == 'HTTP 409: {"code": 7}'
    assert parse_apply_answer(400, b'{"error": "x"}')[2] == "HTTP 400: '{\"error\": \"x\"}'"
