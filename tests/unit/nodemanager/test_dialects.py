"""Each engine dialect module from recorded answers: what it reads into Motor's typed states and
what it writes for Motor's commands (vLLM's PR, vLLM 0.33.0, the RFC's, SGLang's instance manager)."""

from __future__ import annotations

import json

import pytest

from nodemanager.dialects import DIALECTS, SCALE_DOWN, SCALE_UP, FtCommand, UnsupportedInstruction, make_dialect
from nodemanager.engine_answers import EngineIdentityError, EngineStatusMalformed
from nodemanager.engine_http import EngineAddress

COMMAND = FtCommand(SCALE_DOWN, "motor-r1", removed_dp_ranks=(1, 3), dp_master_ip="127.0.0.2", dp_master_rank=0,
                    dp_store_port=29602, newly_removed_dp_ranks=(3,))


def doc(**top) -> bytes:
    engines = top.pop("engines", [{"id": r, "status": s} for r, s in enumerate(["healthy", "dead", "unhealthy", "dead"])])
    return json.dumps({"schema_version": 1, "total_engines": top.pop("total_engines", len(engines)),
                       "engines": engines, **top}).encode()


def test_every_dialect_has_one_module_and_a_name() -> None:
    assert sorted(DIALECTS) == ["rfc", "sglang", "vllm", "vllm-0.33"]
    with pytest.raises(ValueError, match="'trt' is not one of"):
        make_dialect("trt", 4)


# -- per-rank dialects ----------------------------------------------------------------------------
def test_vllm_pr_body_and_answers() -> None:
    d = make_dialect("vllm", 4)
    assert json.loads(d.apply_body(COMMAND)) == {
        "instruction": "scale_down", "request_id": "motor-r1",
        "params": {"removed_dp_ranks": [1, 3], "dp_master_ip": "127.0.0.2", "dp_store_port": 29602}}
    assert d.apply_targets([0, 2], COMMAND) == [0, 2]
    entry = d.parse_status(2, 200, json.dumps({"schema_version": 1, "total_engines": 1, "engines": [
        {"id": 2, "status": "unhealthy", "fault_info": "RuntimeError", "mask": [3]}]}).encode())
    assert (entry.status, entry.ft_state, entry.mask) == ("unhealthy", None, (3,))
    answer = d.parse_apply_answer(202, b'{"message": "accepted", "request_id": "motor-r1"}')
    assert (answer.accepted, answer.engine_request_id, answer.busy) == (True, "motor-r1", False)
    refused = d.parse_apply_answer(400, b'{"detail": "request_id must be a non-empty string"}')
    assert not refused.accepted and refused.message == "HTTP 400: request_id must be a non-empty string"
    local = EngineAddress(2, "127.0.0.2", 8001)
    assert d.ft_address(2, lambda _: local) is local


def test_vllm_033_reads_the_detail_list_and_the_server_made_id() -> None:
    d = make_dialect("vllm-0.33", 4)
    assert d.default_prefix == "/fault_tolerance"
    listed = d.parse_apply_answer(400, json.dumps({"detail": [
        {"loc": ["body"], "msg": "Content-Type must be application/json", "type": "value_error"}]}).encode())
    assert listed.message == "HTTP 400: body: Content-Type must be application/json"
    invalid = d.parse_apply_answer(400, b'{"detail": "Invalid instruction: scale_down"}')
    assert invalid.message == "HTTP 400: Invalid instruction: scale_down" and not invalid.accepted
    made = d.parse_apply_answer(202, b'{"message": "ok", "request_id": "5f1c"}')
    assert made.engine_request_id == "5f1c"


def test_rfc_sends_dp_master_rank_and_reads_ft_state() -> None:
    d = make_dialect("rfc", 4)
    assert json.loads(d.apply_body(COMMAND))["params"] == {
        "removed_dp_ranks": [1, 3], "dp_master_ip": "127.0.0.2", "dp_store_port": 29602, "dp_master_rank": 0}
    entry = d.parse_status(0, 200, json.dumps({"schema_version": 1, "total_engines": 1, "engines": [
        {"id": 0, "status": "unhealthy", "ft_state": "failed", "ft_error": "placement infeasible",
         "last_ft_request_id": "motor-r1"}]}).encode())
    assert (entry.status, entry.ft_state, entry.ft_error) == ("unhealthy", "failed", "placement infeasible")


# -- SGLang's instance-level manager --------------------------------------------------------------
def test_sglang_maps_the_instance_document_to_each_original_rank() -> None:
    d = make_dialect("sglang", 4, ("127.0.0.80", 30000))
    assert d.instance_level
    statuses = [d.parse_status(r, 200, doc()).status for r in range(4)]
    assert statuses == ["healthy", "dead", "unhealthy", "dead"]
    entry = d.parse_status(2, 200, doc())
    assert (entry.id, entry.ft_state, entry.mask, entry.ft_error) == (2, None, (), None)


