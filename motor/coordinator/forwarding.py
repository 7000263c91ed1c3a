"""The attempts of one inference request, the same for a whole request and a resumable stream: pick
an endpoint, send the request, release the endpoint, and on a failure put the endpoint in cooldown
and try another one (of another instance when one can serve).

An attempt fails *before the first byte* when no response headers arrive (connection refused or
reset, timeout) or when the engine answers 502/503/504; the `Relay` of the answer decides the rest:
what a failure while reading means, and what follows a failure (try elsewhere, continue a stream
elsewhere, or end the answer). At most ``max_retries`` more attempts between two waits.

While nothing can serve, the request is held (``hold_when_unavailable_sec`` from its arrival, or
from the fault of its last migration, polling the routing table) and then answered 503 with
``Retry-After``; a model no published instance serves is 404 at once.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import aiohttp
from aiohttp import web

from motor.coordinator.engine_client import EngineClient, UpstreamError, describe_client_error
from motor.coordinator.metrics import RequestTrace
from motor.coordinator.openai_format import REQUEST_ID_HEADER, error_detail, openai_error
from motor.coordinator.request_log import RequestLog
from motor.coordinator.routing import EndpointKey, NoRoute, NoRouteKind, Route, RoutingTable

RETRYABLE_STATUSES = frozenset({502, 503, 504})


@dataclass(frozen=True)
class AttemptFailure:
    """Why one attempt failed. ``reached``: the request got to the engine (anything but a failure to
    connect); ``kind``: the migration reason label (engine_error, connection, withdrawn);
    ``started``: the client already got part of the answer from this attempt."""

    reason: str
    reached: bool = True
    kind: str = "engine_error"
    started: bool = False

    def __str__(self) -> str:
        return self.reason


@dataclass
class Attempts:
    """Routing state of one request: the endpoints tried since the last wait, failures, the hold."""

    model: str | None
    hold_until: float
    hold_sec: float
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

    def migrate(self, route: Route, now: float) -> None:
        """A new hold (from the fault at ``now``) and attempt budget; the faulted endpoint stays excluded."""
        self.migrations += 1
        self.migrated_from.append(route.label)
        if self.first_instance is None:
            self.first_instance = route.instance_id
        self.hold_until = now + self.hold_sec
        self.tried = [route.key]


@dataclass(frozen=True)
class Inbound:
    """The client's request, as every attempt sends it."""

    request: web.Request
    path: str
    log: RequestLog
    trace: RequestTrace
    started_sec: float
    upstream_headers: dict[str, str]
    # Bound of a non-streamed engine answer (max_engine_answer_bytes).
    max_answer_bytes: int = 64 * 1024 * 1024

    @property
    def request_id(self) -> str:
        return self.log.request_id


class Relay(Protocol):
    """What differs between a whole request and a resumable stream."""

    attempts: Attempts

    def body(self) -> bytes:
        """The next attempt's request body."""

    async def relay(self, route: Route, resp: aiohttp.ClientResponse,
                    rlog: RequestLog) -> web.StreamResponse | AttemptFailure:
        """The engine's answer (not 502-504) to the client: the client's final response, or why it failed."""

    async def after_failure(self, route: Route, failure: AttemptFailure, now: float,
                            rlog: RequestLog) -> web.StreamResponse | None:
        """After a failed attempt (the endpoint is cooling down): the final response, or None to go on."""

    async def give_up(self, answer: web.Response) -> web.StreamResponse:
        """Nothing can serve (``answer`` says why): the final response."""


class AnswerTooLarge(Exception):
    """A non-streamed engine answer exceeded its bound; the message says how far it got."""


async def read_answer(resp: aiohttp.ClientResponse, max_bytes: int) -> bytes | AttemptFailure:
    """The whole body of an engine's answer, at most `max_bytes` (else AnswerTooLarge, before more is
    read), or why it could not be read."""
    declared = resp.content_length
    if declared is not None and declared > max_bytes:
        raise AnswerTooLarge(f"the engine's answer declares {declared} bytes, above max_engine_answer_bytes "
                             f"{max_bytes}")
    pieces: list[bytes] = []
    size = 0
    try:
        while chunk := await resp.content.read(min(1024 * 1024, max_bytes + 1 - size) or 1):
            size += len(chunk)
            if size > max_bytes:
                raise AnswerTooLarge(f"the engine's answer exceeds max_engine_answer_bytes {max_bytes}")
            pieces.append(chunk)
    except (aiohttp.ClientError, TimeoutError) as exc:
        return AttemptFailure(f"reading the engine's {resp.status} response failed: {describe_client_error(exc)}",
                              kind="connection")
    return b"".join(pieces)


