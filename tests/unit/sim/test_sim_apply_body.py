from __future__ import annotations

import json

import pytest

from motor.sim.apply_body import ApplyBodyError, Instruction, parse_apply_body

pytestmark = pytest.mark.timeout(30)  # per test, module fixtures included


def body(**fields: object) -> bytes:
    return json.dumps(fields).encode()


def test_well_formed_scale_down() -> None:
    req = parse_apply_body(body(instruction="scale_down", request_id="r-1",
                                params={"removed_dp_ranks": [1], "dp_master_ip": "127.0.0.1", "dp_store_port": 9}))
    assert req.instruction is Instruction.SCALE_DOWN
    assert req.request_id == "r-1"
    assert req.params["removed_dp_ranks"] == [1]
    assert req.unknown_params() == []


def test_params_default_to_empty_and_unknown_keys_are_reported_not_refused() -> None:
    req = parse_apply_body(body(instruction="retry", request_id="r"))
    assert req.params == {}
    req = parse_apply_body(body(instruction="retry", request_id="r", params={"foo": 1}, extra="ignored"))
    assert req.unknown_params() == ["foo"]


@pytest.mark.parametrize(
    "raw, named",
    [
        (b"", "not valid JSON"),
        (b"{", "not valid JSON"),
        (b"\xff\xfe", "not valid JSON"),
        (b'"scale_down"', "str 'scale_down'"),
        (b"[]", "list []"),
        (b"null", "NoneType None"),
        (body(request_id="r"), "missing 'instruction'"),
        (body(instruction="shrink", request_id="r"), "invalid instruction 'shrink'"),
        (body(instruction="SCALE_DOWN", request_id="r"), "invalid instruction 'SCALE_DOWN'"),
        (body(instruction=None, request_id="r"), "invalid instruction None"),
        (body(instruction="scale_down"), "missing 'request_id'"),
        (body(instruction="scale_down", request_id=""), "request_id must not be blank, got ''"),
        (body(instruction="scale_down", request_id=" \t"), "request_id must not be blank"),
        (body(instruction="scale_down", request_id=5), "request_id must be a string, got int 5"),
        (body(instruction="scale_down", request_id="a" * 300), "300 characters"),
        (body(instruction="scale_down", request_id="a\nb"), "control characters"),
        (body(instruction="scale_down", request_id="r", params=[1]), "params must be a JSON object, got list [1]"),
        (body(instruction="scale_down", request_id="r", params="x"), "got str 'x'"),
        (body(instruction="scale_down", request_id="r", params=None), "got NoneType None"),
    ],
)
def test_malformed_bodies_name_the_bad_value(raw: bytes, named: str) -> None:
    with pytest.raises(ApplyBodyError) as info:
        parse_apply_body(raw)
    assert named in str(info.value)
