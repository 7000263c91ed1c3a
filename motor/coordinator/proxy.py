"""Forwarding of one OpenAI-compatible inference request: parse it, choose its relay, run its
attempts, and record it in the metrics.

The attempts (route, retry before the first byte, hold while nothing can serve) are
`motor.coordinator.forwarding`'s, the same for every request. What happens to the answer is the
relay's: a stream that can be continued elsewhere after an engine fault (``migration`` on, the
default, and `motor.coordinator.reinference` says it can) goes through
`motor.coordinator.stream_relay`; anything else through `motor.coordinator.whole_relay` (a
non-streamed request is sent again whole once after an engine fault; a stream is passed through).

Responses carry ``X-Motor-Endpoint: <instance_id>/<rank>`` (the first endpoint of a stream) and
``X-Request-Id``; a body that is not a JSON object, or a non-string model, is 400.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from aiohttp import web

from motor.coordinator.config import MigrationConfig
from motor.coordinator.engine_client import EngineClient
from motor.coordinator.forwarding import AttemptLoop, Attempts, Inbound
from motor.coordinator.metrics import CoordinatorMetrics, RequestTrace
from motor.coordinator.migration_ledger import MigrationLedger
from motor.coordinator.openai_format import (
    ENDPOINT_HEADER,
    REQUEST_ID_HEADER,
    BadRequest,
    openai_error,
    parse_inference_doc,
    request_id_of,
    upstream_headers,
)
from motor.coordinator.reinference import ResumePlan, plan_stream
from motor.coordinator.request_log import RequestLog
from motor.coordinator.routing import RoutingTable
from motor.coordinator.stall_watch import StallWatch
from motor.coordinator.stream_relay import ResumableStreamRelay
from motor.coordinator.whole_relay import WholeRequestRelay

log = logging.getLogger(__name__)


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
        max_answer_bytes: int = 64 * 1024 * 1024,
    ) -> None:
        self.max_answer_bytes = max_answer_bytes
        self.hold_sec = hold_sec
        self.clock = clock
        self.metrics = metrics or CoordinatorMetrics()
        self.migration = migration if migration is not None else MigrationConfig()
        self.ledger = ledger or MigrationLedger()
        self.attempts = AttemptLoop(table, client, max_retries=max_retries, retry_after_sec=retry_after_sec,
                                    hold_poll_sec=hold_poll_sec, clock=clock,
                                    on_oversized=self.metrics.oversized_answers.inc)
        self.stall_watch = StallWatch(self.migration.withdrawn_stall_sec)
        table.add_withdrawal_listener(self.stall_watch.on_withdrawn)

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
        rlog = RequestLog(log, request_id)
        started = self.clock()
        body = await request.read()
        try:
            doc = parse_inference_doc(body)
        except BadRequest as exc:
            rlog.info("%s refused: %s", path, exc)
            return openai_error(400, str(exc), "invalid_request_error", "invalid_request",
                                headers={REQUEST_ID_HEADER: request_id})
        model, stream = (doc.get("model") or None), doc.get("stream") is True
        inbound = Inbound(request, path, rlog, trace, started, upstream_headers(request, request_id),
                          self.max_answer_bytes)
        attempts = Attempts(model, started + self.hold_sec, self.hold_sec)
        migrate = self.migration.enabled
        if stream and migrate:
            plan = plan_stream(path, doc, max_carried_length=self.migration.max_carried_length,
                               carry_token_ids=self.migration.carry_token_ids)
            if isinstance(plan, ResumePlan):
                return await self.attempts.run(inbound, ResumableStreamRelay(
                    inbound, plan, body, attempts, migration=self.migration, stall_watch=self.stall_watch,
                    ledger=self.ledger, metrics=self.metrics, clock=self.clock))
            rlog.info("%s: this stream cannot be continued elsewhere after a fault: %s", path, plan)
            migrate = False
        return await self.attempts.run(inbound, WholeRequestRelay(
            inbound, body, attempts, stream=stream, migrate=migrate, ledger=self.ledger, metrics=self.metrics,
            clock=self.clock))
