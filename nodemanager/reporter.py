"""FaultReporter: delivers fault evidence to the Controller without ever blocking the pollers.

A report counts as delivered only when the Controller acknowledged it (the RPC returned OK); until
then it is owed. Reports go into a bounded queue (``fault_report_queue_size``; when full, the oldest
waiting report is dropped, logged, and ``on_dropped`` lets its poller report that rank again) and one
worker sends them in order: the reports waiting together go in one ReportSoftwareFaults call (one
pod's ranks failing at once cost one call, not one each), a lone report in a ReportSoftwareFault call.
A Controller that predates ReportSoftwareFaults (UNIMPLEMENTED) gets one call per report from then
on. A newer report of a rank supersedes the older one still owed (queued, or being retried): the
Controller orders evidence by observation, only the newest of a rank matters.

Each call gets ``fault_report_attempts`` quick attempts (transient failures only: a refusal such
as INVALID_ARGUMENT is the Controller's final word and drops what the call carried, and a report the
Controller refuses alone among others is dropped alone); after those its reports stay owed and are
tried again with capped exponential backoff (``retry_max_sec``) until the Controller answers, the
rank is retired, or a newer report supersedes it (it then leaves the call). A report made before the
Controller knows the instance is held too: nothing is sent before the first registration succeeded,
and NOT_FOUND (the instance is not assembled yet) or no leading replica (a leader switch:
``LeaderUnavailable``) is tried every ``hold_retry_sec`` for up to ``fault_report_hold_sec`` without
spending an attempt.
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
# The most reports one ReportSoftwareFaults call carries (the Controller's bound on `reports`).
MAX_REPORTS_PER_CALL = 64
# Only these may succeed on another attempt; any other status is the Controller's final word.
_TRANSIENT = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.RESOURCE_EXHAUSTED,
              grpc.StatusCode.ABORTED, grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL}


class _Undelivered(Exception):
    """One attempt the Controller did not acknowledge (transient: the report stays owed)."""


class _Refused(Exception):
    """The Controller's final word on a call (not transient): what it carried is dropped."""


