"""The HTTP bridge to one engine's FT API (DESIGN §3): the only module that speaks to engines.

Reads are checked against Motor's identity contract (RFC §4.1): the status document must hold
exactly one entry and its ``id`` must equal the endpoint id asked for. A missing, duplicate, unknown
or mismatched id is an ``EngineIdentityError``; anything else that is not the documented shape
(non-JSON, wrong types, an unknown ``status`` string, a non-200 answer) is ``EngineStatusMalformed``.
Both are ``EngineProtocolError`` and are never "fixed up". Transport failures are
``EngineUnreachable`` (connection refused/reset) and ``EngineTimeout``.

Every call is bounded by a timeout. A status read whose *reused* keep-alive connection was dropped
by the server is retried once on a fresh connection (that is not a fault); a refused connection or a
timeout is not retried. An apply is never retried and always uses a fresh connection.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from gen.motor.v1 import common_pb2

MAX_BODY_BYTES = 1 << 20
HEALTH_VALUES = {
    "healthy": common_pb2.ENGINE_HEALTH_HEALTHY,
    "unhealthy": common_pb2.ENGINE_HEALTH_UNHEALTHY,
    "dead": common_pb2.ENGINE_HEALTH_DEAD,
}
FT_STATE_VALUES = {"recovering": common_pb2.FT_STATE_RECOVERING, "failed": common_pb2.FT_STATE_FAILED}


def _short(value: Any, limit: int = 160) -> str:
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


class EngineCallError(Exception):
    """A call to an engine failed; ``endpoint_id`` names the engine."""

    prefix = "engine call failed"

    def __init__(self, endpoint_id: int, detail: str) -> None:
        self.endpoint_id = endpoint_id
        self.detail = detail
        super().__init__(f"{self.prefix}: endpoint {endpoint_id}: {detail}")


class EngineUnreachable(EngineCallError):
    prefix = "engine unreachable"


class EngineTimeout(EngineCallError):
    prefix = "engine timed out"


class EngineProtocolError(EngineCallError):
    """The engine answered, but not with what the contract says."""


class EngineIdentityError(EngineProtocolError):
    prefix = "engine identity contract violated"


class EngineStatusMalformed(EngineProtocolError):
    prefix = "engine status malformed"


@dataclass(frozen=True)
class EngineAddress:
    endpoint_id: int
    host: str
    port: int

    @property
    def base_url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"


@dataclass(frozen=True)
class EngineStatusEntry:
    """One identity-checked status entry."""

    id: int
    status: str  # healthy | unhealthy | dead
    ft_state: str | None = None  # None when the key was absent
    fault_info: str | None = None
    last_ft_request_id: str | None = None
    ft_error: str | None = None
    mask: tuple[int, ...] = ()
    observed_at_unix_sec: float = 0.0

    def to_pb(self) -> common_pb2.EngineFtStatus:
        msg = common_pb2.EngineFtStatus(
            id=self.id,
            status=HEALTH_VALUES[self.status],
            fault_info=self.fault_info or "",
            last_ft_request_id=self.last_ft_request_id or "",
            ft_error=self.ft_error or "",
            mask=list(self.mask),
            observed_at_unix_sec=self.observed_at_unix_sec,
        )
        if self.ft_state is None:
            msg.ft_state = common_pb2.FT_STATE_UNSPECIFIED
        elif self.ft_state in FT_STATE_VALUES:
            msg.ft_state = FT_STATE_VALUES[self.ft_state]
        else:
            msg.ft_state = common_pb2.FT_STATE_UNKNOWN
            msg.raw_ft_state = self.ft_state
        return msg

    def describe(self) -> str:
        parts = [f"status={self.status}"]
        for key in ("ft_state", "fault_info", "last_ft_request_id", "ft_error"):
            value = getattr(self, key)
            if value is not None:
                parts.append(f"{key}={value!r}")
        return " ".join(parts)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _optional_str(endpoint_id: int, entry: dict[str, Any], key: str) -> str | None:
    value = entry.get(key)
    if value is None or isinstance(value, str):
        return value
    raise EngineStatusMalformed(endpoint_id, f"engines[0].{key} must be a string, received {_short(value)}")


def parse_status(endpoint_id: int, http_status: int, body: bytes, observed_at_unix_sec: float = 0.0) -> EngineStatusEntry:
    """The status answer of the engine serving ``endpoint_id`` → its checked entry, or a protocol error."""
    text = body.decode("utf-8", "replace")
    if http_status != 200:
        raise EngineStatusMalformed(endpoint_id, f"status route answered HTTP {http_status}: {_short(text)!r}")
    try:
        doc = json.loads(text)
    except ValueError:
        raise EngineStatusMalformed(endpoint_id, f"status body is not JSON: received {_short(text)!r}") from None
    if not isinstance(doc, dict):
        raise EngineStatusMalformed(endpoint_id, f"status body is not a JSON object: received {_short(text)!r}")
    engines = doc.get("engines")
    if not isinstance(engines, list):
        raise EngineStatusMalformed(endpoint_id, f"'engines' is not a list: received {_short(engines)}")
    for i, entry in enumerate(engines):
        if not isinstance(entry, dict):
            raise EngineStatusMalformed(endpoint_id, f"engines[{i}] is not an object: received {_short(entry)}")
        if not _is_int(entry.get("id")):
            raise EngineIdentityError(endpoint_id, f"engines[{i}].id is missing or not an integer: received {_short(entry)}")
    ids = [entry["id"] for entry in engines]
    if not ids:
        raise EngineIdentityError(endpoint_id, "no engines entry; expected exactly one with id %d" % endpoint_id)
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        raise EngineIdentityError(endpoint_id, f"duplicate engine ids {duplicates} in {ids}")
    unknown = sorted(i for i in ids if i != endpoint_id)
    if len(ids) == 1 and unknown:
        raise EngineIdentityError(endpoint_id, f"the single entry has id {ids[0]}, expected {endpoint_id}")
    if unknown:
        what = "and no entry for it" if endpoint_id not in ids else "beside it"
        raise EngineIdentityError(endpoint_id, f"unknown engine ids {unknown} {what} (received ids {ids})")
    entry = engines[0]
    status = entry.get("status")
    if status not in HEALTH_VALUES:
        raise EngineStatusMalformed(
            endpoint_id, f"engines[0].status is {_short(status)}, not one of {sorted(HEALTH_VALUES)}"
        )
    mask = entry.get("mask")
    if mask is None:
        mask_tuple: tuple[int, ...] = ()
    elif isinstance(mask, list) and all(_is_int(m) for m in mask):
        mask_tuple = tuple(mask)
    else:
        raise EngineStatusMalformed(endpoint_id, f"engines[0].mask must be a list of integers, received {_short(mask)}")
    return EngineStatusEntry(
        id=endpoint_id,
        status=status,
        ft_state=_optional_str(endpoint_id, entry, "ft_state"),
        fault_info=_optional_str(endpoint_id, entry, "fault_info"),
        last_ft_request_id=_optional_str(endpoint_id, entry, "last_ft_request_id"),
        ft_error=_optional_str(endpoint_id, entry, "ft_error"),
        mask=mask_tuple,
        observed_at_unix_sec=observed_at_unix_sec,
    )


# -- apply -------------------------------------------------------------------------------------
SCALE_DOWN = "scale_down"


def build_scale_down_body(request_id: str, removed_dp_ranks: list[int], dp_master_ip: str, dp_store_port: int) -> str:
    """The exact JSON sent to every target engine (sorted cumulative ranks)."""
    return json.dumps(
        {
            "instruction": SCALE_DOWN,
            "request_id": request_id,
            "params": {
                "removed_dp_ranks": sorted(removed_dp_ranks),
                "dp_master_ip": dp_master_ip,
                "dp_store_port": dp_store_port,
            },
        }
    )


@dataclass(frozen=True)
class ApplyOutcome:
    endpoint_id: int
    accepted: bool
    http_status: int  # 0: not reached
    engine_request_id: str
    message: str
    request_body: str
    elapsed_sec: float = 0.0


def _detail_text(detail: Any) -> str:
    """400 ``detail`` is a string, or (FastAPI validation, vLLM 0.33.0) a list of error objects."""
    if isinstance(detail, str):
        return detail
    if isinstance(detail, list):
        parts = []
        for item in detail:
            if isinstance(item, dict) and "msg" in item:
                loc = ".".join(str(p) for p in item.get("loc", []) if p is not None)
                parts.append(f"{loc}: {item['msg']}" if loc else str(item["msg"]))
            else:
                parts.append(item if isinstance(item, str) else json.dumps(item))
        return "; ".join(parts)
    return json.dumps(detail)


def parse_apply_answer(http_status: int, body: bytes) -> tuple[bool, str, str]:
    """(accepted, engine_request_id, message) of an apply answer; accepted only on HTTP 202."""
    text = body.decode("utf-8", "replace")
    try:
        doc: Any = json.loads(text) if text else None
    except ValueError:
        doc = None
    if http_status == 202:
        if isinstance(doc, dict):
            rid = doc.get("request_id")
            message = doc.get("message")
            return True, rid if isinstance(rid, str) else "", message if isinstance(message, str) else _short(text)
        return True, "", _short(text)
    if isinstance(doc, dict) and "detail" in doc:
        return False, "", f"HTTP {http_status}: {_short(_detail_text(doc['detail']), 400)}"
    return False, "", f"HTTP {http_status}: {_short(text, 400)!r}"


# -- client ------------------------------------------------------------------------------------
@dataclass
class EngineHttpClient:
    """aiohttp sessions to the local engines. ``start()`` inside the event loop, ``close()`` at the end."""

    ft_api_prefix: str
    timeout_sec: float
    _session: aiohttp.ClientSession | None = field(default=None, init=False)
    _apply_session: aiohttp.ClientSession | None = field(default=None, init=False)

    async def start(self) -> None:
        if self._session is None:
            self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=30.0))
            self._apply_session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0, force_close=True))

    async def close(self) -> None:
        for session in (self._session, self._apply_session):
            if session is not None:
                await session.close()
        self._session = self._apply_session = None

    def _bound(self, timeout_sec: float | None) -> float:
        if timeout_sec is None or not math.isfinite(timeout_sec):
            return self.timeout_sec
        return max(0.01, min(self.timeout_sec, timeout_sec))

    async def read_status(self, addr: EngineAddress, timeout_sec: float | None = None) -> EngineStatusEntry:
        """GET {prefix}/status of one engine, identity-checked. Raises EngineCallError subclasses."""
        assert self._session is not None, "EngineHttpClient.start() not called"
        bound = self._bound(timeout_sec)
        url = addr.base_url + self.ft_api_prefix + "/status"
        deadline = time.monotonic() + bound
        for attempt in (1, 2):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise EngineTimeout(addr.endpoint_id, f"GET {url} did not answer within {bound:g}s")
            try:
                async with self._session.get(url, timeout=aiohttp.ClientTimeout(total=remaining)) as resp:
                    body = await resp.content.read(MAX_BODY_BYTES)
                    return parse_status(addr.endpoint_id, resp.status, body, time.time())
            except (TimeoutError, asyncio.TimeoutError):
                raise EngineTimeout(addr.endpoint_id, f"GET {url} did not answer within {bound:g}s") from None
            except aiohttp.ClientConnectorError as exc:
                raise EngineUnreachable(addr.endpoint_id, f"GET {url}: {exc.os_error or exc}") from None
            except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError, aiohttp.ClientPayloadError) as exc:
                if attempt == 1:
                    continue  # a kept-alive connection the server had closed: once more, freshly
                raise EngineUnreachable(addr.endpoint_id, f"GET {url}: {type(exc).__name__}: {exc}") from None
            except aiohttp.ClientError as exc:
                raise EngineUnreachable(addr.endpoint_id, f"GET {url}: {type(exc).__name__}: {exc}") from None
        raise AssertionError("unreachable")

    async def apply(self, addr: EngineAddress, body: str, timeout_sec: float | None = None) -> ApplyOutcome:
        """POST {prefix}/apply once; never raises for engine or transport failures (see the outcome)."""
        assert self._apply_session is not None, "EngineHttpClient.start() not called"
        bound = self._bound(timeout_sec)
        url = addr.base_url + self.ft_api_prefix + "/apply"
        started = time.monotonic()

        def outcome(accepted: bool, status: int, rid: str, message: str) -> ApplyOutcome:
            return ApplyOutcome(addr.endpoint_id, accepted, status, rid, message, body, time.monotonic() - started)

        try:
            async with self._apply_session.post(
                url, data=body.encode(), headers={"Content-Type": "application/json"},
                timeout=aiohttp.ClientTimeout(total=bound),
            ) as resp:
                raw = await resp.content.read(MAX_BODY_BYTES)
                accepted, rid, message = parse_apply_answer(resp.status, raw)
                return outcome(accepted, resp.status, rid, message)
        except (TimeoutError, asyncio.TimeoutError):
            return outcome(False, 0, "", f"POST {url} did not answer within {bound:g}s (outcome unknown)")
        except aiohttp.ClientError as exc:
            return outcome(False, 0, "", f"POST {url}: {type(exc).__name__}: {exc}")
