"""The resumable stream relay (re-inference of a stream): whole SSE events go to the client as they
come; a stream whose engine fails after its first chunk (an error event, a broken or reset
connection, an end without ``[DONE]``, or the endpoint withdrawn from the serving view and stalled,
`motor.coordinator.stall_watch`) continues on another endpoint of the same model from what the
client already received, with the same request id, into the same client stream
(`motor.coordinator.reinference` builds the continuation and rewrites its events). Its last chunk
before ``[DONE]`` carries ``motor_migration`` ``{"migrations", "endpoints"}``.

Bounded by ``max_migrations_per_request`` and ``max_carried_length``; beyond them the client's
stream ends with one OpenAI-style ``data: {"error": ...}`` event and no ``[DONE]``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

import aiohttp
from aiohttp import web

from motor.coordinator.config import MigrationConfig
from motor.coordinator.engine_client import describe_client_error
from motor.coordinator.forwarding import AttemptFailure, Attempts, Inbound, read_answer
from motor.coordinator.metrics import CoordinatorMetrics
from motor.coordinator.migration_ledger import MigrationLedger
from motor.coordinator.openai_format import answer_message, event_error, response_headers, sse_error
from motor.coordinator.reinference import FINISHED, EventKind, ResumePlan, StreamTracker, continuation_body
from motor.coordinator.request_log import RequestLog
from motor.coordinator.routing import Route
from motor.coordinator.stall_watch import StallWatch, WatchedStream


@dataclass(frozen=True)
class _Unfinishable:
    """The client's stream cannot go on anywhere: the message it ends with."""

    message: str


