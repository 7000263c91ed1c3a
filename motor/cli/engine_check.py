"""motorctl engine-check: does an engine's FT API answer what Motor's NodeManager expects (DESIGN §3)?

  motorctl engine-check URL [--prefix P] [--rank N] [--try-retry] [--timeout S] [--dialect D]

Reads ``GET {prefix}/status`` once and reports, one line each, what conforms and what does not: the
HTTP status, the JSON shape (``engines`` list, ``total_engines``, optional ``schema_version``), the
identity contract (external-LB mode: exactly one entry, an integer ``id``, equal to ``--rank`` when
given), the status value, the dialect (``ft_state`` present: the RFC dialect), extra keys (listed;
Motor ignores them) and the types of ``fault_info``, ``mask``, ``last_ft_request_id``, ``ft_error``.
The last status line is the verdict of the NodeManager's own parser (``nodemanager.engine_answers``),
so this check and the bridge never disagree. Nothing is sent to the engine's apply route unless
``--try-retry``: then one ``retry`` (vLLM's released instruction) with our request id, reporting the
answer and whether the 202 echoes our id or carries one the engine made. Whether the engine declares
elastic scale-up (``supported_instructions`` naming ``scale_up``) is reported too, never a failure.

Exit status: 0 when everything conforms, 1 when something does not (each ``FAIL`` line says why),
2 for a usage error or an engine that cannot be reached.
"""

from __future__ import annotations

import argparse
import json
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Sequence
from typing import Any, TextIO

from motor.cli.check_report import HttpAnswer, Report, Transport
from motor.cli.engine_check_dialects import AUTO, CHOICES, check_instance_status, check_probes, detect, name_dialect
from motor.common.text import shorten
from nodemanager.engine_answers import (
    FT_STATE_VALUES,
    HEALTH_VALUES,
    EngineProtocolError,
    parse_apply_answer,
    parse_status,
)

DEFAULT_PREFIX = "/v1/fault_tolerance"
DEFAULT_TIMEOUT_SEC = 5.0
MAX_BODY_BYTES = 1 << 20
SCHEMA_VERSION = 1
# Entry keys Motor reads or documents (DESIGN §3); anything else is an extra key, ignored.
_ENTRY_STRING_KEYS = ("fault_info", "last_ft_request_id", "ft_error")
_ENTRY_KEYS = {"id", "status", "ft_state", "mask", "dp_rank", *_ENTRY_STRING_KEYS}
_DOCUMENT_KEYS = {"schema_version", "total_engines", "engines", "supported_instructions"}



class UsageError(Exception):
    """Bad arguments: exit status 2."""


class Unreachable(Exception):
    """No HTTP answer at all (refused, no route, bad host): exit status 2."""


def http_transport(method: str, url: str, body: bytes | None, timeout_sec: float) -> HttpAnswer:
    headers = {"Content-Type": "application/json"} if body is not None else {}
    req = urllib.request.Request(url, data=body, method=method, headers=headers)
    started = time.monotonic()
    try:
        with urllib.request.urlopen(req, timeout=timeout_sec) as resp:
            return HttpAnswer(resp.status, resp.read(MAX_BODY_BYTES), time.monotonic() - started)
    except urllib.error.HTTPError as exc:  # an answer all the same
        return HttpAnswer(exc.code, exc.read(MAX_BODY_BYTES), time.monotonic() - started)
    except urllib.error.URLError as exc:
        if isinstance(exc.reason, (TimeoutError, socket.timeout)):
            raise TimeoutError() from None
        raise Unreachable(f"{method} {url}: {exc.reason}") from None
    except TimeoutError:
        raise TimeoutError() from None
    except (ConnectionError, OSError) as exc:
        raise Unreachable(f"{method} {url}: {exc}") from None


def check_base_url(url: str) -> str:
    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise UsageError(f"URL {url!r} is not http://HOST[:PORT] (the engine's API base URL)")
    try:
        _ = parsed.port
    except ValueError:
        raise UsageError(f"URL {url!r} has a bad port") from None
    if parsed.query or parsed.fragment:
        raise UsageError(f"URL {url!r} has a query or fragment; give the engine's base URL and --prefix")
    return url.rstrip("/")


def check_prefix(prefix: str) -> str:
    if not prefix.startswith("/") or prefix.endswith("/"):
        raise UsageError(f"--prefix {prefix!r} must start with '/' and not end with '/' (e.g. {DEFAULT_PREFIX})")
    return prefix


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _keys(keys: Sequence[str]) -> str:
    return ", ".join(sorted(keys))


