"""A scripted double of the NodeManager's Controller client wrapper (no sockets), and the
FaultReporter and ControllerLink the NodeManager tests build on it."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import grpc

from gen.motor.v1 import controller_pb2
from nodemanager.controller_link import ControllerLink
from nodemanager.reporter import FaultReporter


def unavailable(code: grpc.StatusCode = grpc.StatusCode.UNAVAILABLE) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), "down")


class ScriptedClient:
    """Double of nodemanager.controller_client.ControllerClient: fails the first N calls of a kind."""

    address = "controller.test:1"

    def __init__(self) -> None:
        self.fail = {"register": 0, "heartbeat": 0, "report": 0, "reports": 0}
        self.fail_code = grpc.StatusCode.UNAVAILABLE
        self.refuse_register = 0
        self.known = True
        self.config: controller_pb2.NodeManagerFtConfig | None = None
        self.calls: dict[str, list] = {"register": [], "heartbeat": [], "report": [], "reports": []}
        # Whether it has ReportSoftwareFaults; without it (an older Controller) a call of several
        # reports is answered UNIMPLEMENTED and the reporter sends one per call.
        self.batches = False
        self.refuse_ranks: set[int] = set()  # reports of these ranks are refused alone in a batch

    def _maybe_fail(self, kind: str, req: object) -> None:
        self.calls[kind].append(req)
        if self.fail[kind] > 0:
            self.fail[kind] -= 1
            raise unavailable(self.fail_code)

    async def register(self, req: controller_pb2.RegisterRequest) -> controller_pb2.RegisterResponse:
        self._maybe_fail("register", req)
        if self.refuse_register > 0:
            self.refuse_register -= 1
            return controller_pb2.RegisterResponse(accepted=False, message="instance topology mismatch")
        resp = controller_pb2.RegisterResponse(accepted=True)
        if self.config is not None:
            resp.config.CopyFrom(self.config)
        return resp

    async def heartbeat(self, req: controller_pb2.HeartbeatRequest) -> controller_pb2.HeartbeatResponse:
        self._maybe_fail("heartbeat", req)
        resp = controller_pb2.HeartbeatResponse(known=self.known)
        if self.config is not None:
            resp.config.CopyFrom(self.config)
        return resp

    async def report_software_fault(self, req: controller_pb2.ReportSoftwareFaultRequest
                                    ) -> controller_pb2.ReportSoftwareFaultResponse:
        self._maybe_fail("report", req)
        return controller_pb2.ReportSoftwareFaultResponse(accepted=True)

    async def report_software_faults(self, req: controller_pb2.ReportSoftwareFaultsRequest
                                     ) -> controller_pb2.ReportSoftwareFaultsResponse:
        if not self.batches:
            raise unavailable(grpc.StatusCode.UNIMPLEMENTED)
        self._maybe_fail("reports", req)
        return controller_pb2.ReportSoftwareFaultsResponse(results=[
            controller_pb2.ReportSoftwareFaultResult(refused=True, message=f"rank {r.endpoint_id} refused")
            if r.endpoint_id in self.refuse_ranks else controller_pb2.ReportSoftwareFaultResult(accepted=True)
            for r in req.reports])


def reporter(client: ScriptedClient, retired: set[int] | None = None, size: int = 8, registered: bool = True,
             hold_sec: float = 60.0) -> FaultReporter:
    retired = retired if retired is not None else set()
    event = asyncio.Event()
    if registered:
        event.set()
    return FaultReporter(client, pod_ip="127.0.0.2", instance_id=7, queue_size=size, attempts=3,  # type: ignore[arg-type]
                         is_retired=retired.__contains__, registered=event, hold_sec=hold_sec, hold_retry_sec=0.01,
                         retry_max_sec=0.05)


@contextlib.asynccontextmanager
async def running(r: FaultReporter) -> AsyncIterator[FaultReporter]:
    r.start()
    try:
        yield r
    finally:
        await r.close()


def link(client: ScriptedClient, configs: list, alive: list[int]) -> ControllerLink:
    return ControllerLink(client, instance_id=7, pod_ip="127.0.0.2",  # type: ignore[arg-type]
                          build_register=lambda: controller_pb2.RegisterRequest(instance_id=7),
                          alive_ids=lambda: list(alive), on_config=lambda cfg, src: configs.append((cfg, src)),
                          heartbeat_interval_sec=0.05, max_backoff_sec=0.05)
