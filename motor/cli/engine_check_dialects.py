"""engine-check's dialect part: which engine FT dialect an answer is (docs/engine-dialects.md), the
checks of SGLang's instance-level status, and the apply probes of ``--try-retry`` that tell the
dialects apart (a whitespace-only request id, a 409 while busy).

Detection from one status answer: entries for ranks 0..N-1 (N > 1), or ``last_ft_request_id`` /
``ft_error`` at the top level, is SGLang's instance FT manager (an external-LB rank answers for itself alone); an
entry with ``ft_state`` is the RFC's vLLM-Ascend dialect; otherwise vLLM's (0.33.0 when served under
``/fault_tolerance``). ``--dialect`` overrides it.
"""

from __future__ import annotations

import json
from typing import Any

from motor.cli.check_report import HttpAnswer, Report, Transport
from motor.common.text import shorten
from nodemanager.dialects import DIALECTS, make_dialect
from nodemanager.dialects.sglang import STATUSES
from nodemanager.engine_answers import EngineProtocolError, parse_apply_answer

AUTO = "auto"
CHOICES = (AUTO, *sorted(DIALECTS))
_TOP_ERROR_KEYS = ("last_ft_request_id", "ft_error")
_SETTINGS = {
    "vllm": "engine_ft_dialect: vllm (the default)",
    "vllm-0.33": "engine_ft_dialect: vllm-0.33, engine_ft_api_prefix: /fault_tolerance",
    "rfc": "engine_ft_dialect: rfc",
    "sglang": "engine_ft_dialect: sglang, engine_ft_manager_address: this host:port",
}


def detect(doc: Any, prefix: str) -> str:
    if isinstance(doc, dict):
        engines = doc.get("engines")
        ids = [e.get("id") for e in engines if isinstance(e, dict)] if isinstance(engines, list) else []
        every_rank = len(ids) > 1 and sorted(ids, key=str) == sorted(range(len(ids)), key=str)
        if every_rank or any(k in doc for k in _TOP_ERROR_KEYS):
            return "sglang"
        if isinstance(engines, list) and engines and isinstance(engines[0], dict) and \
                engines[0].get("ft_state") is not None:
            return "rfc"
    return "vllm-0.33" if prefix == "/fault_tolerance" else "vllm"


def name_dialect(report: Report, dialect: str, detected: bool) -> None:
    how = "detected" if detected else "given"
    report.info(f"dialect: {dialect} ({how}); NodeManager settings: {_SETTINGS[dialect]}")


def check_instance_status(report: Report, doc: Any, answer: HttpAnswer) -> None:
    """SGLang's instance FT manager: one entry per rank, sticky errors at the top level."""
    if not isinstance(doc, dict) or not isinstance(doc.get("engines"), list):
        report.fail(f"status body is not an object with an 'engines' list: {shorten(doc)}")
        return
    engines, total = doc["engines"], doc.get("total_engines")
    if type(total) is not int or total < 1:
        report.fail(f"'total_engines' is {shorten(total)}, not the instance's dp_size")
        return
    report.ok(f"instance FT manager: 'engines' list of {len(engines)}, 'total_engines' {total}")
    statuses = [e.get("status") if isinstance(e, dict) else None for e in engines]
    bad = [s for s in statuses if s not in STATUSES]
    if bad:
        report.fail(f"status values {shorten(bad)} are not among {list(STATUSES)}")
    else:
        report.ok("statuses: " + ", ".join(f"{e['id']}={e['status']}" for e in engines))
    for key in _TOP_ERROR_KEYS:
        if key in doc:
            if isinstance(doc[key], str):
                report.ok(f"{key} (top level, kept until the next apply finishes): {shorten(doc[key])}")
            else:
                report.fail(f"{key}: {shorten(doc[key])} is not a string")
    dialect = make_dialect("sglang", total)
    try:
        parsed = [dialect.parse_status(r, answer.status, answer.body) for r in range(total)]
    except EngineProtocolError as exc:
        report.fail(f"Motor's NodeManager bridge refuses it: {exc}")
    else:
        report.ok(f"identity: the ranks 0..{total - 1}, each once; Motor's NodeManager bridge reads "
                  + ", ".join(f"{e.id}: {e.status}" for e in parsed))


def _post(report: Report, transport: Transport, url: str, body: dict, timeout_sec: float) -> HttpAnswer | None:
    try:
        return transport("POST", url, json.dumps(body).encode(), timeout_sec)
    except TimeoutError:
        report.fail(f"POST {url}: no answer within {timeout_sec:g}s")
        return None


def check_probes(report: Report, transport: Transport, url: str, timeout_sec: float, dialect: str) -> None:
    """After the retry probe: a whitespace-only request id (not for vLLM 0.33.0, whose router makes its
    own ids, so a second retry would only change the engine's state) and, for SGLang, a second apply
    while busy."""
    if dialect == "vllm-0.33":
        report.info("whitespace-only request_id not probed: vLLM 0.33.0 makes its own request ids")
        return
    blank = _post(report, transport, url, {"instruction": "retry", "request_id": "   ", "params": {}}, timeout_sec)
    if blank is not None:
        _, _, message = parse_apply_answer(blank.status, blank.body)
        if blank.status == 400:
            report.ok(f"a whitespace-only request_id is refused ({message}); Motor never sends one")
        elif dialect == "sglang":
            report.info(f"a whitespace-only request_id: HTTP {blank.status} (SGLang's request_id is optional); "
                        "Motor never sends one")
        else:
            report.info(f"a whitespace-only request_id is not refused (HTTP {blank.status}; vLLM's router answers "
                        "400); Motor never sends one")
    if dialect != "sglang":
        return
    busy = _post(report, transport, url, {"instruction": "retry", "request_id": "engine-check-busy", "params": {}},
                 timeout_sec)
    if busy is None:
        return
    answer = make_dialect("sglang", 1).parse_apply_answer(busy.status, busy.body)
    if answer.busy:
        report.ok(f"while an operation runs: {answer.message}; Motor sends its apply again within the deadline")
    elif busy.status in (202, 400):
        report.info(f"a second apply right after: HTTP {busy.status} (the first had finished)")
    else:
        report.fail(f"a second apply right after: HTTP {busy.status}, expected 202, 400 or 409: {answer.message}")
