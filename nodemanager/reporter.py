"""FaultReporter: delivers fault evidence to the Controller without ever blocking the pollers.

Reports go into a bounded queue (``fault_report_queue_size``; when full, the oldest waiting report
is dropped and logged) and one worker sends them in order, each with the controller deadline and at
most ``fault_report_attempts`` attempts (transient failures only: a refusal such as
INVALID_ARGUMENT is final). A report made before the Controller knows the instance is held, not lost:
nothing is sent before the first registration succeeded, and NOT_FOUND (the instance is not
assembled yet) is tried again every second for up to ``fault_report_hold_sec``, and so is a report
made while no Controller replica leads (a leader switch: ``LeaderUnavailable``), so it reaches the
new leader instead of being counted lost. Reports about
retired endpoints are dropped, both when submitted and when sent (a commit may land in between).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import Callable

import grpc

from gen.motor.v1 import controller_pb2
from nodemanager.controller_client import ControllerClient, LeaderUnavailable, rpc_error_text
from nodemanager.ft_poller import FaultReport, kind_name
from nodemanager.metrics import NodeManagerMetrics

log = logging.getLogger("nodemanager.reporter")

_BACKOFF_SEC = (0.2, 0.5, 1.0, 2.0)
# Only these may succeed on another attempt; any other status is the Controller's final word.
_TRANSIENT = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.RESOURCE_EXHAUSTED,
              grpc.StatusCode.ABORTED, grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL}


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
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.registered = registered or asyncio.Event()
        self._hold_sec = hold_sec
        self._hold_retry_sec = hold_retry_sec
        self._clock = clock
        self._client = client
        self._pod_ip = pod_ip
        self._instance = instance_id
        self._attempts = attempts
        self._is_retired = is_retired
        self._queue: collections.deque[FaultReport] = collections.deque(maxlen=queue_size)
        self._wakeup = asyncio.Event()
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
        if len(self._queue) == self._queue.maxlen:
            dropped = self._queue[0]
            self.lost += 1
            self._metrics.reports_dropped.labels("queue_full").inc()
            log.error("instance=%d rank=%d fault report %s dropped: queue full (%d waiting)", self._instance,
                      dropped.endpoint_id, kind_name(dropped.kind), len(self._queue))
        self._queue.append(report)
        self._wakeup.set()

    @property
    def pending(self) -> int:
        return len(self._queue)

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
            try:
                # Held until the first registration: the Controller would not know the instance.
                await asyncio.wait_for(self.registered.wait(), self._hold_sec)
            except TimeoutError:
                pass
            report = self._queue.popleft()
            if self._is_retired(report.endpoint_id):
                continue
            await self._deliver(report)

    async def _deliver(self, report: FaultReport) -> None:
        req = self._request(report)
        hold_until = self._clock() + self._hold_sec
        attempt = 0
        while attempt < self._attempts:
            attempt += 1
            try:
                resp = await self._client.report_software_fault(req)
            except asyncio.CancelledError:
                raise
            except LeaderUnavailable as exc:
                if self._clock() < hold_until:
                    # A leader switch: the report waits for the new leader, it is not an attempt.
                    log.info("instance=%d rank=%d fault report %s held: %s", self._instance, report.endpoint_id,
                             kind_name(report.kind), exc)
                    attempt -= 1
                    await asyncio.sleep(self._hold_retry_sec)
                    continue
                if attempt == self._attempts:
                    self.lost += 1
                    self._metrics.reports_dropped.labels("attempts_exhausted").inc()
                    log.error("instance=%d rank=%d fault report %s lost: no Controller leader within %gs: %s",
                              self._instance, report.endpoint_id, kind_name(report.kind), self._hold_sec, exc)
                    return
                self._metrics.report_retries.inc()
                await asyncio.sleep(_BACKOFF_SEC[min(attempt - 1, len(_BACKOFF_SEC) - 1)])
                continue
            except Exception as exc:  # noqa: BLE001 - transport or server error: bounded retry
                code = exc.code() if isinstance(exc, grpc.aio.AioRpcError) else None
                if code == grpc.StatusCode.NOT_FOUND and self._clock() < hold_until:
                    # The instance is not assembled yet (its other pods are still registering).
                    log.info("instance=%d rank=%d fault report %s held: %s", self._instance, report.endpoint_id,
                             kind_name(report.kind), rpc_error_text(exc))
                    attempt -= 1
                    await asyncio.sleep(self._hold_retry_sec)
                    continue
                final = code is not None and code not in _TRANSIENT
                if final:
                    self.lost += 1
                    self._metrics.reports_dropped.labels("refused").inc()
                    log.error("instance=%d rank=%d fault report %s refused by the controller: %s", self._instance,
                              report.endpoint_id, kind_name(report.kind), rpc_error_text(exc))
                    return
                if attempt == self._attempts:
                    self.lost += 1
                    self._metrics.reports_dropped.labels("attempts_exhausted").inc()
                    log.error("instance=%d rank=%d fault report %s lost after %d attempts: %s", self._instance,
                              report.endpoint_id, kind_name(report.kind), attempt, rpc_error_text(exc))
                    return
                log.warning("instance=%d rank=%d fault report %s attempt %d failed: %s", self._instance,
                            report.endpoint_id, kind_name(report.kind), attempt, rpc_error_text(exc))
                self._metrics.report_retries.inc()
                await asyncio.sleep(_BACKOFF_SEC[min(attempt - 1, len(_BACKOFF_SEC) - 1)])
                continue
            self.sent += 1
            self._metrics.reports_sent.labels(kind_name(report.kind)).inc()
            if resp.accepted:
                log.info("instance=%d rank=%d fault report %s delivered", self._instance, report.endpoint_id,
                         kind_name(report.kind))
            else:
                log.warning("instance=%d rank=%d fault report %s not recorded by the controller: %s",
                            self._instance, report.endpoint_id, kind_name(report.kind), resp.message)
            return