# -- status -----------------------------------------------------------------------------------------
def _check_document(report: Report, doc: Any) -> list[Any] | None:
    """The document's shape; the engines list when there is one to look into."""
    if not isinstance(doc, dict):
        report.fail(f"status body is a JSON {type(doc).__name__}, not an object: {shorten(doc)}")
        return None
    engines = doc.get("engines")
    if not isinstance(engines, list):
        what = "missing" if "engines" not in doc else f"not a list: {shorten(engines)}"
        report.fail(f"'engines' is {what}")
        return None
    total = doc.get("total_engines")
    if "total_engines" not in doc:
        report.fail(f"'total_engines' is missing (expected {len(engines)}, the number of entries)")
    elif not _is_int(total):
        report.fail(f"'total_engines' is {shorten(total)}, not an integer")
    elif total != len(engines):
        report.fail(f"'total_engines' is {total} but 'engines' has {len(engines)} entries")
    else:
        report.ok(f"JSON object: 'engines' list of {len(engines)}, 'total_engines' {total}")
    if "schema_version" not in doc:
        report.info("'schema_version' absent (optional)")
    elif not _is_int(doc["schema_version"]):
        report.fail(f"'schema_version' is {shorten(doc['schema_version'])}, not an integer")
    elif doc["schema_version"] != SCHEMA_VERSION:
        report.info(f"'schema_version' {doc['schema_version']}: Motor knows {SCHEMA_VERSION}; checked as version "
                    f"{SCHEMA_VERSION}")
    else:
        report.ok(f"'schema_version' {SCHEMA_VERSION}")
    extra = [k for k in doc if k not in _DOCUMENT_KEYS]
    if extra:
        report.info(f"extra document keys (ignored by Motor): {_keys(extra)}")
    _check_scale_up(report, doc)
    return engines


def _check_scale_up(report: Report, doc: dict[str, Any]) -> None:
    """Whether the engine declares elastic scale-up (docs/engine-protocol-scale-up.md): the optional
    'supported_instructions' list naming 'scale_up'. Not declaring it is no failure: Motor brings
    the capacity of such an engine back by a planned restoration."""
    declared = doc.get("supported_instructions")
    if declared is None:
        report.info("scale_up: not declared ('supported_instructions' absent): removed ranks come back by a planned "
                    "restoration (capacity_restore)")
    elif not isinstance(declared, list) or not all(isinstance(i, str) for i in declared):
        report.fail(f"'supported_instructions' is {shorten(declared)}, not a list of strings")
    elif "scale_up" in declared:
        report.ok(f"scale_up: declared ('supported_instructions' {_keys(declared)}): set "
                  "ft_capability.supports_scale_up for elastic scale-up")
    else:
        report.info(f"scale_up: not declared ('supported_instructions' {_keys(declared)}): removed ranks come back "
                    "by a planned restoration (capacity_restore)")


def _check_identity(report: Report, engines: list[Any], rank: int | None) -> dict[str, Any] | None:
    """External-LB identity (RFC §4.1); the single entry when it is one to look into."""
    not_objects = [i for i, e in enumerate(engines) if not isinstance(e, dict)]
    if not_objects:
        report.fail(f"engines{not_objects} are not objects: {shorten([engines[i] for i in not_objects])}")
        return None
    ids = [e.get("id") for e in engines]
    bad_ids = [i for i, value in enumerate(ids) if not _is_int(value)]
    for i in bad_ids:
        what = "missing" if "id" not in engines[i] else f"{shorten(ids[i])}, not an integer"
        report.fail(f"identity: engines[{i}].id is {what}")
    if not engines:
        report.fail("identity: 'engines' is empty; external-LB mode has exactly one entry, its id the global DP rank")
        return None
    int_ids = [value for value in ids if _is_int(value)]
    duplicates = sorted({i for i in int_ids if int_ids.count(i) > 1})
    if duplicates:
        report.fail(f"identity: duplicate ids {duplicates} in {ids}")
    if len(engines) > 1:
        report.fail(f"identity: {len(engines)} entries (ids {ids}); external-LB mode has exactly one")
        return None
    if bad_ids:
        return None
    entry = engines[0]
    if rank is None:
        report.ok(f"identity: one entry, id {entry['id']} (give --rank to check it against the global DP rank)")
    elif entry["id"] != rank:
        report.fail(f"identity: the entry's id is {entry['id']}, expected --rank {rank}")
    else:
        report.ok(f"identity: one entry, id {rank} = --rank")
    return entry


