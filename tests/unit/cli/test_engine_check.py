"""motorctl engine-check's judgement of engine answers (no sockets: the HTTP answers are given).

Real engines (the reference engine, vLLM 0.33.0's router, the fake engine's bad modes) are checked in
tests/integration/cli and tests/integration/vllm."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest

from motor.cli import engine_check
from motor.cli.engine_check import HttpAnswer, Unreachable, check_engine
from motor.cli.motorctl import build_parser

URL = "http://127.0.0.9:8001"


class Answers:
    """The engine's side: canned answers per (method, path); records every call made."""

    def __init__(self, status_doc: Any = None, *, status_code: int = 200, raw: bytes | None = None,
                 apply: tuple[int, Any] | None = None) -> None:
        self.status = (status_code, raw if raw is not None else json.dumps(status_doc).encode())
        self.apply = apply
        self.calls: list[tuple[str, str, Any]] = []

    def __call__(self, method: str, url: str, body: bytes | None, timeout_sec: float) -> HttpAnswer:
        self.calls.append((method, url, None if body is None else json.loads(body)))
        if method == "GET":
            return HttpAnswer(self.status[0], self.status[1], 0.001)
        assert self.apply is not None, f"unexpected {method} {url}"
        code, doc = self.apply
        if callable(doc):
            doc = doc(json.loads(body or b"{}"))
        return HttpAnswer(code, doc if isinstance(doc, bytes) else json.dumps(doc).encode(), 0.001)


def doc(*entries: dict[str, Any], **top: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"schema_version": 1, "total_engines": len(entries), "engines": list(entries)}
    out.update(top)
    return out


def run(answers: Answers, *argv: str) -> tuple[int, str, str]:
    args = build_parser().parse_args(["engine-check", URL, *argv])
    out, err = io.StringIO(), io.StringIO()
    code = engine_check.run(args, out, err, transport=answers)
    return code, out.getvalue(), err.getvalue()


def fails(report: engine_check.Report) -> list[str]:
    return report.failures


# -- conforming answers ----------------------------------------------------------------------------
def test_a_vllm_entry_conforms_and_only_status_is_read() -> None:
    answers = Answers(doc({"id": 1, "status": "healthy"}))
    code, out, err = run(answers, "--rank", "1")
    assert code == 0 and err == ""
    assert answers.calls == [("GET", f"{URL}/v1/fault_tolerance/status", None)]  # no apply without --try-retry
    lines = out.splitlines()
    assert lines[0] == f"engine-check {URL} prefix /v1/fault_tolerance"
    assert "ok    identity: one entry, id 1 = --rank" in lines
    assert "ok    dialect: vLLM (no ft_state)" in lines
    assert "ok    Motor's NodeManager bridge reads endpoint 1: status=healthy" in lines
    assert lines[-1] == "result: conforms to Motor's engine FT contract"


def test_rfc_dialect_with_every_optional_key() -> None:
    entry = {"id": 3, "status": "unhealthy", "ft_state": "recovering", "fault_info": "link down", "mask": [1, 0, 1],
             "dp_rank": 3, "last_ft_request_id": "sd-1", "ft_error": None, "engine_index": 0, "vendor": {}}
    report = check_engine(URL, rank=3, transport=Answers(doc(entry, cluster="a")))
    assert report.conforms, report.render()
    text = report.render()
    for line in ("ok    dialect: RFC (vLLM-Ascend), ft_state 'recovering'", "ok    mask: a list of integers",
                 "ok    fault_info: a string", "ok    ft_error: null", "ok    dp_rank: 3 (ignored by Motor)",
                 "info  extra entry keys (ignored by Motor): engine_index, vendor",
                 "info  extra document keys (ignored by Motor): cluster"):
        assert line in text.splitlines(), text


@pytest.mark.parametrize("status", ["healthy", "diagnosing", "unhealthy", "dead"])
def test_every_known_status_conforms(status: str) -> None:
    report = check_engine(URL, rank=0, transport=Answers(doc({"id": 0, "status": status})))
    assert report.conforms, report.render()
    assert any(t.startswith(f"status: {status!r}") for _, t in report.lines)


def test_without_rank_the_id_is_reported_and_schema_version_is_optional() -> None:
    report = check_engine(URL, transport=Answers({"total_engines": 1, "engines": [{"id": 7, "status": "dead"}]}))
    assert report.conforms, report.render()
    assert ("ok", "identity: one entry, id 7 (give --rank to check it against the global DP rank)") in report.lines
    assert ("info", "'schema_version' absent (optional)") in report.lines
    assert ("ok", "Motor's NodeManager bridge reads endpoint 7: status=dead") in report.lines


