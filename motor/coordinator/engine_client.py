"""The Coordinator's only client of the engines' OpenAI-compatible HTTP API.

One pooled aiohttp session; every request is bounded by the connect timeout and by a total
timeout (first byte and body included). A failure to get a response (connection refused or reset,
timeout, malformed reply) is raised as ``UpstreamError`` so the caller can decide whether a retry
is still possible. A route through an instance's one inference endpoint carries its rank in the body
(``engine_body``): the engine serves exactly that rank or refuses, so the Coordinator's choice among
the published ranks holds.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager

import aiohttp

from motor.coordinator.routing import Route


class UpstreamError(Exception):
    """No usable response from the engine; ``reason`` is one short phrase for logs and errors."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def describe_client_error(exc: BaseException) -> str:
    if isinstance(exc, (asyncio.TimeoutError, TimeoutError)):
        return f"timeout ({type(exc).__name__})"
    if isinstance(exc, aiohttp.ClientConnectorError):
        return f"connect error: {exc.os_error.strerror or exc.os_error}"
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return "engine closed the connection"
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}"


# SGLang's field of CompletionRequest / ChatCompletionRequest (Optional[int]) pinning the DP rank.
ROUTED_DP_RANK = "routed_dp_rank"


def engine_body(route: Route, body: bytes) -> bytes:
    """The body the engine gets: ``body`` itself, or for a pinned route the same JSON object with
    ``routed_dp_rank`` set to the route's original rank (replacing any value the client sent)."""
    if route.pinned_rank is None:
        return body
    doc = json.loads(body)
    if not isinstance(doc, dict):
        raise ValueError(f"a pinned request body must be a JSON object, got {type(doc).__name__}")
    doc[ROUTED_DP_RANK] = route.pinned_rank
    return json.dumps(doc).encode()


def base_url(route: Route) -> str:
    host = f"[{route.ip}]" if ":" in route.ip else route.ip
    return f"http://{host}:{route.port}"


class EngineClient:
    def __init__(self, connect_timeout_sec: float, total_timeout_sec: float) -> None:
        self._timeout = aiohttp.ClientTimeout(total=total_timeout_sec, connect=connect_timeout_sec)
        self._session: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        if self._session is None:
            # No connection cap: every in-flight request (long streams included) gets its own.
            connector = aiohttp.TCPConnector(limit=0, enable_cleanup_closed=True)
            # The body is passed through as the engine sent it, Content-Encoding included. No cookie
            # jar: the session serves every client, so a cookie one answer set must not ride along
            # on another client's request (and a jar costs every request its lookup).
            self._session = aiohttp.ClientSession(
                connector=connector, timeout=self._timeout, auto_decompress=False, raise_for_status=False,
                cookie_jar=aiohttp.DummyCookieJar(),
            )

    async def close(self) -> None:
        if self._session is not None:
            session, self._session = self._session, None
            await session.close()

    @asynccontextmanager
    async def post(
        self, route: Route, path: str, body: bytes, headers: Mapping[str, str]
    ) -> AsyncIterator[aiohttp.ClientResponse]:
        """POST ``body`` to ``path`` of the routed engine; yields the response once headers arrived.

        Raises UpstreamError when no response headers arrive. Errors while reading the body
        surface from the response's own methods (aiohttp.ClientError / TimeoutError). Leaving the
        block early (client gone, cancellation) closes the connection, which aborts the engine's
        request.
        """
        if self._session is None:
            raise RuntimeError("EngineClient.start() was not called")
        try:
            resp = await self._session.post(base_url(route) + path, data=engine_body(route, body), headers=dict(headers))
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
            raise UpstreamError(describe_client_error(exc)) from exc
        completed = False
        try:
            yield resp
            completed = True
        finally:
            if completed and resp.content.is_eof():
                resp.release()
            else:
                resp.close()
