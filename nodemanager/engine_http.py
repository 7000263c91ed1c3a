"""The HTTP bridge to one engine's FT API (DESIGN §3): the only module that speaks to engines.

What the answers must look like, and the errors for when they do not, live in ``engine_answers``.
Every call is bounded by a timeout. A status read whose *reused* keep-alive connection was dropped
by the server is retried once on a fresh connection (that is not a fault); a refused connection or a
timeout is not retried. An apply is never retried and always uses a fresh connection.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import aiohttp

from nodemanager.clock import SYSTEM_CLOCK, Clock
from nodemanager.dialects.base import EngineDialect
from nodemanager.engine_address import EngineAddress
from nodemanager.metrics import NodeManagerMetrics
from nodemanager.engine_answers import (
    EngineStatusEntry,
    EngineStatusMalformed,
    EngineTimeout,
    EngineUnreachable,
)

MAX_BODY_BYTES = 1 << 20
# How soon a request an engine answered busy (another FT operation runs) is sent again.
BUSY_RETRY_SEC = 0.2


async def read_body(resp: aiohttp.ClientResponse, limit: int = MAX_BODY_BYTES) -> tuple[bytes, bool]:
    """The whole body, however many pieces it arrives in, up to `limit` bytes; the flag says there
    was more. (One `content.read(n)` returns only what has arrived so far.) Bounded by the
    request's timeout like the rest of the call."""
    buf = bytearray()
    while True:
        chunk = await resp.content.read(limit + 1 - len(buf))
        if not chunk:
            return bytes(buf), False
        buf += chunk
        if len(buf) > limit:
            return bytes(buf[:limit]), True


@dataclass(frozen=True)
class ApplyOutcome:
    endpoint_id: int
    accepted: bool
    http_status: int  # 0: not reached
    engine_request_id: str
    message: str
    request_body: str
    elapsed_sec: float = 0.0
    sent_at_unix_sec: float = 0.0
    busy: bool = False  # the engine ran another FT operation (a 409): may be sent again


