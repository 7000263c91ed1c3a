"""FaultReporter: delivers fault evidence to the Controller without ever blocking the pollers.

A report counts as delivered only when the Controller acknowledged it (the RPC returned OK); until
then it is owed. Reports go into a bounded queue (``fault_report_queue_size``; when full, the oldest
waiting report is dropped, logged, and ``on_dropped`` lets its poller report that rank again) and one
worker sends them in order. A newer report of a rank supersedes the older one still owed (queued, or
being retried): the Controller orders evidence by observation, only the newest of a rank matters.

Each report gets ``fault_report_attempts`` quick attempts (transient failures only: a refusal such
as INVALID_ARGUMENT is the Controller's final word and drops it); after those it stays owed and is
tried again with capped exponential backoff (``retry_max_sec``) until the Controller answers, the
rank is retired, or a newer report supersedes it. A report made before the Controller knows the
instance is held too: nothing is sent before the first registration succeeded, and NOT_FOUND (the
instance is not assembled yet) or no leading replica (a leader switch: ``LeaderUnavailable``) is
tried every ``hold_retry_sec`` for up to ``fault_report_hold_sec`` without spending an attempt.
`retry_now` ends the wait of an owed report (the Controller is back, or another one leads). Reports
about retired endpoints are dropped, both when submitted and when sent (a commit may land in between).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import random
import time
from collections.abc import Callable

import grpc
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception_type, wait_exponential

from gen.motor.v1 import controller_pb2
from motor.common.waiting import wait_set
from nodemanager.controller_client import ControllerClient, LeaderUnavailable, rpc_error_text
from nodemanager.ft_poller import FaultReport, kind_name
from nodemanager.metrics import NodeManagerMetrics

log = logging.getLogger("nodemanager.reporter")

_BACKOFF_SEC = (0.2, 0.5, 1.0, 2.0)
# Only these may succeed on another attempt; any other status is the Controller's final word.
_TRANSIENT = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.RESOURCE_EXHAUSTED,
              grpc.StatusCode.ABORTED, grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL}


class _Undelivered(Exception):
    """One attempt the Controller did not acknowledge (transient: the report stays owed)."""


class _Refused(Exception):
    """The Controller's final word on a report (not transient): it is dropped."""