# -- non-conforming answers: each FAIL says why ---------------------------------------------------------
@pytest.mark.parametrize(("answers", "reasons"), [
    (Answers(doc({"id": 2, "status": "healthy"})), ["identity: the entry's id is 2, expected --rank 1",
                                                   "the single entry has id 2, expected 1"]),
    (Answers(doc()), ["identity: 'engines' is empty", "no engines entry; expected exactly one with id 1"]),
    (Answers(doc({"id": 1, "status": "healthy"}, {"id": 1, "status": "healthy"})),
     ["identity: duplicate ids [1] in [1, 1]", "identity: 2 entries (ids [1, 1])"]),
    (Answers(doc({"id": 1, "status": "healthy"}, {"id": 5, "status": "healthy"})),
     ["identity: 2 entries (ids [1, 5]); external-LB mode has exactly one", "unknown engine ids [5] beside it"]),
    (Answers(doc({"id": "1", "status": "healthy"})), ["identity: engines[0].id is 1, not an integer",
                                                     "engines[0].id is missing or not an integer"]),
    (Answers(doc({"id": True, "status": "healthy"})), ["identity: engines[0].id is True, not an integer"]),
    (Answers(doc({"status": "healthy"})), ["identity: engines[0].id is missing"]),
    (Answers(doc({"id": 1, "status": "zombie"})), [("status: zombie is not one of ['healthy', 'diagnosing', "
                                                  "'unhealthy', 'dead']")]),
    (Answers(doc({"id": 1})), ["status: missing"]),
    (Answers(doc({"id": 1, "status": "unhealthy", "ft_state": "rebuilding"})),
     ["dialect: RFC (ft_state present), but ft_state rebuilding is not one of ['recovering', 'failed']"]),
    (Answers(doc({"id": 1, "status": "unhealthy", "fault_info": 17})),
     ["fault_info: 17 is not a string", "engines[0].fault_info must be a string, received 17"]),
    (Answers(doc({"id": 1, "status": "unhealthy", "mask": [1, "x"]})), ["mask: [1, 'x'] is not a list of integers"]),
    (Answers(doc({"id": 1, "status": "healthy", "last_ft_request_id": 5})), ["last_ft_request_id: 5 is not a string"]),
    (Answers(doc({"id": 1, "status": "healthy", "ft_error": ["x"]})), ["ft_error: ['x'] is not a string"]),
    (Answers(doc({"id": 1, "status": "healthy", "dp_rank": "1"})), ["dp_rank: 1 is not an integer"]),
    (Answers({"schema_version": 1, "engines": [{"id": 1, "status": "healthy"}]}), ["'total_engines' is missing"]),
    (Answers(doc({"id": 1, "status": "healthy"}, total_engines=4)), ["'total_engines' is 4 but 'engines' has 1"]),
    (Answers(doc({"id": 1, "status": "healthy"}, schema_version="1")), ["'schema_version' is 1, not an integer"]),
    (Answers({"total_engines": 1, "engines": {"id": 1}}), ["'engines' is not a list", "'engines' is not a list"]),
    (Answers({"total_engines": 1}), ["'engines' is missing"]),
    (Answers([1, 2]), ["status body is a JSON list, not an object"]),
    (Answers(doc("healthy")), ["engines[0] are not objects"]),
    (Answers(raw=b"<html>not json"), ["status body is not JSON: '<html>not json'"]),
    (Answers(raw=b"internal error", status_code=500), ["HTTP 500, expected 200: 'internal error'"]),
    (Answers(raw=b'{"detail":"Not Found"}', status_code=404), [("HTTP 404, expected 200 (no route there: is --prefix "
                                                              "right? vLLM 0.33.0 serves /fault_tolerance)")]),
], ids=lambda v: "" if isinstance(v, Answers) else v[0][:40])
def test_non_conforming_answers_fail_with_the_reason(answers: Answers, reasons: list[str]) -> None:
    code, out, _ = run(answers, "--rank", "1")
    assert code == 1, out
    fail_lines = [line for line in out.splitlines() if line.startswith("FAIL  ")]
    for reason in reasons:
        assert any(reason in line for line in fail_lines), (reason, out)
    assert out.splitlines()[-1].startswith(f"result: does NOT conform ({len(fail_lines)} problem")


def test_a_status_route_that_does_not_answer_in_time_fails() -> None:
    def hang(method: str, url: str, body: bytes | None, timeout_sec: float) -> HttpAnswer:
        raise TimeoutError()

    code, out, _ = run(hang, "--timeout", "0.5")  # type: ignore[arg-type]
    assert code == 1
    assert f"FAIL  GET {URL}/v1/fault_tolerance/status: no answer within 0.5s" in out.splitlines()


# -- --try-retry ---------------------------------------------------------------------------------------
def _retry_calls(answers: Answers) -> list[dict[str, Any]]:
    return [body for method, url, body in answers.calls if method == "POST" and url == f"{URL}/fault_tolerance/apply"]