@pytest.mark.parametrize(("body", "error", "match"), [
    (doc(engines=[{"id": 0, "status": "healthy"}, {"id": 1, "status": "healthy"}, {"id": 2, "status": "healthy"}],
         total_engines=4), EngineIdentityError, r"missing \[3\]"),
    (doc(engines=[{"id": r, "status": "healthy"} for r in (0, 1, 1, 3)]), EngineIdentityError, r"duplicate \[1\]"),
    (doc(engines=[{"id": r, "status": "healthy"} for r in (0, 1, 2, 7)]), EngineIdentityError, r"unknown \[7\]"),
    (doc(total_engines=1), EngineIdentityError, "total_engines is 1, expected the instance's dp_size 4"),
    (doc(engines=[{"id": "0", "status": "healthy"}] + [{"id": r, "status": "healthy"} for r in (1, 2, 3)]),
     EngineIdentityError, "not an integer"),
    (doc(engines=[{"id": r, "status": "diagnosing"} for r in range(4)]), EngineStatusMalformed,
     r"status is diagnosing, not one of \['healthy', 'unhealthy', 'dead'\]"),
    (doc(ft_error=7, last_ft_request_id="x"), EngineStatusMalformed, "ft_error must be a string"),
    (b"[]", EngineStatusMalformed, "not a JSON object"),
    (b"nope", EngineStatusMalformed, "not JSON"),
])
def test_sglang_identity_is_exactly_the_instance_ranks_each_once(body: bytes, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        make_dialect("sglang", 4, ("127.0.0.80", 30000)).parse_status(0, 200, body)


@pytest.mark.parametrize("code", ["scale_down_requires_unresolved_expected_dp_fault",
                                  "cannot_scale_down_all_expected_ranks", "scale_down_requires_expected_ranks"])
def test_a_sticky_top_level_error_fails_only_the_round_of_its_request_id(code: str) -> None:
    d = make_dialect("sglang", 4, ("127.0.0.80", 30000))
    body = doc(last_ft_request_id="motor-r1", ft_error=code)
    mine = d.parse_status(0, 200, body, request_id="motor-r1")
    assert (mine.status, mine.ft_state, mine.ft_error) == ("healthy", "failed", code)
    other = d.parse_status(0, 200, body, request_id="motor-r2")
    assert (other.ft_state, other.ft_error, other.last_ft_request_id) == (None, code, "motor-r1")
    polled = d.parse_status(0, 200, body)
    assert polled.ft_state is None
    done = d.parse_status(0, 200, doc(last_ft_request_id="motor-r1"), request_id="motor-r1")
    assert (done.ft_state, done.ft_error) == (None, None)


def test_sglang_apply_is_one_request_for_the_instance_with_this_rounds_ranks() -> None:
    d = make_dialect("sglang", 4, ("127.0.0.80", 30000))
    assert json.loads(d.apply_body(COMMAND)) == {"instruction": "scale_down", "params": {"removed_dp_ranks": [3]},
                                                 "request_id": "motor-r1"}
    unknown_history = FtCommand(SCALE_DOWN, "motor-r1", removed_dp_ranks=(1, 3))
    assert json.loads(d.apply_body(unknown_history))["params"] == {"removed_dp_ranks": [1, 3]}
    # The lowest survivor's pod sends it; every other pod sends nothing.
    assert d.apply_targets([0, 2], COMMAND) == [0]
    assert d.apply_targets([2], COMMAND) == []
    assert d.apply_targets([2], FtCommand(SCALE_DOWN, "r", removed_dp_ranks=(0, 1))) == [2]
    addr = d.ft_address(2, lambda i: EngineAddress(i, "127.0.0.81", 8002))
    assert (addr.endpoint_id, addr.host, addr.port) == (2, "127.0.0.80", 30000)
    assert d.ft_address(2, lambda _: None) is None


def test_sglang_answers_202_409_and_400_message() -> None:
    d = make_dialect("sglang", 4, ("127.0.0.80", 30000))
    ok = d.parse_apply_answer(202, json.dumps({
        "message": "Request accepted; poll /v1/fault_tolerance/status for updates.", "request_id": "motor-r1"}).encode())
    assert (ok.accepted, ok.engine_request_id, ok.busy) == (True, "motor-r1", False)
    busy = d.parse_apply_answer(409, b'{"message": "ft_operation_in_progress"}')
    assert (busy.accepted, busy.busy, busy.message) == (False, True, "HTTP 409: ft_operation_in_progress")
    bad = d.parse_apply_answer(400, b'{"message": "\'removed_dp_ranks\' contains a rank out of range."}')
    assert (bad.accepted, bad.busy) == (False, False)
    assert bad.message == "HTTP 400: 'removed_dp_ranks' contains a rank out of range."
    invalid = d.parse_apply_answer(400, b'{"message": "Invalid instruction: \'reboot\'."}')
    assert invalid.message == "HTTP 400: Invalid instruction: 'reboot'."


# -- scale_up (docs/engine-protocol-scale-up.md) ----------------------------------------------------
SCALE_UP_COMMAND = FtCommand(SCALE_UP, "su-7-a", removed_dp_ranks=(3,), dp_master_ip="127.0.0.2", dp_master_rank=0,
                             dp_store_port=29601, added_dp_ranks=(2, 1))


@pytest.mark.parametrize("name", ["vllm", "rfc"])
def test_vllm_and_rfc_send_the_contracts_scale_up_body(name: str) -> None:
    d = make_dialect(name, 4)
    assert d.supports_scale_up
    d.check_supported(SCALE_UP)
    assert json.loads(d.apply_body(SCALE_UP_COMMAND)) == {
        "instruction": "scale_up", "request_id": "su-7-a",
        "params": {"added_dp_ranks": [1, 2], "removed_dp_ranks": [3], "dp_master_ip": "127.0.0.2",
                   "dp_store_port": 29601}}
    assert d.apply_targets([0, 1], SCALE_UP_COMMAND) == [0, 1]


@pytest.mark.parametrize("name", ["vllm-0.33", "sglang"])
def test_engines_without_scale_up_refuse_it_before_anything_is_sent(name: str) -> None:
    d = make_dialect(name, 4, ("127.0.0.9", 30000))
    assert not d.supports_scale_up
    with pytest.raises(UnsupportedInstruction, match=f"dialect {name!r} has no scale_up"):
        d.check_supported(SCALE_UP)
    with pytest.raises(UnsupportedInstruction):
        d.apply_body(SCALE_UP_COMMAND)
    d.check_supported(SCALE_DOWN)  # the other instructions go as before