class ResumableStreamRelay:
    def __init__(
        self, inbound: Inbound, plan: ResumePlan, body: bytes, attempts: Attempts, *, migration: MigrationConfig,
        stall_watch: StallWatch, ledger: MigrationLedger, metrics: CoordinatorMetrics,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.inbound = inbound
        self.attempts = attempts
        self.migration = migration
        self.stall_watch = stall_watch
        self.ledger = ledger
        self.metrics = metrics
        self.clock = clock
        self.tracker = StreamTracker(plan, migration.max_carried_length)
        self._upstream = plan.upstream_body(body)
        # The client's response, once its first event is on the way.
        self.out: web.StreamResponse | None = None

    def body(self) -> bytes:
        return self._upstream

    async def give_up(self, answer: web.Response) -> web.StreamResponse:
        if self.out is None:
            return answer
        return await self._end("the stream could not be continued after its engine failed: " + answer_message(answer))

    async def relay(self, route: Route, resp: aiohttp.ClientResponse,
                    rlog: RequestLog) -> web.StreamResponse | AttemptFailure:
        self.tracker.new_attempt()
        with self.stall_watch.watch(route.key) as watched:
            watched.resp = resp
            try:
                ended = await self._events(route, resp, watched)
            except ConnectionError as exc:
                # The client went away: leaving here closes the engine connection, aborting its request.
                rlog.info("client went away after %d tokens (%s); upstream aborted", self.tracker.tokens,
                          type(exc).__name__)
                ended = None
        if isinstance(ended, AttemptFailure):
            return ended
        if isinstance(ended, _Unfinishable):
            return await self._end(ended.message)
        st = self.attempts
        rlog.info("%s model=%s stream=True status=200 attempts=%d migrations=%d tokens=%d %.3fs", self.inbound.path,
                  st.model, st.attempt, st.migrations, self.tracker.tokens, self.clock() - self.inbound.started_sec)
        return self.out if self.out is not None else web.Response(status=200)

    async def after_failure(self, route: Route, failure: AttemptFailure, now: float,
                            rlog: RequestLog) -> web.StreamResponse | None:
        if not failure.started:
            return None  # tried elsewhere, as any failure before the first byte
        st, tracker = self.attempts, self.tracker
        nxt = continuation_body(tracker)
        if nxt is FINISHED:
            rlog.info("%s: engine failed after the last token (%s); stream completed", self.inbound.path, failure)
            return await self._finish(route)
        limit = self.migration.max_migrations_per_request
        if isinstance(nxt, str) or st.migrations >= limit:
            why = nxt if isinstance(nxt, str) else f"max_migrations_per_request {limit} reached"
            return await self._end(f"endpoint {route.label} failed mid-stream: {failure}; "
                                   f"not continued elsewhere: {why}")
        assert isinstance(nxt, bytes)
        st.migrate(route, now)
        self.ledger.migrated(route.instance_id)
        self.inbound.trace.migrated(route, failure.kind)
        tracker.start_continuation()
        self._upstream = nxt
        rlog.warning("%s: engine failed mid-stream after %d tokens (%s); continuing elsewhere (migration %d of at "
                     "most %d)", self.inbound.path, tracker.tokens, failure, st.migrations, limit)
        return None

    async def _events(self, route: Route, resp: aiohttp.ClientResponse,
                      watched: WatchedStream) -> AttemptFailure | _Unfinishable | None:
        """One attempt's events to the client, rewritten when it continues an earlier one; None once
        the client's stream is complete. Stops at [DONE], an error event or a broken stream."""
        tracker = self.tracker
        if not (resp.status == 200 and resp.content_type == "text/event-stream"):
            payload = await read_answer(resp, self.inbound.max_answer_bytes)
            if isinstance(payload, AttemptFailure):
                return payload
            if self.out is None:  # the engine's own answer (a 400, say) is the client's
                self.out = web.Response(status=resp.status, body=payload,
                                        headers=response_headers(resp, route, self.inbound.request_id))
                return None
            detail = " ".join(payload.decode("utf-8", "replace").split())[:300]
            return _Unfinishable(f"endpoint {route.label} refused the continuation: {resp.status} {detail}")
        loop = asyncio.get_running_loop()
        watched.streaming, watched.last_progress = True, loop.time()
        started = False  # this attempt sent the client at least one event
        while True:
            try:
                chunk = await resp.content.readany()
                watched.last_progress = loop.time()
            except (aiohttp.ClientError, TimeoutError) as exc:
                if watched.withdrawn:
                    return AttemptFailure(f"endpoint {route.label} left the serving view and delivered nothing for "
                                          f"{self.stall_watch.stall_sec:g}s", kind="withdrawn", started=started)
                return AttemptFailure(f"stream broke: {describe_client_error(exc)}", kind="connection",
                                      started=started)
            if not chunk:
                return AttemptFailure("engine ended the stream without [DONE]", kind="connection", started=started)
            try:
                events = tracker.feed(chunk)
            except ValueError as exc:
                if self.out is None:
                    return AttemptFailure(str(exc))
                return _Unfinishable(f"endpoint {route.label}: {exc}")
            # The events of one upstream read go to the client in one write (one chunk, one send).
            pending: list[bytes] = []
            for event in events:
                kind, data = tracker.process(event)
                if kind == EventKind.ERROR:
                    if pending:
                        await (await self._open(resp, route)).write(b"".join(pending))
                        started = True
                    return AttemptFailure(f"engine aborted the stream: {event_error(event.doc)}", started=started)
                if kind == EventKind.DONE:
                    out = await self._open(resp, route)
                    if self.attempts.migrations:
                        pending.append(self._marker(route))
                    pending.append(b"data: [DONE]\n\n")
                    await out.write(b"".join(pending))
                    await out.write_eof()
                    return None
                if data is None:
                    continue
                await self._open(resp, route)
                pending.append(data)
            if pending:
                out = await self._open(resp, route)
                await out.write(pending[0] if len(pending) == 1 else b"".join(pending))
                started = True

    async def _open(self, resp: aiohttp.ClientResponse, route: Route) -> web.StreamResponse:
        """The client's stream, opened with the first engine's headers when it is not yet."""
        if self.out is None:
            out = web.StreamResponse(status=200, headers=response_headers(resp, route, self.inbound.request_id))
            await out.prepare(self.inbound.request)
            self.out = out
        return self.out

    def _marker(self, route: Route) -> bytes:
        st = self.attempts
        return self.tracker.marker(st.migrations, [*st.migrated_from, route.label])

    async def _finish(self, route: Route) -> web.StreamResponse:
        """Everything was delivered before the engine failed: the stream ends as a complete one."""
        out = self.out
        assert out is not None
        try:
            if self.attempts.migrations:
                await out.write(self._marker(route))
            await out.write(b"data: [DONE]\n\n")
            await out.write_eof()
        except ConnectionError:
            pass
        return out

    async def _end(self, message: str) -> web.StreamResponse:
        """The client's stream ends with one error event (no [DONE]): it could not be completed."""
        out = self.out
        assert out is not None
        st = self.attempts
        self.metrics.stream_breaks.inc()
        if st.first_instance is not None:
            self.ledger.failed(st.first_instance)
            self.inbound.trace.migration_failed()
        self.inbound.log.warning("stream failed after %d migrations: %s", st.migrations, message)
        try:
            await out.write(sse_error(message))
            await out.write_eof()
        except ConnectionError:
            pass
        return out