def test_try_retry_echoed_request_id() -> None:
    answers = Answers(doc({"id": 1, "status": "unhealthy"}),
                      apply=(202, lambda body: {"message": "accepted", "request_id": body["request_id"]}))
    code, out, _ = run(answers, "--prefix", "/fault_tolerance", "--try-retry")
    assert code == 0, out
    (sent,) = _retry_calls(answers)
    assert sent["instruction"] == "retry" and sent["request_id"].startswith("engine-check-") and sent["params"] == {}
    assert "ok    202 echoes our request_id" in out.splitlines()
    # vLLM 0.33.0 makes its own request ids: a whitespace-only one is not probed (it would only retry again).
    assert "info  whitespace-only request_id not probed: vLLM 0.33.0 makes its own request ids" in out.splitlines()


def test_try_retry_server_made_request_id_is_reported_not_failed() -> None:
    answers = Answers(doc({"id": 1, "status": "healthy"}), apply=(202, {"message": "ok", "request_id": "uuid-9"}))
    code, out, _ = run(answers, "--prefix", "/fault_tolerance", "--try-retry")
    assert code == 0, out
    assert any(line.startswith("info  202 carries request_id 'uuid-9', made by the engine") for line in out.splitlines())


@pytest.mark.parametrize(("apply", "expected"), [
    ((202, {"message": "ok"}), "FAIL  202 has no string 'request_id'"),
    ((400, {"detail": "Invalid instruction: 'retry'."}), "info  POST "),
    ((400, {"error": {"message": "rank 1 is healthy", "type": "Bad Request", "code": 400}}), "refused, HTTP 400: rank 1 is healthy"),
    ((404, {"detail": "Not Found"}), "HTTP 404, expected 202 or 400: HTTP 404: Not Found"),
])
def test_try_retry_answers(apply: tuple[int, Any], expected: str) -> None:
    answers = Answers(doc({"id": 1, "status": "unhealthy"}), apply=apply)
    code, out, _ = run(answers, "--prefix", "/fault_tolerance", "--try-retry")
    assert any(expected in line for line in out.splitlines()), out
    assert code == (1 if expected.startswith("FAIL") or "404" in expected else 0), out


# -- usage and reachability: exit 2 -----------------------------------------------------------------------
@pytest.mark.parametrize(("argv", "message"), [
    (["ftp://127.0.0.9"], "URL 'ftp://127.0.0.9' is not http://HOST[:PORT]"),
    (["http://127.0.0.9:99999"], "has a bad port"),
    (["http://127.0.0.9:8001/x?y=1"], "has a query or fragment"),
    ([URL, "--prefix", "fault_tolerance"], "--prefix 'fault_tolerance' must start with '/'"),
    ([URL, "--prefix", "/fault_tolerance/"], "must start with '/' and not end with '/'"),
    ([URL, "--rank", "-1"], "--rank -1 is negative"),
    ([URL, "--timeout", "0"], "--timeout 0 is not in (0, 3600] seconds"),
])
def test_usage_errors_exit_2_naming_the_value(argv: list[str], message: str) -> None:
    answers = Answers(doc({"id": 1, "status": "healthy"}))
    args = build_parser().parse_args(["engine-check", *argv])
    out, err = io.StringIO(), io.StringIO()
    assert engine_check.run(args, out, err, transport=answers) == 2
    assert message in err.getvalue() and out.getvalue() == "" and answers.calls == []


def test_unreachable_engine_exits_2() -> None:
    def refused(method: str, url: str, body: bytes | None, timeout_sec: float) -> HttpAnswer:
        raise Unreachable(f"{method} {url}: [Errno 111] Connection refused")

    code, out, err = run(refused)  # type: ignore[arg-type]
    assert code == 2 and out == ""
    assert err.strip() == (f"motorctl engine-check: engine unreachable: GET {URL}/v1/fault_tolerance/status: "
                           "[Errno 111] Connection refused")


@pytest.mark.parametrize(("top", "verdict", "text"), [
    ({}, "info", "scale_up: not declared ('supported_instructions' absent)"),
    ({"supported_instructions": ["retry", "scale_down"]}, "info", "scale_up: not declared"),
    ({"supported_instructions": ["retry", "scale_down", "scale_up"]}, "ok", "scale_up: declared"),
    ({"supported_instructions": "scale_up"}, "FAIL", "'supported_instructions' is"),
], ids=["absent", "not-listed", "declared", "malformed"])
def test_scale_up_support_is_reported(top: dict[str, Any], verdict: str, text: str) -> None:
    report = check_engine(URL, rank=0, transport=Answers(doc({"id": 0, "status": "healthy"}, **top)))
    assert any(v == verdict and line.startswith(text) for v, line in report.lines), report.render()
    assert report.conforms is (verdict != "FAIL")