class FaultReporter:
    def __init__(
        self,
        client: ControllerClient,
        *,
        pod_ip: str,
        instance_id: int,
        queue_size: int,
        attempts: int,
        is_retired: Callable[[int], bool],
        metrics: NodeManagerMetrics | None = None,
        registered: asyncio.Event | None = None,
        hold_sec: float = 60.0,
        hold_retry_sec: float = 1.0,
        retry_max_sec: float = 5.0,
        on_dropped: Callable[[int], None] = lambda endpoint_id: None,
        clock: Callable[[], float] = time.monotonic,
        jitter: Callable[[], float] = random.random,
    ) -> None:
        """`jitter`: a uniform draw in [0, 1) that spreads the retries of an owed report."""
        self.registered = registered or asyncio.Event()
        self._jitter = jitter
        self._hold_sec = hold_sec
        self._hold_retry_sec = hold_retry_sec
        self._retry_max_sec = retry_max_sec
        self._on_dropped = on_dropped
        self._clock = clock
        self._client = client
        self._pod_ip = pod_ip
        self._instance = instance_id
        self._attempts = attempts
        self._is_retired = is_retired
        self._queue: collections.deque[FaultReport] = collections.deque(maxlen=queue_size)
        self._wakeup = asyncio.Event()
        # Ends the backoff of the report being retried (superseded, or the Controller is back).
        self._hurry = asyncio.Event()
        self._current: FaultReport | None = None
        self._superseded = False
        self._task: asyncio.Task[None] | None = None
        self.sent = 0
        self.lost = 0
        self._metrics = metrics or NodeManagerMetrics()

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="fault-reporter")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    def submit(self, report: FaultReport) -> None:
        if self._is_retired(report.endpoint_id):
            log.info("instance=%d rank=%d %s not reported: endpoint is retired", self._instance,
                     report.endpoint_id, kind_name(report.kind))
            self._metrics.reports_dropped.labels("retired").inc()
            return
        older = [r for r in self._queue if r.endpoint_id == report.endpoint_id]
        for r in older:
            self._queue.remove(r)
            self._metrics.reports_dropped.labels("superseded").inc()
        if self._current is not None and self._current.endpoint_id == report.endpoint_id:
            older.append(self._current)
            self._superseded = True
            self._hurry.set()
        if older:
            log.info("instance=%d rank=%d owed %s superseded by %s", self._instance, report.endpoint_id,
                     ",".join(kind_name(r.kind) for r in older), kind_name(report.kind))
        if len(self._queue) == self._queue.maxlen:
            dropped = self._queue[0]
            self.lost += 1
            self._metrics.reports_dropped.labels("queue_full").inc()
            log.error("instance=%d rank=%d fault report %s dropped: queue full (%d waiting)", self._instance,
                      dropped.endpoint_id, kind_name(dropped.kind), len(self._queue))
            self._on_dropped(dropped.endpoint_id)
        self._queue.append(report)
        self._wakeup.set()

    def retry_now(self) -> None:
        """The Controller may have lost what it was told, or is reachable again: an owed report is
        tried at once, with its backoff started afresh."""
        self._hurry.set()

    @property
    def pending(self) -> int:
        """Reports owed: waiting in the queue or being retried."""
        return len(self._queue) + (self._current is not None)

    def _request(self, report: FaultReport) -> controller_pb2.ReportSoftwareFaultRequest:
        req = controller_pb2.ReportSoftwareFaultRequest(
            pod_ip=self._pod_ip,
            instance_id=self._instance,
            endpoint_id=report.endpoint_id,
            kind=report.kind,  # type: ignore[arg-type]
            evidence=report.evidence,
            observed_at_unix_sec=report.observed_at_unix_sec,
            diagnosing_observed_at_unix_sec=report.diagnosing_observed_at_unix_sec,
        )
        if report.status is not None:
            req.status.CopyFrom(report.status.to_pb())
        return req

    async def _run(self) -> None:
        while True:
            while not self._queue:
                self._wakeup.clear()
                await self._wakeup.wait()
            # Held until the first registration: the Controller would not know the instance.
            await wait_set(self.registered, self._hold_sec)
            report = self._queue.popleft()
            if self._is_retired(report.endpoint_id):
                continue
            self._current, self._superseded = report, False
            self._hurry.clear()
            try:
                await self._deliver(report)
            finally:
                self._current = None

    def _still_owed(self, report: FaultReport) -> bool:
        if self._superseded:
            self._metrics.reports_dropped.labels("superseded").inc()
            return False
        if self._is_retired(report.endpoint_id):
            log.info("instance=%d rank=%d fault report %s not retried: endpoint is retired", self._instance,
                     report.endpoint_id, kind_name(report.kind))
            self._metrics.reports_dropped.labels("retired").inc()
            return False
        return True

    async def _nap(self, seconds: float) -> None:
        """A backoff that a newer report of the rank, or `retry_now`, ends early."""
        await wait_set(self._hurry, seconds)
        self._hurry.clear()

    async def _deliver(self, report: FaultReport) -> None:
        req = self._request(report)
        hold_until = self._clock() + self._hold_sec
        quick = [_BACKOFF_SEC[min(i, len(_BACKOFF_SEC) - 1)] for i in range(self._attempts - 1)]
        owed_wait = wait_exponential(multiplier=_BACKOFF_SEC[0], max=self._retry_max_sec) + \
            (lambda state: 0.1 * self._jitter())

        def wait(state: RetryCallState) -> float:
            if state.attempt_number < self._attempts:
                return quick[state.attempt_number - 1]
            return owed_wait(state)

        def before_sleep(state: RetryCallState) -> None:
            exc = state.outcome.exception() if state.outcome is not None else None
            self._metrics.report_retries.inc()
            if state.attempt_number == self._attempts:
                log.error("instance=%d rank=%d fault report %s not delivered after %d attempts (%s): kept, tried "
                          "again every %gs at most until the Controller answers", self._instance, report.endpoint_id,
                          kind_name(report.kind), state.attempt_number, exc, self._retry_max_sec)
            else:
                log.log(logging.WARNING if state.attempt_number < self._attempts else logging.DEBUG,
                        "instance=%d rank=%d fault report %s attempt %d failed: %s", self._instance,
                        report.endpoint_id, kind_name(report.kind), state.attempt_number, exc)

        retrying = AsyncRetrying(retry=retry_if_exception_type(_Undelivered), wait=wait, sleep=self._nap,
                                 before_sleep=before_sleep, reraise=True)
        try:
            async for attempt in retrying:
                with attempt:
                    if not self._still_owed(report):
                        return
                    resp = await self._attempt(report, req, hold_until)
                    if resp is None:
                        return
        except _Refused as exc:
            self.lost += 1
            self._metrics.reports_dropped.labels("refused").inc()
            log.error("instance=%d rank=%d fault report %s refused by the controller: %s", self._instance,
                      report.endpoint_id, kind_name(report.kind), exc)
            return
        self.sent += 1
        self._metrics.reports_sent.labels(kind_name(report.kind)).inc()
        if resp.accepted:
            log.info("instance=%d rank=%d fault report %s delivered", self._instance, report.endpoint_id,
                     kind_name(report.kind))
        else:
            log.warning("instance=%d rank=%d fault report %s not recorded by the controller: %s",
                        self._instance, report.endpoint_id, kind_name(report.kind), resp.message)

    async def _attempt(self, report: FaultReport, req: controller_pb2.ReportSoftwareFaultRequest,
                       hold_until: float) -> controller_pb2.ReportSoftwareFaultResponse | None:
        """One attempt: the answer; None when the report stopped being owed while held. Holds (the
        instance not assembled yet, no leader) are tried again here, within the hold time, and
        spend no attempt."""
        while True:
            try:
                return await self._client.report_software_fault(req)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - transport or server error: retried unless final
                code = exc.code() if isinstance(exc, grpc.aio.AioRpcError) else None
                why = rpc_error_text(exc)
                held = isinstance(exc, LeaderUnavailable) or code == grpc.StatusCode.NOT_FOUND
                if held and self._clock() < hold_until:
                    log.info("instance=%d rank=%d fault report %s held: %s", self._instance, report.endpoint_id,
                             kind_name(report.kind), why)
                    await self._nap(self._hold_retry_sec)
                    if not self._still_owed(report):
                        return None
                    continue
                if not held and code is not None and code not in _TRANSIENT:
                    raise _Refused(why) from exc
                raise _Undelivered(why) from exc