def _check_entry(report: Report, entry: dict[str, Any]) -> None:
    status = entry.get("status")
    if "status" not in entry:
        report.fail(f"status: missing; expected one of {list(HEALTH_VALUES)}")
    elif status not in HEALTH_VALUES:
        report.fail(f"status: {shorten(status)} is not one of {list(HEALTH_VALUES)}")
    else:
        note = " (transient: vLLM is querying its all2all mask)" if status == "diagnosing" else ""
        report.ok(f"status: {status!r}{note}")
    if "ft_state" in entry and entry["ft_state"] is not None:
        ft_state = entry["ft_state"]
        if ft_state in FT_STATE_VALUES:
            report.ok(f"dialect: RFC (vLLM-Ascend), ft_state {ft_state!r}")
        else:
            report.fail(f"dialect: RFC (ft_state present), but ft_state {shorten(ft_state)} is not one of "
                        f"{list(FT_STATE_VALUES)}")
    else:
        report.ok("dialect: vLLM (no ft_state)")
    for key in _ENTRY_STRING_KEYS:
        if key in entry:
            value = entry[key]
            if value is None or isinstance(value, str):
                report.ok(f"{key}: {'null' if value is None else 'a string'}")
            else:
                report.fail(f"{key}: {shorten(value)} is not a string")
    if "mask" in entry:
        mask = entry["mask"]
        if mask is None or (isinstance(mask, list) and all(_is_int(m) for m in mask)):
            report.ok(f"mask: {'null' if mask is None else 'a list of integers'}")
        else:
            report.fail(f"mask: {shorten(mask)} is not a list of integers")
    if "dp_rank" in entry:
        if _is_int(entry["dp_rank"]):
            report.ok(f"dp_rank: {entry['dp_rank']} (ignored by Motor)")
        else:
            report.fail(f"dp_rank: {shorten(entry['dp_rank'])} is not an integer")
    extra = [k for k in entry if k not in _ENTRY_KEYS]
    if extra:
        report.info(f"extra entry keys (ignored by Motor): {_keys(extra)}")


def check_status(report: Report, answer: HttpAnswer, url: str, rank: int | None, prefix: str = DEFAULT_PREFIX,
                 dialect: str = AUTO) -> str:
    """The checks of one status answer; returns the dialect it was checked as."""
    text = answer.body.decode("utf-8", "replace")
    if answer.status != 200:
        hint = " (no route there: is --prefix right? vLLM 0.33.0 serves /fault_tolerance)" if answer.status == 404 else ""
        report.fail(f"GET {url}: HTTP {answer.status}, expected 200{hint}: {shorten(text)!r}")
        return dialect
    report.ok(f"GET {url}: HTTP 200 ({answer.elapsed_sec * 1000:.0f} ms)")
    try:
        doc = json.loads(text)
    except ValueError:
        report.fail(f"status body is not JSON: {shorten(text)!r}")
        return dialect
    chosen = detect(doc, prefix) if dialect == AUTO else dialect
    name_dialect(report, chosen, dialect == AUTO)
    if chosen == "sglang":
        check_instance_status(report, doc, answer)
        return chosen
    engines = _check_document(report, doc)
    entry = _check_identity(report, engines, rank) if engines is not None else None
    if entry is not None:
        _check_entry(report, entry)
    # The NodeManager's own parser on the same bytes: what the bridge would make of this answer.
    endpoint = rank if rank is not None else (entry["id"] if entry is not None else 0)
    try:
        parsed = parse_status(endpoint, answer.status, answer.body)
    except EngineProtocolError as exc:
        report.fail(f"Motor's NodeManager bridge refuses it: {exc}")
    else:
        report.ok(f"Motor's NodeManager bridge reads endpoint {endpoint}: {parsed.describe()}")
    return chosen


