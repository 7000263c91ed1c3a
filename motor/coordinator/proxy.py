"""Forwarding of one OpenAI-compatible inference request: route, retry before the first byte,
continue elsewhere after an engine fault (re-inference), pass the response (streamed or not) through.

Per attempt the routing table picks an endpoint (least outstanding, rank-aware) and counts the
request against it until the attempt ends. An attempt fails *before the first byte* when no
response headers arrive (connection refused/reset, timeout), when the engine answers 502/503/504,
when a non-streamed body cannot be read, or when a stream ends, breaks or carries an error event
before its first chunk. Then the endpoint is put in cooldown and the request tried on another
endpoint, of another instance when one can serve (at most ``max_retries`` more attempts).

Re-inference (``migration``, on by default; `motor.coordinator.reinference`): a stream whose engine
fails after its first chunk (an error event, a broken or reset connection, an end without
``[DONE]``, or the endpoint withdrawn from the serving view and stalled) continues on another endpoint of the
same model from what the client already received, the same request id, into the same client
stream; its last chunk before ``[DONE]`` carries ``motor_migration`` ``{"migrations", "endpoints"}``.
(A withdrawn endpoint's in-flight requests otherwise finish where they are: a drain; only its
started streams that deliver nothing for ``withdrawn_stall_sec`` move.)
A non-streamed request whose engine faulted (any failure after it was sent) is sent again whole:
it migrates once, and its response carries ``X-Motor-Migrated: 1`` and ``X-Motor-Migrated-From``.
Each migration holds the request again (``hold_when_unavailable_sec`` from the fault) while nothing
can serve (the drain of a scale-down). Bounded by ``max_migrations_per_request`` and
``max_carried_length``; beyond them, or with migration off, a started stream's failure is reported
in the stream (one OpenAI-style ``data: {"error": ...}`` event) and never retried, as before.

Responses carry ``X-Motor-Endpoint: <instance_id>/<rank>`` (the first endpoint of a stream) and
``X-Request-Id``. When nothing can serve, the request is held (``hold_when_unavailable_sec`` from its
arrival, polling the routing table) and then answered 503 with ``Retry-After``; a model no
published instance serves is 404 at once.

``canary`` sends the Controller's idle-fault probe: one one-token completion to one published
endpoint, bounded by its timeout.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web
from multidict import CIMultiDict

from motor.coordinator.config import MigrationConfig
from motor.coordinator.engine_client import EngineClient, UpstreamError, describe_client_error
from motor.coordinator.metrics import CoordinatorMetrics, RequestTrace
from motor.coordinator.reinference import (
    FINISHED,
    EventKind,
    MigrationLedger,
    ResumePlan,
    StreamTracker,
    continuation_body,
    plan_stream,
)
from motor.coordinator.routing import EndpointKey, NoRoute, NoRouteKind, Route, RoutingTable

log = logging.getLogger(__name__)

ENDPOINT_HEADER = "X-Motor-Endpoint"
REQUEST_ID_HEADER = "X-Request-Id"
MIGRATED_HEADER = "X-Motor-Migrated"
MIGRATED_FROM_HEADER = "X-Motor-Migrated-From"
RETRYABLE_STATUSES = frozenset({502, 503, 504})
CANARY_PROMPT = "motor canary"
MAX_CANARY_TIMEOUT_SEC = 30.0
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
    doc = parse_inference_doc(body)
    return (doc.get("model") or None), doc.get("stream") is True


def parse_inference_doc(body: bytes) -> dict[str, Any]:
    """The request body as a JSON object with a string (or absent) model; BadRequest otherwise."""
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadRequest(f"request body is not valid JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise BadRequest(f"request body must be a JSON object, got {type(doc).__name__}")
    model = doc.get("model")
    if model is not None and not isinstance(model, str):
        raise BadRequest(f"model must be a string, got {model!r}")
    return doc


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


@dataclass(frozen=True)
class AttemptFailure:
    """Why one attempt failed. ``reached``: the request got to the engine (anything but a failure to
    connect); ``kind``: the migration reason label (engine_error, connection, withdrawn)."""

    reason: str
    reached: bool = True
    kind: str = "engine_error"

    def __str__(self) -> str:
        return self.reason


@dataclass
class _Watch:
    """One attempt's response. A started stream whose endpoint left the serving view is closed once
    it stalls (``withdrawn`` then says why its read failed)."""

    resp: aiohttp.ClientResponse | None = None
    withdrawn: bool = False
    streaming: bool = False
    last_progress: float = 0.0
    timer: asyncio.TimerHandle | None = None


@dataclass
class _Attempts:
    """Routing state of one request: the endpoints tried since the last wait, failures, the hold."""

    model: str | None
    hold_until: float
    attempt: int = 0
    tried: list[EndpointKey] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    migrations: int = 0
    # Endpoint labels the request left after a fault, in order.
    migrated_from: list[str] = field(default_factory=list)
    first_instance: int | None = None

    def fail(self, route: Route, reason: str) -> None:
        self.failures.append(f"endpoint {route.label} ({route.ip}:{route.port}): {reason}")
        del self.failures[:-8]

    def migrate(self, route: Route, hold_until: float) -> None:
        """A new hold (from the fault) and attempt budget; the faulted endpoint stays excluded."""
        self.migrations += 1
        self.migrated_from.append(route.label)
        if self.first_instance is None:
            self.first_instance = route.instance_id
        self.hold_until = hold_until
        self.tried = [route.key]


@dataclass
class _StreamResult:
    """How one attempt of a resumable stream ended."""

    out: web.StreamResponse | None
    done: bool = False  # the client's stream is complete (or the client went away)
    failure: AttemptFailure | None = None
    started: bool = False  # this attempt sent the client at least one event
    fatal: str | None = None  # the stream cannot go on anywhere (reported to the client)


@dataclass(frozen=True)
class CanaryResult:
    endpoint_id: int
    served: bool
    http_status: int
    detail: str
    duration_sec: float


class CanaryRefused(Exception):
    """A canary that cannot be sent; ``code`` is NOT_FOUND, FAILED_PRECONDITION or INVALID_ARGUMENT."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


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
        migration: MigrationConfig | None = None,
        ledger: MigrationLedger | None = None,
    ) -> None:
        self.table = table
        self.client = client
        self.max_retries = max_retries
        self.retry_after_sec = retry_after_sec
        self.hold_sec = hold_sec
        self.hold_poll_sec = hold_poll_sec
        self.clock = clock
        self.metrics = metrics or CoordinatorMetrics()
        self.migration = migration if migration is not None else MigrationConfig()
        self.ledger = ledger or MigrationLedger()
        self._watches: dict[EndpointKey, set[int]] = {}
        self._watch_by_id: dict[int, _Watch] = {}
        table.add_withdrawal_listener(self._on_withdrawn)

    # -- the serving view ---------------------------------------------------------------------
    def _on_withdrawn(self, keys: frozenset[EndpointKey]) -> None:
        """A drain lets in-flight requests finish; only started streams that stall are moved."""
        stall = self.migration.withdrawn_stall_sec
        for key in keys:
            streams = [self._watch_by_id[i] for i in self._watches.get(key, ()) if self._watch_by_id[i].streaming]
            for watch in streams:
                if watch.timer is None:
                    watch.timer = asyncio.get_running_loop().call_later(stall, self._check_stall, watch)
            if streams:
                log.info("instance=%d rank=%d left the serving view with %d streams in flight: each moves if it "
                         "delivers nothing for %gs", key[0], key[1], len(streams), stall)

    def _check_stall(self, watch: _Watch) -> None:
        if id(watch) not in self._watch_by_id:
            return  # the attempt ended
        loop = asyncio.get_running_loop()
        idle = loop.time() - watch.last_progress
        stall = self.migration.withdrawn_stall_sec
        if idle < stall:
            watch.timer = loop.call_later(stall - idle, self._check_stall, watch)
            return
        watch.withdrawn = True
        if watch.resp is not None:
            watch.resp.close()  # wakes the attempt's pending read

    def _watch(self, key: EndpointKey) -> _Watch:
        watch = _Watch()
        self._watch_by_id[id(watch)] = watch
        self._watches.setdefault(key, set()).add(id(watch))
        return watch

    def _unwatch(self, key: EndpointKey, watch: _Watch) -> None:
        if watch.timer is not None:
            watch.timer.cancel()
        self._watch_by_id.pop(id(watch), None)
        ids = self._watches.get(key)
        if ids is not None:
            ids.discard(id(watch))
            if not ids:
                del self._watches[key]

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
            doc = parse_inference_doc(body)
        except BadRequest as exc:
            log.info("request_id=%s %s refused: %s", request_id, path, exc)
            return openai_error(400, str(exc), "invalid_request_error", "invalid_request",
                                headers={REQUEST_ID_HEADER: request_id})
        model, stream = (doc.get("model") or None), doc.get("stream") is True
        migrate = self.migration.enabled
        if stream and migrate:
            plan = plan_stream(path, doc, max_carried_length=self.migration.max_carried_length,
                               carry_token_ids=self.migration.carry_token_ids)
            if isinstance(plan, ResumePlan):
                return await self._route_stream(request, path, body, plan, model, request_id, started, trace)
            log.info("request_id=%s %s: this stream cannot be continued elsewhere after a fault: %s",
                     request_id, path, plan)
            migrate = False
        st = _Attempts(model, started + self.hold_sec)
        # Bounded: at most max_retries+1 attempts between two waits, waits stop at hold_until, and a
        # non-streamed request migrates (restarting its hold) at most once.
        while True:
            route = await self._pick(st, request_id, path, trace)
            if isinstance(route, web.Response):
                if st.first_instance is not None:
                    self.ledger.failed(st.first_instance)
                    trace.migration_failed()
                return route
            st.attempt += 1
            trace.attempt(st.attempt)
            st.tried.append(route.key)
            try:
                outcome = await self._attempt(request, route, path, body, request_id, st.attempt)
            except asyncio.CancelledError:
                log.info("request_id=%s instance=%d rank=%d %s: client went away after %.3fs; upstream aborted",
                         request_id, route.instance_id, route.rank, path, self.clock() - started)
                raise
            finally:
                self.table.release(route)
            if not isinstance(outcome, AttemptFailure):
                log.info("request_id=%s instance=%d rank=%d %s model=%s stream=%s status=%d attempts=%d %.3fs",
                         request_id, route.instance_id, route.rank, path, model, stream, outcome.status,
                         st.attempt, self.clock() - started)
                if st.migrated_from:
                    outcome.headers[MIGRATED_HEADER] = str(st.migrations)
                    outcome.headers[MIGRATED_FROM_HEADER] = ",".join(st.migrated_from)
                return outcome
            now = self.clock()
            self.table.mark_failed(route.key, now)
            trace.upstream_failed(route)
            st.fail(route, outcome.reason)
            log.warning("request_id=%s instance=%d rank=%d %s attempt %d failed before the first byte: %s",
                        request_id, route.instance_id, route.rank, path, st.attempt, outcome)
            if migrate and not stream and outcome.reached and not st.migrations:
                # The engine had the request and faulted: send it again whole, held anew from now.
                st.migrate(route, now + self.hold_sec)
                self.ledger.migrated(route.instance_id)
                trace.migrated(route, outcome.kind)
                log.warning("request_id=%s instance=%d rank=%d %s: engine faulted under the request; "
                            "re-sending it to another endpoint (migration 1)", request_id, route.instance_id,
                            route.rank, path)

    async def _pick(self, st: _Attempts, request_id: str, path: str, trace: RequestTrace) -> Route | web.Response:
        """The next endpoint to try, holding while nothing can serve; or the final error answer."""
        while True:
            over_budget = len(st.tried) > self.max_retries
            choice = None if over_budget else self.table.pick(
                st.model, self.clock(), exclude=st.tried, avoid_instances={iid for iid, _ in st.tried})
            if isinstance(choice, Route):
                trace.end_hold(self.clock())
                return choice
            if (isinstance(choice, NoRoute) and choice.kind is NoRouteKind.UNKNOWN_MODEL) or self.clock() >= st.hold_until:
                if isinstance(choice, NoRoute):
                    return self._no_route(request_id, path, st.model, choice, st.failures)
                message = f"no endpoint could serve the request after {st.attempt} attempts: " + "; ".join(st.failures)
                log.warning("request_id=%s %s model=%s -> 503: %s", request_id, path, st.model, message)
                return self._unavailable(request_id, message)
            # Nothing can take the request right now (a drain during a scale-down, every endpoint
            # cooling down or already tried): hold it briefly instead of failing it, since
            # recovery windows are seconds long and the engines have not seen it yet.
            trace.hold(self.clock())
            await asyncio.sleep(min(self.hold_poll_sec, max(0.0, st.hold_until - self.clock())))
            st.tried.clear()

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
        self, request: web.Request, route: Route, path: str, body: bytes, request_id: str, attempt: int,
    ) -> web.StreamResponse | AttemptFailure:
        """The client's response, or (nothing sent yet) why this endpoint failed."""
        log.debug("request_id=%s instance=%d rank=%d %s attempt %d -> %s:%d",
                  request_id, route.instance_id, route.rank, path, attempt, route.ip, route.port)
        try:
            async with self.client.post(route, path, body, self._upstream_headers(request, request_id)) as resp:
                if resp.status in RETRYABLE_STATUSES:
                    return AttemptFailure(f"engine answered {resp.status}{await self._error_detail(resp)}")
                if resp.status == 200 and resp.content_type == "text/event-stream":
                    return await self._pass_stream(request, resp, route, request_id)
                try:
                    payload = await resp.read()
                except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
                    return AttemptFailure(f"reading the engine's {resp.status} response failed: "
                                          f"{describe_client_error(exc)}", kind="connection")
                return web.Response(status=resp.status, body=payload,
                                    headers=self._response_headers(resp, route, request_id))
        except UpstreamError as exc:
            reached = not isinstance(exc.__cause__, aiohttp.ClientConnectorError)
            return AttemptFailure(exc.reason, reached=reached, kind="connection")

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
    ) -> web.StreamResponse | AttemptFailure:
        """Byte-for-byte pass-through of a stream that is not continued elsewhere after a fault."""
        try:
            first = await resp.content.readany()
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            return AttemptFailure(f"stream broke before its first byte: {describe_client_error(exc)}",
                                  kind="connection")
        if not first:
            return AttemptFailure("engine ended the stream before its first byte", kind="connection")
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

    # -- a stream that continues elsewhere after a fault ------------------------------------
    async def _route_stream(
        self, request: web.Request, path: str, body: bytes, plan: ResumePlan, model: str | None,
        request_id: str, started: float, trace: RequestTrace,
    ) -> web.StreamResponse:
        tracker = StreamTracker(plan, self.migration.max_carried_length)
        st = _Attempts(model, started + self.hold_sec)
        upstream = plan.upstream_body(body)
        out: web.StreamResponse | None = None
        # Bounded: attempts as in _route between two waits, waits stop at hold_until, and at most
        # max_migrations_per_request continuations (each one restarts the hold from its fault).
        while True:
            route = await self._pick(st, request_id, path, trace)
            if isinstance(route, web.Response):
                if out is None:
                    return route
                return await self._end_stream(out, st, trace, request_id,
                                              "the stream could not be continued after its engine failed: "
                                              + _answer_message(route))
            st.attempt += 1
            trace.attempt(st.attempt)
            st.tried.append(route.key)
            watch = self._watch(route.key)
            try:
                result = await self._stream_attempt(request, route, path, upstream, request_id, tracker, out, st, watch)
            except asyncio.CancelledError:
                log.info("request_id=%s instance=%d rank=%d %s: client went away after %.3fs; upstream aborted",
                         request_id, route.instance_id, route.rank, path, self.clock() - started)
                raise
            finally:
                self._unwatch(route.key, watch)
                self.table.release(route)
            out = result.out if result.out is not None else out
            if result.done:
                log.info("request_id=%s instance=%d rank=%d %s model=%s stream=True status=200 attempts=%d "
                         "migrations=%d tokens=%d %.3fs", request_id, route.instance_id, route.rank, path, model,
                         st.attempt, st.migrations, tracker.tokens, self.clock() - started)
                return out if out is not None else web.Response(status=200)
            if result.fatal is not None:
                assert out is not None
                return await self._end_stream(out, st, trace, request_id, result.fatal)
            failure = result.failure
            assert failure is not None
            now = self.clock()
            self.table.mark_failed(route.key, now)
            if not result.started:
                trace.upstream_failed(route)
                st.fail(route, failure.reason)
                log.warning("request_id=%s instance=%d rank=%d %s attempt %d failed before the first byte: %s",
                            request_id, route.instance_id, route.rank, path, st.attempt, failure)
                continue
            assert out is not None
            st.fail(route, failure.reason)
            nxt = continuation_body(tracker)
            if nxt is FINISHED:
                log.info("request_id=%s instance=%d rank=%d %s: engine failed after the last token (%s); "
                         "stream completed", request_id, route.instance_id, route.rank, path, failure)
                return await self._finish_stream(out, st, tracker, route)
            if isinstance(nxt, str) or st.migrations >= self.migration.max_migrations_per_request:
                why = nxt if isinstance(nxt, str) else (
                    f"max_migrations_per_request {self.migration.max_migrations_per_request} reached")
                return await self._end_stream(
                    out, st, trace, request_id,
                    f"endpoint {route.label} failed mid-stream: {failure}; not continued elsewhere: {why}")
            st.migrate(route, now + self.hold_sec)
            self.ledger.migrated(route.instance_id)
            trace.migrated(route, failure.kind)
            tracker.start_continuation()
            upstream = nxt
            log.warning("request_id=%s instance=%d rank=%d %s: engine failed mid-stream after %d tokens (%s); "
                        "continuing elsewhere (migration %d of at most %d)", request_id, route.instance_id,
                        route.rank, path, tracker.tokens, failure, st.migrations,
                        self.migration.max_migrations_per_request)

    async def _stream_attempt(
        self, request: web.Request, route: Route, path: str, body: bytes, request_id: str,
        tracker: StreamTracker, out: web.StreamResponse | None, st: _Attempts, watch: _Watch,
    ) -> _StreamResult:
        """One attempt of a resumable stream: whole events to the client as they come, rewritten when
        the attempt continues an earlier one; stops at [DONE], an error event or a broken stream."""
        log.debug("request_id=%s instance=%d rank=%d %s attempt %d -> %s:%d", request_id, route.instance_id,
                  route.rank, path, st.attempt, route.ip, route.port)
        started = False
        tracker.new_attempt()
        try:
            async with self.client.post(route, path, body, self._upstream_headers(request, request_id)) as resp:
                watch.resp = resp
                if resp.status in RETRYABLE_STATUSES:
                    return _StreamResult(out, failure=AttemptFailure(
                        f"engine answered {resp.status}{await self._error_detail(resp)}"))
                if not (resp.status == 200 and resp.content_type == "text/event-stream"):
                    try:
                        payload = await resp.read()
                    except (aiohttp.ClientError, TimeoutError) as exc:
                        return _StreamResult(out, failure=AttemptFailure(
                            f"reading the engine's {resp.status} response failed: {describe_client_error(exc)}",
                            kind="connection"))
                    if out is None:  # the engine's own answer (a 400, say) is the client's
                        return _StreamResult(web.Response(status=resp.status, body=payload,
                                                          headers=self._response_headers(resp, route, request_id)),
                                             done=True)
                    detail = " ".join(payload.decode("utf-8", "replace").split())[:300]
                    return _StreamResult(out, fatal=f"endpoint {route.label} refused the continuation: "
                                                    f"{resp.status} {detail}")
                loop = asyncio.get_running_loop()
                watch.streaming, watch.last_progress = True, loop.time()
                while True:
                    try:
                        chunk = await resp.content.readany()
                        watch.last_progress = loop.time()
                    except (aiohttp.ClientError, TimeoutError) as exc:
                        if watch.withdrawn:
                            failure = AttemptFailure(f"endpoint {route.label} left the serving view and delivered "
                                                     f"nothing for {self.migration.withdrawn_stall_sec:g}s",
                                                     kind="withdrawn")
                        else:
                            failure = AttemptFailure(f"stream broke: {describe_client_error(exc)}", kind="connection")
                        return _StreamResult(out, failure=failure, started=started)
                    if not chunk:
                        return _StreamResult(out, failure=AttemptFailure("engine ended the stream without [DONE]",
                                                                         kind="connection"), started=started)
                    try:
                        events = tracker.feed(chunk)
                    except ValueError as exc:
                        if out is None:
                            return _StreamResult(out, failure=AttemptFailure(str(exc)))
                        return _StreamResult(out, fatal=f"endpoint {route.label}: {exc}")
                    # The events of one upstream read go to the client in one write (one chunk, one send).
                    pending: list[bytes] = []
                    for event in events:
                        kind, data = tracker.process(event)
                        if kind == EventKind.ERROR:
                            if pending:
                                await out.write(b"".join(pending))  # type: ignore[union-attr]
                                started = True
                            return _StreamResult(out, failure=AttemptFailure(
                                f"engine aborted the stream: {_event_error(event.doc)}"), started=started)
                        if kind == EventKind.DONE:
                            if out is None:
                                out = await self._open_stream(request, resp, route, request_id)
                            if st.migrations:
                                pending.append(tracker.marker(st.migrations, [*st.migrated_from, route.label]))
                            pending.append(b"data: [DONE]\n\n")
                            await out.write(b"".join(pending))
                            await out.write_eof()
                            return _StreamResult(out, done=True, started=True)
                        if data is None:
                            continue
                        if out is None:
                            out = await self._open_stream(request, resp, route, request_id)
                        pending.append(data)
                    if pending:
                        await out.write(pending[0] if len(pending) == 1 else b"".join(pending))  # type: ignore[union-attr]
                        started = True
        except UpstreamError as exc:
            reached = not isinstance(exc.__cause__, aiohttp.ClientConnectorError)
            return _StreamResult(out, failure=AttemptFailure(exc.reason, reached=reached, kind="connection"))
        except ConnectionError as exc:
            # The client went away: leaving here closes the engine connection, aborting its request.
            log.info("request_id=%s instance=%d rank=%d client went away after %d tokens (%s); upstream aborted",
                     request_id, route.instance_id, route.rank, tracker.tokens, type(exc).__name__)
            return _StreamResult(out, done=True, started=started)

    async def _open_stream(self, request: web.Request, resp: aiohttp.ClientResponse, route: Route,
                           request_id: str) -> web.StreamResponse:
        out = web.StreamResponse(status=200, headers=self._response_headers(resp, route, request_id))
        await out.prepare(request)
        return out

    async def _finish_stream(self, out: web.StreamResponse, st: _Attempts, tracker: StreamTracker,
                             route: Route) -> web.StreamResponse:
        try:
            if st.migrations:
                await out.write(tracker.marker(st.migrations, [*st.migrated_from, route.label]))
            await out.write(b"data: [DONE]\n\n")
            await out.write_eof()
        except ConnectionError:
            pass
        return out

    async def _end_stream(self, out: web.StreamResponse, st: _Attempts, trace: RequestTrace, request_id: str,
                          message: str) -> web.StreamResponse:
        """The client's stream ends with one error event (no [DONE]): it could not be completed."""
        self.metrics.stream_breaks.inc()
        if st.first_instance is not None:
            self.ledger.failed(st.first_instance)
            trace.migration_failed()
        log.warning("request_id=%s stream failed after %d migrations: %s", request_id, st.migrations, message)
        try:
            await out.write(_sse_error(message))
            await out.write_eof()
        except ConnectionError:
            pass
        return out

    # -- the idle-fault probe ---------------------------------------------------------------
    async def canary(self, instance_id: int, endpoint_ids: list[int], timeout_sec: float,
                     request_id: str) -> CanaryResult:
        """One one-token completion to the first published, routable endpoint of ``endpoint_ids``."""
        if not 0 < timeout_sec <= MAX_CANARY_TIMEOUT_SEC:
            raise CanaryRefused("INVALID_ARGUMENT", f"timeout_sec {timeout_sec!r} not in (0, {MAX_CANARY_TIMEOUT_SEC:g}]")
        if not endpoint_ids:
            raise CanaryRefused("INVALID_ARGUMENT", "endpoint_ids is empty: name the endpoints that may take the canary")
        if not self.table.is_published(instance_id):
            raise CanaryRefused("NOT_FOUND", f"instance {instance_id} is not published")
        route = next((r for r in (self.table.route_to(instance_id, e) for e in endpoint_ids) if r is not None), None)
        if route is None:
            raise CanaryRefused("FAILED_PRECONDITION", f"none of the endpoints {sorted(endpoint_ids)} of instance "
                                                       f"{instance_id} is published and routable")
        body = json.dumps({"model": route.model, "prompt": CANARY_PROMPT, "max_tokens": 1}).encode()
        headers = {"Content-Type": "application/json", REQUEST_ID_HEADER: request_id}
        started = self.clock()
        status, detail, outcome = 0, "", "failed"
        try:
            async with asyncio.timeout(timeout_sec):
                async with self.client.post(route, "/v1/completions", body, headers) as resp:
                    status = resp.status
                    if status == 200:
                        await resp.read()
                        outcome, detail = "served", "served"
                    else:
                        detail = f"engine answered {status}{await self._error_detail(resp)}"
        except TimeoutError:
            outcome, detail = "timeout", f"no answer within {timeout_sec:g}s"
        except UpstreamError as exc:
            detail = exc.reason
        except (aiohttp.ClientError, OSError) as exc:
            detail = describe_client_error(exc)
        elapsed = self.clock() - started
        self.metrics.canaries.labels(outcome).inc()
        log.warning("request_id=%s instance=%d rank=%d canary %s in %.3fs: %s", request_id, instance_id, route.rank,
                    outcome, elapsed, detail)
        return CanaryResult(route.rank, outcome == "served", status, detail, elapsed)


def _answer_message(response: web.Response) -> str:
    """The message of one of our own OpenAI-shaped error answers."""
    try:
        return str(json.loads(response.text or "")["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return f"HTTP {response.status}"


def _event_error(doc: dict[str, Any] | None) -> str:
    if not doc:
        return "error event"
    err = doc.get("error", doc)
    message = err.get("message") if isinstance(err, dict) else err
    return " ".join(str(message).split())[:300]
