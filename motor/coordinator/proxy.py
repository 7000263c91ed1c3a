"""Forwarding of one OpenAI-compatible inference request: route, retry before the first byte, pass
the response (streamed or not) through.

Per attempt the routing table picks an endpoint (least outstanding, rank-aware) and counts the
request against it until the attempt ends. An attempt fails *before the first byte* when no
response headers arrive (connection refused/reset, timeout), when the engine answers 502/503/504,
when a non-streamed body cannot be read, or when a stream ends or breaks before its first chunk.
Only then is the endpoint put in cooldown and the request tried on another endpoint, of another
instance when one can serve (at most ``max_retries`` more attempts). Once a streamed response has started, a failure is reported in
the stream (one OpenAI-style ``data: {"error": ...}`` event) and is never retried.

Responses carry ``X-Motor-Endpoint: <instance_id>/<rank>`` and ``X-Request-Id``. When nothing can
serve, the request is held (``hold_when_unavailable_sec`` from its arrival, polling the routing table)
and then answered 503 with ``Retry-After``; a model no published instance serves is 404 at once.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
import uuid
from collections.abc import Callable
from typing import Any

import aiohttp
from aiohttp import web
from multidict import CIMultiDict

from motor.coordinator.engine_client import EngineClient, UpstreamError, describe_client_error
from motor.coordinator.metrics import CoordinatorMetrics, RequestTrace
from motor.coordinator.routing import EndpointKey, NoRoute, NoRouteKind, Route, RoutingTable

log = logging.getLogger(__name__)

ENDPOINT_HEADER = "X-Motor-Endpoint"
REQUEST_ID_HEADER = "X-Request-Id"
RETRYABLE_STATUSES = frozenset({502, 503, 504})
_REQUEST_ID_RE = re.compile(r"^[A-Za-z0-9._:@/+=-]{1,128}$")
_ERROR_DETAIL_MAX_BYTES = 2048
# Not forwarded from the engine's response: hop-by-hop headers and what aiohttp sets itself.
_DROPPED_RESPONSE_HEADERS = frozenset(
    h.lower()
    for h in (
        "Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "TE", "Trailer",
        "Transfer-Encoding", "Upgrade", "Content-Length", "Date", "Server",
    )
)
# Forwarded from the client's request to the engine.
_FORWARDED_REQUEST_HEADERS = ("Content-Type", "Accept", "Authorization", "OpenAI-Organization", "OpenAI-Project")


class BadRequest(ValueError):
    pass


def request_id_of(request: web.Request) -> str:
    """The client's X-Request-Id when it is a sane token, else a fresh one."""
    given = request.headers.get(REQUEST_ID_HEADER)
    if given and _REQUEST_ID_RE.match(given):
        return given
    return uuid.uuid4().hex