class AttemptLoop:
    def __init__(
        self, table: RoutingTable, client: EngineClient, *, max_retries: int, retry_after_sec: int,
        hold_poll_sec: float = 0.05, clock: Callable[[], float] = time.monotonic,
        on_oversized: Callable[[], None] = lambda: None,
    ) -> None:
        self.on_oversized = on_oversized
        self.table = table
        self.client = client
        self.max_retries = max_retries
        self.retry_after_sec = retry_after_sec
        self.hold_poll_sec = hold_poll_sec
        self.clock = clock

    async def run(self, inbound: Inbound, relay: Relay) -> web.StreamResponse:
        st = relay.attempts
        # Bounded: at most max_retries+1 attempts between two waits, the waits stop at hold_until, and
        # the relay bounds its migrations (each one restarts the hold from its fault).
        while True:
            route = await self._pick(st, inbound)
            if isinstance(route, web.Response):
                return await relay.give_up(route)
            st.attempt += 1
            inbound.trace.attempt(st.attempt)
            st.tried.append(route.key)
            rlog = inbound.log.routed(route)
            try:
                outcome = await self._attempt(inbound, relay, route, rlog)
            except asyncio.CancelledError:
                rlog.info("%s: client went away after %.3fs; upstream aborted", inbound.path,
                          self.clock() - inbound.started_sec)
                raise
            finally:
                self.table.release(route)
            if not isinstance(outcome, AttemptFailure):
                return outcome
            now = self.clock()
            self.table.mark_failed(route.key, now)
            st.fail(route, outcome.reason)
            if not outcome.started:
                inbound.trace.upstream_failed(route)
                rlog.warning("%s attempt %d failed before the first byte: %s", inbound.path, st.attempt, outcome)
            final = await relay.after_failure(route, outcome, now, rlog)
            if final is not None:
                return final

    async def _attempt(self, inbound: Inbound, relay: Relay, route: Route,
                       rlog: RequestLog) -> web.StreamResponse | AttemptFailure:
        rlog.debug("%s attempt %d -> %s:%d", inbound.path, relay.attempts.attempt, route.ip, route.port)
        try:
            async with self.client.post(route, inbound.path, relay.body(), inbound.upstream_headers) as resp:
                if resp.status in RETRYABLE_STATUSES:
                    return AttemptFailure(f"engine answered {resp.status}{await error_detail(resp)}")
                return await relay.relay(route, resp, rlog)
        except UpstreamError as exc:
            reached = not isinstance(exc.__cause__, aiohttp.ClientConnectorError)
            return AttemptFailure(exc.reason, reached=reached, kind="connection")
        except AnswerTooLarge as exc:
            # Not tried elsewhere: another engine would answer the same request as largely.
            self.on_oversized()
            rlog.error("%s: %s; answered 502", inbound.path, exc)
            return openai_error(502, f"endpoint {route.label}: {exc}", "upstream_error", "answer_too_large",
                                headers={REQUEST_ID_HEADER: inbound.request_id})

    async def _pick(self, st: Attempts, inbound: Inbound) -> Route | web.Response:
        """The next endpoint to try, holding while nothing can serve; or the final error answer."""
        while True:
            over_budget = len(st.tried) > self.max_retries
            choice = None if over_budget else self.table.pick(
                st.model, self.clock(), exclude=st.tried, avoid_instances={iid for iid, _ in st.tried})
            if isinstance(choice, Route):
                inbound.trace.end_hold(self.clock())
                return choice
            if (isinstance(choice, NoRoute) and choice.kind is NoRouteKind.UNKNOWN_MODEL) or self.clock() >= st.hold_until:
                if isinstance(choice, NoRoute):
                    return self._no_route(inbound, st.model, choice, st.failures)
                message = f"no endpoint could serve the request after {st.attempt} attempts: " + "; ".join(st.failures)
                inbound.log.warning("%s model=%s -> 503: %s", inbound.path, st.model, message)
                return self._unavailable(inbound.request_id, message)
            # Nothing can take the request right now (a drain during a scale-down, every endpoint
            # cooling down or already tried): hold it briefly instead of failing it, since
            # recovery windows are seconds long and the engines have not seen it yet.
            inbound.trace.hold(self.clock())
            await asyncio.sleep(min(self.hold_poll_sec, max(0.0, st.hold_until - self.clock())))
            st.tried.clear()

    def _no_route(self, inbound: Inbound, model: str | None, choice: NoRoute, failures: list[str]) -> web.Response:
        if choice.kind is NoRouteKind.UNKNOWN_MODEL:
            inbound.log.info("%s model=%s -> 404: %s", inbound.path, model, choice.message)
            return openai_error(404, choice.message, "invalid_request_error", "model_not_found", param="model",
                                headers={REQUEST_ID_HEADER: inbound.request_id})
        message = choice.message
        if failures:
            message += "; earlier attempts: " + "; ".join(failures)
        inbound.log.warning("%s model=%s -> 503: %s", inbound.path, model, message)
        return self._unavailable(inbound.request_id, message)

    def _unavailable(self, request_id: str, message: str) -> web.Response:
        return openai_error(
            503, message, "service_unavailable_error", "service_unavailable",
            headers={"Retry-After": str(self.retry_after_sec), REQUEST_ID_HEADER: request_id},
        )
