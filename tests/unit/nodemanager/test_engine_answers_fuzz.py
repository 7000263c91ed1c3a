"""Fuzz of the NodeManager's engine answer parsing (hypothesis): random JSON, random bytes, truncated
bodies, wrong types in every key, any HTTP status. A status answer is either a well-typed entry of the
endpoint asked for or an EngineProtocolError naming the endpoint; an apply answer never raises and
is accepted exactly on 202. Bounded example counts; the counts are reported in pytest's summary."""

from __future__ import annotations

import json
import os
from collections import Counter
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nodemanager.engine_answers import (
    HEALTH_VALUES,
    EngineProtocolError,
    EngineStatusEntry,
    parse_apply_answer,
    parse_status,
)

EXAMPLES = int(os.environ.get("MOTOR_FUZZ_EXAMPLES", "150"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])

JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)
KEYS = ("id", "status", "mask", "ft_state", "fault_info", "last_ft_request_id", "ft_error")
VALID_ENTRY = {"id": 3, "status": "unhealthy", "mask": [1], "ft_state": "recovering", "fault_info": "peer 1",
               "last_ft_request_id": "r1", "ft_error": "e"}


def _doc(*entries: Any) -> bytes:
    return json.dumps({"schema_version": 1, "total_engines": len(entries), "engines": list(entries)}).encode()


def _check_status_outcome(endpoint_id: int, http_status: int, body: bytes,
                          outcomes: Counter[str]) -> EngineStatusEntry | None:
    try:
        entry = parse_status(endpoint_id, http_status, body)
    except EngineProtocolError as exc:
        assert exc.endpoint_id == endpoint_id
        assert f"endpoint {endpoint_id}" in str(exc)
        assert len(str(exc)) < 1024, "an error quotes a bounded part of the body"
        outcomes[type(exc).__name__] += 1
        return None
    assert isinstance(entry, EngineStatusEntry)
    assert http_status == 200 and entry.id == endpoint_id and entry.status in HEALTH_VALUES
    for key in ("ft_state", "fault_info", "last_ft_request_id", "ft_error"):
        assert getattr(entry, key) is None or isinstance(getattr(entry, key), str)
    assert all(isinstance(r, int) and not isinstance(r, bool) for r in entry.mask)
    entry.to_pb()  # every parsed entry maps to the contract
    outcomes["parsed"] += 1
    return entry


def test_random_json_bodies(fuzz_report) -> None:
    outcomes: Counter[str] = Counter()

    @FUZZ
    @given(endpoint_id=st.integers(0, 8), doc=JSON | st.fixed_dictionaries({"engines": st.lists(JSON, max_size=3)}))
    def run(endpoint_id: int, doc: Any) -> None:
        _check_status_outcome(endpoint_id, 200, json.dumps(doc).encode(), outcomes)

    run()
    fuzz_report(f"engine status, random JSON: {sum(outcomes.values())} cases {dict(outcomes)}")
    assert sum(outcomes.values()) >= min(EXAMPLES, 50)


def test_random_bytes_and_http_status(fuzz_report) -> None:
    outcomes: Counter[str] = Counter()

    @FUZZ
    @given(http_status=st.sampled_from([200, 200, 202, 204, 400, 404, 500, 503]) | st.integers(100, 599),
           body=st.binary(max_size=64) | st.sampled_from([_doc(VALID_ENTRY), b"\xff\xfe{", b"", b"null"]))
    def run(http_status: int, body: bytes) -> None:
        _check_status_outcome(3, http_status, body, outcomes)

    run()
    fuzz_report(f"engine status, random bytes and HTTP status: {sum(outcomes.values())} cases {dict(outcomes)}")


def test_truncated_bodies_are_malformed_never_parsed(fuzz_report) -> None:
    full = _doc(VALID_ENTRY)
    outcomes: Counter[str] = Counter()

    @FUZZ
    @given(cut=st.integers(0, len(full) - 1))
    def run(cut: int) -> None:
        try:
            parse_status(3, 200, full[:cut])
        except EngineProtocolError as exc:
            assert "status body is not JSON" in str(exc), exc
            outcomes[type(exc).__name__] += 1
        else:
            raise AssertionError(f"a body cut at {cut} of {len(full)} bytes was parsed")

    run()
    assert parse_status(3, 200, full).status == "unhealthy"
    fuzz_report(f"engine status, truncated bodies: {sum(outcomes.values())} cases {dict(outcomes)}")


def test_wrong_types_in_every_key(fuzz_report) -> None:
    outcomes: Counter[str] = Counter()

    @FUZZ
    @given(key=st.sampled_from(KEYS), value=JSON, drop=st.booleans())
    def run(key: str, value: Any, drop: bool) -> None:
        entry = dict(VALID_ENTRY)
        if drop:
            entry.pop(key)
        else:
            entry[key] = value
        parsed = _check_status_outcome(3, 200, _doc(entry), outcomes)
        if key == "id" and (drop or type(value) is not int or value != 3):
            assert parsed is None, f"id {value!r} (dropped={drop}) was accepted for endpoint 3"
        if key == "status" and (drop or not (isinstance(value, str) and value in HEALTH_VALUES)):
            assert parsed is None, f"status {value!r} (dropped={drop}) was accepted"

    run()
    fuzz_report(f"engine status, wrong types per key: {sum(outcomes.values())} cases {dict(outcomes)}")


def test_apply_answers_never_raise(fuzz_report) -> None:
    outcomes: Counter[str] = Counter()

    @FUZZ
    @given(http_status=st.sampled_from([202, 400, 409, 500]) | st.integers(100, 599),
           body=st.binary(max_size=64) | JSON.map(lambda v: json.dumps(v).encode())
           | st.fixed_dictionaries({"detail": JSON}).map(lambda v: json.dumps(v).encode()))
    def run(http_status: int, body: bytes) -> None:
        accepted, request_id, message = parse_apply_answer(http_status, body)
        assert accepted == (http_status == 202)
        assert isinstance(request_id, str) and isinstance(message, str) and len(message) < 1024
        outcomes["accepted" if accepted else "refused"] += 1

    run()
    fuzz_report(f"engine apply answers: {sum(outcomes.values())} cases {dict(outcomes)}")