# -- retry ------------------------------------------------------------------------------------------
def check_retry(report: Report, transport: Transport, url: str, timeout_sec: float) -> None:
    ours = f"engine-check-{uuid.uuid4().hex[:12]}"
    body = json.dumps({"instruction": "retry", "request_id": ours, "params": {}}).encode()
    try:
        answer = transport("POST", url, body, timeout_sec)
    except TimeoutError:
        report.fail(f"POST {url} (retry, request_id {ours}): no answer within {timeout_sec:g}s")
        return
    _, engine_rid, message = parse_apply_answer(answer.status, answer.body)
    if answer.status == 202:
        report.ok(f"POST {url} (retry, request_id {ours}): HTTP 202 {message!r}")
        if engine_rid == ours:
            report.ok("202 echoes our request_id")
        elif engine_rid:
            report.info(f"202 carries request_id {engine_rid!r}, made by the engine (ours was {ours!r}); Motor "
                        "reports the engine's as engine_request_id")
        else:
            report.fail("202 has no string 'request_id' (expected {\"message\", \"request_id\"})")
    elif answer.status == 400:
        report.info(f"POST {url} (retry, request_id {ours}): refused, {message}")
    elif answer.status == 409:
        report.ok(f"POST {url} (retry, request_id {ours}): busy, {message}; Motor sends again within the deadline")
    else:
        report.fail(f"POST {url} (retry, request_id {ours}): HTTP {answer.status}, expected 202 or 400: {message}")


# -- entry point ------------------------------------------------------------------------------------
def check_engine(url: str, *, prefix: str = DEFAULT_PREFIX, rank: int | None = None, try_retry: bool = False,
                 timeout_sec: float = DEFAULT_TIMEOUT_SEC, transport: Transport = http_transport,
                 dialect: str = AUTO) -> Report:
    """The whole check. Raises UsageError for bad arguments and Unreachable when nothing answers."""
    base = check_base_url(url)
    prefix = check_prefix(prefix)
    if rank is not None and rank < 0:
        raise UsageError(f"--rank {rank} is negative; it is the engine's global DP rank")
    if not timeout_sec > 0 or timeout_sec > 3600:
        raise UsageError(f"--timeout {timeout_sec:g} is not in (0, 3600] seconds")
    report = Report()
    if dialect not in CHOICES:
        raise UsageError(f"--dialect {dialect!r} is not one of {list(CHOICES)}")
    status_url = f"{base}{prefix}/status"
    try:
        answer = transport("GET", status_url, None, timeout_sec)
    except TimeoutError:
        report.fail(f"GET {status_url}: no answer within {timeout_sec:g}s")
    else:
        dialect = check_status(report, answer, status_url, rank, prefix, dialect)
    if try_retry:
        check_retry(report, transport, f"{base}{prefix}/apply", timeout_sec)
        check_probes(report, transport, f"{base}{prefix}/apply", timeout_sec, dialect)
    return report


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser("engine-check", help="check an engine's FT API against Motor's contract (DESIGN §3)",
                       description="Check an engine's FT API against what Motor's NodeManager expects. Exit 0: "
                                   "conforms; 1: does not (FAIL lines say why); 2: usage error or unreachable.")
    p.add_argument("url", help="the engine's API base URL, e.g. http://127.0.0.2:8001")
    p.add_argument("--prefix", default=DEFAULT_PREFIX,
                   help=f"FT API prefix (default {DEFAULT_PREFIX}; vLLM 0.33.0 serves /fault_tolerance)")
    p.add_argument("--rank", type=int, help="the engine's global DP rank: the entry's id must equal it")
    p.add_argument("--try-retry", action="store_true",
                   help="also POST one 'retry' to {prefix}/apply (changes the engine's state if it is unhealthy)")
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_SEC, help="seconds per HTTP call (default 5)")
    p.add_argument("--dialect", choices=CHOICES, default=AUTO,
                   help="the engine's FT dialect (default: detected from the status answer)")
    return p


def run(args: argparse.Namespace, out: TextIO, err: TextIO, transport: Transport = http_transport) -> int:
    try:
        report = check_engine(args.url, prefix=args.prefix, rank=args.rank, try_retry=args.try_retry,
                              timeout_sec=args.timeout, transport=transport,
                              dialect=getattr(args, "dialect", AUTO))
    except UsageError as exc:
        print(f"motorctl engine-check: {exc}", file=err)
        return 2
    except Unreachable as exc:
        print(f"motorctl engine-check: engine unreachable: {exc}", file=err)
        return 2
    print(f"engine-check {args.url.rstrip('/')} prefix {args.prefix}", file=out)
    print(report.render(), file=out)
    failures = report.failures
    print("result: conforms to Motor's engine FT contract" if not failures
          else f"result: does NOT conform ({len(failures)} problem{'s' if len(failures) > 1 else ''})", file=out)
    return 0 if not failures else 1