# -- client ------------------------------------------------------------------------------------
@dataclass
class EngineHttpClient:
    """aiohttp sessions to the local engines. ``start()`` inside the event loop, ``close()`` at the end."""

    ft_api_prefix: str
    timeout_sec: float
    clock: Clock = SYSTEM_CLOCK
    # How answers are read and commands written (nodemanager.dialects); vLLM's by default.
    dialect: EngineDialect = field(default_factory=lambda: EngineDialect(1))
    # Where requests and body bytes are counted (none: not counted).
    metrics: NodeManagerMetrics | None = None
    _session: aiohttp.ClientSession | None = field(default=None, init=False)
    # Per endpoint, the last answer parsed and its entry: an engine answers the same document until
    # its state changes, so an unchanged answer is not parsed and validated again.
    _parsed: dict[int, tuple[tuple[int, bytes, str], EngineStatusEntry]] = field(default_factory=dict, init=False)
    _apply_session: aiohttp.ClientSession | None = field(default=None, init=False)

    async def start(self) -> None:
        if self._session is None:
            # The FT API keeps no sessions: no cookie jar to look up on every read.
            self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=30.0),
                                                  cookie_jar=aiohttp.DummyCookieJar())
            self._apply_session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0, force_close=True),
                                                        cookie_jar=aiohttp.DummyCookieJar())

    async def close(self) -> None:
        for session in (self._session, self._apply_session):
            if session is not None:
                await session.close()
        self._session = self._apply_session = None

    def _bound(self, timeout_sec: float | None) -> float:
        if timeout_sec is None or not math.isfinite(timeout_sec):
            return self.timeout_sec
        return max(0.01, min(self.timeout_sec, timeout_sec))

    async def read_status(self, addr: EngineAddress, timeout_sec: float | None = None,
                          request_id: str = "") -> EngineStatusEntry:
        """GET {prefix}/status of one engine, identity-checked. Raises EngineCallError subclasses."""
        assert self._session is not None, "EngineHttpClient.start() not called"
        bound = self._bound(timeout_sec)
        url = addr.base_url + self.ft_api_prefix + "/status"
        deadline = self.clock.monotonic() + bound
        for attempt in (1, 2):
            remaining = deadline - self.clock.monotonic()
            if remaining <= 0:
                raise EngineTimeout(addr.endpoint_id, f"GET {url} did not answer within {bound:g}s")
            try:
                async with self._session.get(url, timeout=aiohttp.ClientTimeout(total=remaining)) as resp:
                    body, truncated = await read_body(resp)
                    if self.metrics is not None:
                        self.metrics.engine_http("status", 0, len(body))
                    if truncated:
                        raise EngineStatusMalformed(addr.endpoint_id,
                                                    f"GET {url}: status body has more than {MAX_BODY_BYTES} bytes")
                    return self._parse(addr.endpoint_id, resp.status, body, request_id)
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

    def _parse(self, endpoint_id: int, http_status: int, body: bytes, request_id: str) -> EngineStatusEntry:
        """The dialect's parse is a pure function of these (its errors are raised every time)."""
        key = (http_status, body, request_id)
        last = self._parsed.get(endpoint_id)
        if last is not None and last[0] == key:
            return replace(last[1], observed_at_unix_sec=self.clock.wall())
        entry = self.dialect.parse_status(endpoint_id, http_status, body, self.clock.wall(), request_id)
        self._parsed[endpoint_id] = (key, entry)
        return entry

    async def apply(self, addr: EngineAddress, body: str, timeout_sec: float | None = None) -> ApplyOutcome:
        """POST {prefix}/apply once; never raises for engine or transport failures (see the outcome)."""
        assert self._apply_session is not None, "EngineHttpClient.start() not called"
        bound = self._bound(timeout_sec)
        url = addr.base_url + self.ft_api_prefix + "/apply"
        started, sent_at = self.clock.monotonic(), self.clock.wall()

        def outcome(accepted: bool, status: int, rid: str, message: str, busy: bool = False) -> ApplyOutcome:
            return ApplyOutcome(addr.endpoint_id, accepted, status, rid, message, body,
                                self.clock.monotonic() - started, sent_at, busy)

        try:
            async with self._apply_session.post(
                url, data=body.encode(), headers={"Content-Type": "application/json"},
                timeout=aiohttp.ClientTimeout(total=bound),
            ) as resp:
                raw, _ = await read_body(resp)  # only quoted in the outcome: a cut body is fine
                if self.metrics is not None:
                    self.metrics.engine_http("apply", len(body), len(raw))
                answer = self.dialect.parse_apply_answer(resp.status, raw)
                return outcome(answer.accepted, resp.status, answer.engine_request_id, answer.message, answer.busy)
        except (TimeoutError, asyncio.TimeoutError):
            return outcome(False, 0, "", f"POST {url} did not answer within {bound:g}s (outcome unknown)")
        except aiohttp.ClientError as exc:
            return outcome(False, 0, "", f"POST {url}: {type(exc).__name__}: {exc}")


async def apply_while_busy(http, addr: EngineAddress, body: str, timeout_sec: float | None, clock: Clock,
                           on_busy: Callable[[ApplyOutcome], None] = lambda outcome: None) -> ApplyOutcome:
    """`http.apply`, sent again every BUSY_RETRY_SEC while the engine answers busy (another FT
    operation runs, SGLang's 409), until the call's deadline."""
    started = clock.monotonic()
    outcome = await http.apply(addr, body, timeout_sec)
    for _ in range(1000):
        left = None if timeout_sec is None else timeout_sec - (clock.monotonic() - started)
        if not outcome.busy or (left is not None and left <= BUSY_RETRY_SEC):
            break
        on_busy(outcome)
        await asyncio.sleep(BUSY_RETRY_SEC)
        outcome = await http.apply(addr, body, None if left is None else left - BUSY_RETRY_SEC)
    return outcome
