"""The relay of a request whose answer is not continued elsewhere mid-way: the engine's answer goes to
the client as it is (a stream byte for byte). A non-streamed body that cannot be read, or a stream
that breaks or ends before its first byte, fails the attempt (tried elsewhere).

Re-inference of a non-streamed request (``migration`` on): when its engine faulted after it was sent
(any failure but a failure to connect), it is sent again whole, once, held anew from the fault; its
response carries ``X-Motor-Migrated: 1`` and ``X-Motor-Migrated-From``. A stream that fails after
its first byte is reported in the stream (one ``data: {"error": ...}`` event) and never retried.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import aiohttp
from aiohttp import web

from motor.coordinator.engine_client import describe_client_error
from motor.coordinator.forwarding import AttemptFailure, Attempts, Inbound, read_answer
from motor.coordinator.metrics import CoordinatorMetrics
from motor.coordinator.migration_ledger import MigrationLedger
from motor.coordinator.openai_format import MIGRATED_FROM_HEADER, MIGRATED_HEADER, response_headers, sse_error
from motor.coordinator.request_log import RequestLog
from motor.coordinator.routing import Route


class WholeRequestRelay:
    def __init__(
        self, inbound: Inbound, body: bytes, attempts: Attempts, *, stream: bool, migrate: bool,
        ledger: MigrationLedger, metrics: CoordinatorMetrics, clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.inbound = inbound
        self.attempts = attempts
        self.stream = stream
        # Whether a non-streamed request is sent again after its engine faulted.
        self.migrate = migrate and not stream
        self.ledger = ledger
        self.metrics = metrics
        self.clock = clock
        self._body = body

    def body(self) -> bytes:
        return self._body

    async def give_up(self, answer: web.Response) -> web.StreamResponse:
        st = self.attempts
        if st.first_instance is not None:
            self.ledger.failed(st.first_instance)
            self.inbound.trace.migration_failed()
        return answer

    async def relay(self, route: Route, resp: aiohttp.ClientResponse,
                    rlog: RequestLog) -> web.StreamResponse | AttemptFailure:
        """The client's response, or (nothing sent yet) why this endpoint failed."""
        if resp.status == 200 and resp.content_type == "text/event-stream":
            answer: web.StreamResponse | AttemptFailure = await self._pass_stream(route, resp, rlog)
        else:
            payload = await read_answer(resp, self.inbound.max_answer_bytes)
            answer = payload if isinstance(payload, AttemptFailure) else web.Response(
                status=resp.status, body=payload, headers=response_headers(resp, route, self.inbound.request_id))
        if isinstance(answer, AttemptFailure):
            return answer
        st = self.attempts
        rlog.info("%s model=%s stream=%s status=%d attempts=%d %.3fs", self.inbound.path, st.model, self.stream,
                  answer.status, st.attempt, self.clock() - self.inbound.started_sec)
        if st.migrated_from:
            answer.headers[MIGRATED_HEADER] = str(st.migrations)
            answer.headers[MIGRATED_FROM_HEADER] = ",".join(st.migrated_from)
        return answer

    async def after_failure(self, route: Route, failure: AttemptFailure, now: float,
                            rlog: RequestLog) -> web.StreamResponse | None:
        st = self.attempts
        if self.migrate and failure.reached and not st.migrations:
            # The engine had the request and faulted: send it again whole, held anew from now.
            st.migrate(route, now)
            self.ledger.migrated(route.instance_id)
            self.inbound.trace.migrated(route, failure.kind)
            rlog.warning("%s: engine faulted under the request; re-sending it to another endpoint (migration 1)",
                         self.inbound.path)
        return None

    async def _pass_stream(self, route: Route, resp: aiohttp.ClientResponse,
                           rlog: RequestLog) -> web.StreamResponse | AttemptFailure:
        """Byte-for-byte pass-through of a stream that is not continued elsewhere after a fault."""
        try:
            first = await resp.content.readany()
        except (aiohttp.ClientError, TimeoutError) as exc:
            return AttemptFailure(f"stream broke before its first byte: {describe_client_error(exc)}",
                                  kind="connection")
        if not first:
            return AttemptFailure("engine ended the stream before its first byte", kind="connection")
        out = web.StreamResponse(status=200, headers=response_headers(resp, route, self.inbound.request_id))
        await out.prepare(self.inbound.request)
        chunks = 1
        try:
            await out.write(first)
            while True:
                try:
                    chunk = await resp.content.readany()
                except (aiohttp.ClientError, TimeoutError) as exc:
                    reason = describe_client_error(exc)
                    self.metrics.stream_breaks.inc()
                    rlog.warning("stream broke after %d chunks: %s (not retried)", chunks, reason)
                    await out.write(sse_error(f"endpoint {route.label} failed mid-stream: {reason}"))
                    break
                if not chunk:
                    break
                chunks += 1
                await out.write(chunk)
            await out.write_eof()
        except ConnectionError as exc:
            # The client went away: leaving here closes the engine connection, aborting its request.
            rlog.info("client went away after %d chunks (%s); upstream aborted", chunks, type(exc).__name__)
        return out