def parse_inference_body(body: bytes) -> tuple[str | None, bool]:
    """(requested model or None, stream flag) of an OpenAI request body; BadRequest otherwise."""
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadRequest(f"request body is not valid JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise BadRequest(f"request body must be a JSON object, got {type(doc).__name__}")
    model = doc.get("model")
    if model is not None and not isinstance(model, str):
        raise BadRequest(f"model must be a string, got {model!r}")
    return (model or None), doc.get("stream") is True


def openai_error(
    status: int,
    message: str,
    err_type: str,
    code: str,
    *,
    param: str | None = None,
    headers: dict[str, str] | None = None,
) -> web.Response:
    body = {"error": {"message": message, "type": err_type, "param": param, "code": code}}
    return web.json_response(body, status=status, headers=headers)


def _sse_error(message: str) -> bytes:
    body = {"error": {"message": message, "type": "upstream_error", "param": None, "code": "upstream_failed"}}
    return f"data: {json.dumps(body)}\n\n".encode()


class InferenceProxy:
    def __init__(
        self,
        table: RoutingTable,
        client: EngineClient,
        *,
        max_retries: int,
        retry_after_sec: int,
        hold_sec: float = 0.0,
        hold_poll_sec: float = 0.05,
        clock: Callable[[], float] = time.monotonic,
        metrics: CoordinatorMetrics | None = None,
    ) -> None:
        self.table = table
        self.client = client
        self.max_retries = max_retries
        self.retry_after_sec = retry_after_sec
        self.hold_sec = hold_sec
        self.hold_poll_sec = hold_poll_sec
        self.clock = clock
        self.metrics = metrics or CoordinatorMetrics()

    # -- responses of our own ---------------------------------------------------------------
    def _unavailable(self, request_id: str, message: str) -> web.Response:
        return openai_error(
            503, message, "service_unavailable_error", "service_unavailable",
            headers={"Retry-After": str(self.retry_after_sec), REQUEST_ID_HEADER: request_id},
        )

    def _upstream_headers(self, request: web.Request, request_id: str) -> dict[str, str]:
        headers = {name: request.headers[name] for name in _FORWARDED_REQUEST_HEADERS if name in request.headers}
        headers.setdefault("Content-Type", "application/json")
        headers[REQUEST_ID_HEADER] = request_id
        return headers

    @staticmethod
    def _response_headers(resp: aiohttp.ClientResponse, route: Route, request_id: str) -> CIMultiDict[str]:
        headers: CIMultiDict[str] = CIMultiDict(
            (k, v) for k, v in resp.headers.items() if k.lower() not in _DROPPED_RESPONSE_HEADERS
        )
        headers[ENDPOINT_HEADER] = route.label
        headers[REQUEST_ID_HEADER] = request_id
        return headers

    # -- the request ------------------------------------------------------------------------
    async def handle(self, request: web.Request, path: str) -> web.StreamResponse:
        trace = self.metrics.trace(path, self.clock())
        try:
            response = await self._route(request, path, trace)
        except asyncio.CancelledError:
            trace.finish(self.clock(), None, served=False)  # the client went away
            raise
        except Exception:
            trace.finish(self.clock(), 500, served=False)  # aiohttp answers 500 for a bug
            raise
        # Only an engine's answer carries X-Motor-Endpoint; our own 400/404/503 do not.
        trace.finish(self.clock(), response.status, served=ENDPOINT_HEADER in response.headers)
        return response

    async def _route(self, request: web.Request, path: str, trace: RequestTrace) -> web.StreamResponse:
        request_id = request_id_of(request)
        started = self.clock()
        body = await request.read()
        try:
            model, stream = parse_inference_body(body)
        except BadRequest as exc:
            log.info("request_id=%s %s refused: %s", request_id, path, exc)
            return openai_error(400, str(exc), "invalid_request_error", "invalid_request",
                                headers={REQUEST_ID_HEADER: request_id})
        tried: list[EndpointKey] = []
        failures: list[str] = []
        hold_until = started + self.hold_sec
        attempt = 0
        # Bounded: at most max_retries+1 attempts between two waits, and waits stop at hold_until.
        while True:
            choice = self.table.pick(model, self.clock(), exclude=tried,
                                     avoid_instances={instance_id for instance_id, _ in tried})
            if isinstance(choice, NoRoute) or len(tried) > self.max_retries:
                if (isinstance(choice, NoRoute) and choice.kind is NoRouteKind.UNKNOWN_MODEL) or self.clock() >= hold_until:
                    if isinstance(choice, NoRoute):
                        return self._no_route(request_id, path, model, choice, failures)
                    break
                # Nothing can take the request right now (a drain during a scale-down, every endpoint
                # cooling down or already tried): hold it briefly instead of failing it, since
                # recovery windows are seconds long and the engines have not seen it yet.
                trace.hold(self.clock())
                await asyncio.sleep(min(self.hold_poll_sec, max(0.0, hold_until - self.clock())))
                tried.clear()
                continue
            route = choice
            trace.end_hold(self.clock())
            attempt += 1
            trace.attempt(attempt)
            tried.append(route.key)
            try:
                outcome = await self._attempt(request, route, path, body, request_id, attempt)
            except asyncio.CancelledError:
                log.info("request_id=%s instance=%d rank=%d %s: client went away after %.3fs; upstream aborted",
                         request_id, route.instance_id, route.rank, path, self.clock() - started)
                raise
            finally:
                self.table.release(route)
            if not isinstance(outcome, str):
                log.info("request_id=%s instance=%d rank=%d %s model=%s stream=%s status=%d attempts=%d %.3fs",
                         request_id, route.instance_id, route.rank, path, model, stream, outcome.status,
                         attempt, self.clock() - started)
                return outcome
            self.table.mark_failed(route.key, self.clock())
            trace.upstream_failed(route)
            failures.append(f"endpoint {route.label} ({route.ip}:{route.port}): {outcome}")
            del failures[:-8]
            log.warning("request_id=%s instance=%d rank=%d %s attempt %d failed before the first byte: %s",
                        request_id, route.instance_id, route.rank, path, attempt, outcome)
        message = f"no endpoint could serve the request after {attempt} attempts: " + "; ".join(failures)
        log.warning("request_id=%s %s model=%s -> 503: %s", request_id, path, model, message)
        return self._unavailable(request_id, message)

    def _no_route(
        self, request_id: str, path: str, model: str | None, choice: NoRoute, failures: list[str]
    ) -> web.Response:
        if choice.kind is NoRouteKind.UNKNOWN_MODEL:
            log.info("request_id=%s %s model=%s -> 404: %s", request_id, path, model, choice.message)
            return openai_error(404, choice.message, "invalid_request_error", "model_not_found", param="model",
                                headers={REQUEST_ID_HEADER: request_id})
        message = choice.message
        if failures:
            message += "; earlier attempts: " + "; ".join(failures)
        log.warning("request_id=%s %s model=%s -> 503: %s", request_id, path, model, message)
        return self._unavailable(request_id, message)

    async def _attempt(
        self, request: web.Request, route: Route, path: str, body: bytes, request_id: str, attempt: int
    ) -> web.StreamResponse | str:
        """The client's response, or (nothing sent yet) why this endpoint failed."""
        log.debug("request_id=%s instance=%d rank=%d %s attempt %d -> %s:%d",
                  request_id, route.instance_id, route.rank, path, attempt, route.ip, route.port)
        try:
            async with self.client.post(route, path, body, self._upstream_headers(request, request_id)) as resp:
                if resp.status in RETRYABLE_STATUSES:
                    return f"engine answered {resp.status}{await self._error_detail(resp)}"
                if resp.status == 200 and resp.content_type == "text/event-stream":
                    return await self._pass_stream(request, resp, route, request_id)
                try:
                    payload = await resp.read()
                except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
                    return f"reading the engine's {resp.status} response failed: {describe_client_error(exc)}"
                return web.Response(status=resp.status, body=payload,
                                    headers=self._response_headers(resp, route, request_id))
        except UpstreamError as exc:
            return exc.reason

    @staticmethod
    async def _error_detail(resp: aiohttp.ClientResponse) -> str:
        try:
            raw = await resp.content.read(_ERROR_DETAIL_MAX_BYTES)
        except (aiohttp.ClientError, asyncio.TimeoutError):
            return ""
        try:
            doc: Any = json.loads(raw)
            text = doc["error"]["message"] if isinstance(doc.get("error"), dict) else doc.get("detail", raw)
        except (ValueError, AttributeError, KeyError, TypeError):
            text = raw.decode("utf-8", "replace")
        text = " ".join(str(text).split())[:300]
        return f" ({text})" if text else ""

    async def _pass_stream(
        self, request: web.Request, resp: aiohttp.ClientResponse, route: Route, request_id: str
    ) -> web.StreamResponse | str:
        try:
            first = await resp.content.readany()
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            return f"stream broke before its first byte: {describe_client_error(exc)}"
        if not first:
            return "engine ended the stream before its first byte"
        out = web.StreamResponse(status=200, headers=self._response_headers(resp, route, request_id))
        await out.prepare(request)
        chunks = 1
        try:
            await out.write(first)
            while True:
                try:
                    chunk = await resp.content.readany()
                except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
                    reason = describe_client_error(exc)
                    self.metrics.stream_breaks.inc()
                    log.warning("request_id=%s instance=%d rank=%d stream broke after %d chunks: %s (not retried)",
                                request_id, route.instance_id, route.rank, chunks, reason)
                    await out.write(_sse_error(f"endpoint {route.label} failed mid-stream: {reason}"))
                    break
                if not chunk:
                    break
                chunks += 1
                await out.write(chunk)
            await out.write_eof()
        except ConnectionError as exc:
            # The client went away: leaving here closes the engine connection, aborting its request.
            log.info("request_id=%s instance=%d rank=%d client went away after %d chunks (%s); upstream aborted",
                     request_id, route.instance_id, route.rank, chunks, type(exc).__name__)
        return out
