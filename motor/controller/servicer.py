"""gRPC motor.v1.Controller: adapts requests to the controller's plain functions and maps errors to
status codes with messages that name the offending value. Every request's field bounds are checked
first (`motor.common.validation`); roles are checked before that by the server's interceptor."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

import grpc

from gen.motor.v1 import controller_pb2, controller_pb2_grpc
from motor.common.validation import check_request
from motor.controller.core import ControllerCore
from motor.controller.fault_tolerance.evidence import EvidenceKind, NormalizationError
from motor.controller.fault_tolerance.runtime import UnknownInstanceError
from motor.controller.hardware.model import HardwareFaultError
from motor.controller.hardware.monitor import SourceNotStarted
from motor.controller.instances import RegistrationError
from motor.controller.status import runtime_proto

log = logging.getLogger(__name__)

_KINDS = {
    controller_pb2.SOFTWARE_FAULT_KIND_UNHEALTHY: EvidenceKind.UNHEALTHY,
    controller_pb2.SOFTWARE_FAULT_KIND_DEAD: EvidenceKind.DEAD,
    controller_pb2.SOFTWARE_FAULT_KIND_ENGINE_DEAD: EvidenceKind.ENGINE_DEAD,
    controller_pb2.SOFTWARE_FAULT_KIND_PROTOCOL_ERROR: EvidenceKind.PROTOCOL_ERROR,
    controller_pb2.SOFTWARE_FAULT_KIND_RECOVERED: EvidenceKind.RECOVERED,
}


class ControllerServicer(controller_pb2_grpc.ControllerServicer):
    def __init__(self, core: ControllerCore) -> None:
        self.core = core

    async def Register(self, request, context):
        await check_request(request, context)
        try:
            return await self.core.register(request)
        except RegistrationError as exc:
            code = grpc.StatusCode.FAILED_PRECONDITION if exc.precondition else grpc.StatusCode.INVALID_ARGUMENT
            await context.abort(code, str(exc))

    async def Heartbeat(self, request, context):
        await check_request(request, context)
        return self.core.heartbeat(request)

    async def ReportSoftwareFault(self, request, context):
        await check_request(request, context)
        kind = _KINDS.get(request.kind)
        if kind is None:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"kind {request.kind} is not a software fault kind")
        try:
            message = self.core.report_software_fault(request, kind)
        except UnknownInstanceError:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"unknown instance_id {request.instance_id}")
        except NormalizationError as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"instance {request.instance_id}: {exc}")
        return controller_pb2.ReportSoftwareFaultResponse(accepted=not message.endswith("ignored"), message=message)

    async def ReportHardwareFault(self, request, context):
        await check_request(request, context)
        try:
            fault = await self.core.monitor.rpc.report(request)
        except HardwareFaultError as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        except SourceNotStarted as exc:
            await context.abort(grpc.StatusCode.UNAVAILABLE, str(exc))
        return controller_pb2.ReportHardwareFaultResponse(
            accepted=True, message=self.core.faults.last_hardware_note(fault.key))

    async def GetFaultToleranceStatus(self, request, context):
        await check_request(request, context)
        runtimes = self.core.runtimes.all()
        if request.instance_ids:
            known = {r.instance_id for r in runtimes}
            unknown = sorted(set(request.instance_ids) - known)
            if unknown:
                await context.abort(grpc.StatusCode.NOT_FOUND, f"unknown instance_ids {unknown}")
            runtimes = [r for r in runtimes if r.instance_id in set(request.instance_ids)]
        return controller_pb2.GetFaultToleranceStatusResponse(instances=[runtime_proto(r) for r in runtimes])

    async def WatchFaultToleranceStatus(self, request, context) -> AsyncIterator[controller_pb2.WatchFaultToleranceStatusResponse]:
        await check_request(request, context)
        wanted = set(request.instance_ids)
        queue = self.core.broadcaster.subscribe()
        try:
            for runtime in self.core.runtimes.all():
                if not wanted or runtime.instance_id in wanted:
                    yield controller_pb2.WatchFaultToleranceStatusResponse(
                        runtime=runtime_proto(runtime), changed_at_unix_sec=self.core.clock.wall()
                    )
            while True:
                instance_id = await queue.get()
                if wanted and instance_id not in wanted:
                    continue
                runtime = self.core.runtimes.find(instance_id)
                if runtime is not None:
                    yield controller_pb2.WatchFaultToleranceStatusResponse(
                        runtime=runtime_proto(runtime), changed_at_unix_sec=self.core.clock.wall()
                    )
        finally:
            self.core.broadcaster.unsubscribe(queue)

    async def GetTimeline(self, request, context):
        await check_request(request, context)
        if self.core.runtimes.find(request.instance_id) is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"unknown instance_id {request.instance_id}")
        if request.limit < 0:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"limit {request.limit} is negative")
        txns = self.core.timelines.transactions(request.instance_id, request.limit)
        return controller_pb2.GetTimelineResponse(transactions=[t.proto for t in txns])