class _Unbatched(Exception):
    """The Controller has no ReportSoftwareFaults (UNIMPLEMENTED): it predates it."""


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
        # The reports being delivered, by rank, and those of them a newer report superseded.
        self._current: dict[int, FaultReport] = {}
        self._superseded: set[int] = set()
        # False once the Controller answered ReportSoftwareFaults UNIMPLEMENTED.
        self._batching = True
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
        if report.endpoint_id in self._current:
            older.append(self._current[report.endpoint_id])
            self._superseded.add(report.endpoint_id)
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
        return len(self._queue) + len(self._current)

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
            batch: list[FaultReport] = []
            while self._queue and len(batch) < (MAX_REPORTS_PER_CALL if self._batching else 1):
                report = self._queue.popleft()
                if not self._is_retired(report.endpoint_id):
                    batch.append(report)
            if not batch:
                continue
            # The queue holds one report per rank (`submit`), so the ranks of a batch are distinct.
            self._current, self._superseded = {r.endpoint_id: r for r in batch}, set()
            self._hurry.clear()
            try:
                for report in await self._deliver(batch):  # the Controller predates ReportSoftwareFaults
                    await self._deliver([report])
                    del self._current[report.endpoint_id]
            finally:
                self._current = {}

    def _still_owed(self, report: FaultReport) -> bool:
        if report.endpoint_id in self._superseded:
            self._metrics.reports_dropped.labels("superseded").inc()
            return False
        if self._is_retired(report.endpoint_id):
            log.info("instance=%d rank=%d fault report %s not retried: endpoint is retired", self._instance,
                     report.endpoint_id, kind_name(report.kind))
            self._metrics.reports_dropped.labels("retired").inc()
            return False
        return True

    def _keep_owed(self, owed: list[FaultReport]) -> None:
        owed[:] = [r for r in owed if self._still_owed(r)]

    async def _nap(self, seconds: float) -> None:
        """A backoff that a newer report of the rank, or `retry_now`, ends early."""
        await wait_set(self._hurry, seconds)
        self._hurry.clear()

    async def _deliver(self, batch: list[FaultReport]) -> list[FaultReport]:
        """Delivers `batch` in one call, retried while owed; returns the reports still owed when the
        Controller turned out to have no ReportSoftwareFaults (to be sent one per call)."""
        owed = list(batch)
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
                log.error("instance=%d %s not delivered after %d attempts (%s): kept, tried again every %gs at "
                          "most until the Controller answers", self._instance, _about(owed), state.attempt_number,
                          exc, self._retry_max_sec)
            else:
                log.log(logging.WARNING if state.attempt_number < self._attempts else logging.DEBUG,
                        "instance=%d %s attempt %d failed: %s", self._instance, _about(owed), state.attempt_number, exc)

        retrying = AsyncRetrying(retry=retry_if_exception_type(_Undelivered), wait=wait, sleep=self._nap,
                                 before_sleep=before_sleep, reraise=True)
        results: list[controller_pb2.ReportSoftwareFaultResult] = []
        try:
            async for attempt in retrying:
                with attempt:
                    self._keep_owed(owed)
                    if not owed:
                        return []
                    results = await self._attempt(owed, hold_until)
                    if results is None:
                        return []
        except _Unbatched:
            return owed
        except _Refused as exc:
            for report in owed:
                self._dropped_as_refused(report, str(exc))
            return []
        for report, result in zip(owed, results):
            if result.refused:
                self._dropped_as_refused(report, result.message)
                continue
            self.sent += 1
            self._metrics.reports_sent.labels(kind_name(report.kind)).inc()
            if result.accepted:
                log.info("instance=%d rank=%d fault report %s delivered", self._instance, report.endpoint_id,
                         kind_name(report.kind))
            else:
                log.warning("instance=%d rank=%d fault report %s not recorded by the controller: %s",
                            self._instance, report.endpoint_id, kind_name(report.kind), result.message)
        return []

    def _dropped_as_refused(self, report: FaultReport, why: str) -> None:
        self.lost += 1
        self._metrics.reports_dropped.labels("refused").inc()
        log.error("instance=%d rank=%d fault report %s refused by the controller: %s", self._instance,
                  report.endpoint_id, kind_name(report.kind), why)

    async def _send(self, owed: list[FaultReport]) -> list[controller_pb2.ReportSoftwareFaultResult]:
        """One call carrying `owed`: what became of each report."""
        if len(owed) == 1:
            resp = await self._client.report_software_fault(self._request(owed[0]))
            return [controller_pb2.ReportSoftwareFaultResult(accepted=resp.accepted, message=resp.message)]
        try:
            answer = await self._client.report_software_faults(
                controller_pb2.ReportSoftwareFaultsRequest(reports=[self._request(r) for r in owed]))
        except grpc.aio.AioRpcError as exc:
            if exc.code() != grpc.StatusCode.UNIMPLEMENTED:
                raise
            self._batching = False
            log.info("instance=%d the Controller at %s has no ReportSoftwareFaults (%s): one report per call from "
                     "now on", self._instance, self._client.address, rpc_error_text(exc))
            raise _Unbatched() from None
        if len(answer.results) != len(owed):
            raise _Undelivered(f"the Controller answered {len(answer.results)} results for {len(owed)} reports")
        return list(answer.results)

    async def _attempt(self, owed: list[FaultReport], hold_until: float
                       ) -> list[controller_pb2.ReportSoftwareFaultResult] | None:
        """One attempt: what became of each report of `owed`; None when none stayed owed while held.
        Holds (the instance not assembled yet, no leader) are tried again here, within the hold
        time, and spend no attempt."""
        while True:
            try:
                return await self._send(owed)
            except (asyncio.CancelledError, _Unbatched, _Undelivered):
                raise
            except Exception as exc:  # noqa: BLE001 - transport or server error: retried unless final
                code = exc.code() if isinstance(exc, grpc.aio.AioRpcError) else None
                why = rpc_error_text(exc)
                held = isinstance(exc, LeaderUnavailable) or code == grpc.StatusCode.NOT_FOUND
                if held and self._clock() < hold_until:
                    log.info("instance=%d %s held: %s", self._instance, _about(owed), why)
                    await self._nap(self._hold_retry_sec)
                    self._keep_owed(owed)
                    if not owed:
                        return None
                    continue
                if not held and code is not None and code not in _TRANSIENT:
                    raise _Refused(why) from exc
                raise _Undelivered(why) from exc


def _about(reports: list[FaultReport]) -> str:
    """The reports of a call, for a log line: `rank=3 fault report DEAD`, or
    `ranks=1,2 fault reports DEAD,UNHEALTHY`."""
    if len(reports) == 1:
        return f"rank={reports[0].endpoint_id} fault report {kind_name(reports[0].kind)}"
    return (f"ranks={','.join(str(r.endpoint_id) for r in reports)} fault reports "
            f"{','.join(kind_name(r.kind) for r in reports)}")
