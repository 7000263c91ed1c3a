"""gRPC motor.v1.Controller: adapts requests to the controller's plain functions and maps errors to
status codes with messages that name the offending value. Every request's field bounds are checked
first (`motor.common.validation`); roles are checked before that by the server's interceptor.

Replicas: only the acting leader takes writes (Register, Heartbeat, the fault reports,
RequestPublication). A standby, or a leader still taking over, answers them UNAVAILABLE naming
the leader, with its address in trailing metadata (`LEADER_ADDRESS_METADATA`, empty while none is
known) so callers follow it; the leader's answers carry its term (`LEADER_TERM_METADATA`). The
reads answer on every replica (a standby's runtimes are what the store holds), with `leadership`."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

import grpc

from gen.motor.v1 import controller_pb2, controller_pb2_grpc
from motor.common.metadata import LEADER_ADDRESS_METADATA, LEADER_TERM_METADATA
from motor.common.validation import check_request
from motor.controller import software_reports
from motor.controller.core import ControllerCore
from motor.controller.hardware.model import HardwareFaultError
from motor.controller.hardware.monitor import SourceNotStarted
from motor.controller.heartbeat_streams import HeartbeatStreams
from motor.controller.identity import Caller, IdentityGate, IdentityRefusal, caller_of, require_pod_identity
from motor.controller.instances import InstanceCapError, RegistrationError
from motor.controller.model.runtime import UnknownInstanceError
from motor.controller.restoration.restorer import RestoreRefused
from motor.controller.status import runtime_proto

log = logging.getLogger(__name__)

# The longest deadline a HeartbeatStream may ask for: NodeManagers reopen theirs well before it.
MAX_HEARTBEAT_STREAM_SEC = 3600.0


class ControllerServicer(controller_pb2_grpc.ControllerServicer):
    def __init__(self, core: ControllerCore) -> None:
        self.core = core
        security = core.config.security
        self.identity = IdentityGate(core.registry, core.metrics.registry,
                                     security.trust_domain if security is not None else "motor",
                                     require_pod_identity(core.config))
        # The open HeartbeatStreams, ended when this replica stops (`end_heartbeat_streams`).
        self._heartbeat_streams = HeartbeatStreams()

    async def end_heartbeat_streams(self, why: str) -> int:
        """Ends every open HeartbeatStream UNAVAILABLE: at shutdown, so the server's grace period is
        left to the calls in flight. Returns how many were open."""
        return await self._heartbeat_streams.end_all(why)

    async def _check_identity(self, context, method: str, request, instance_id: int, pod_ip: str) -> str:
        """The caller's pod URI once its claims are covered by its certificate (see
        `motor.controller.identity`); PERMISSION_DENIED otherwise."""
        return await self._check_caller(context, caller_of(context, self.identity.trust_domain), method, request,
                                        instance_id, pod_ip)

    async def _check_caller(self, context, caller: Caller | None, method: str, request, instance_id: int,
                            pod_ip: str) -> str:
        """`_check_identity` for a caller already known (a stream's messages share one)."""
        if caller is None:
            return ""
        check = {"Register": self.identity.check_register, "Heartbeat": self.identity.check_heartbeat,
                 "ReportSoftwareFault": self.identity.check_report}[method]
        try:
            check(caller, request)
        except IdentityRefusal as exc:
            self.identity.refused(method, instance_id, pod_ip, exc)
            await context.abort(grpc.StatusCode.PERMISSION_DENIED, str(exc))
        return caller.pod_uri

    async def _require_leader(self, context, method: str) -> None:
        """UNAVAILABLE naming the leader unless this replica acts; the leader's term otherwise."""
        core = self.core
        leadership = core.leadership
        if core.acting:
            if leadership.term:
                context.set_trailing_metadata(((LEADER_TERM_METADATA, str(leadership.term)),))
            return
        leader = leadership.leader
        core.metrics.not_leader("rpc")
        if leadership.leading:
            why = f"controller {leadership.replica_id} is taking over as leader (term {leadership.term}); retry"
        elif leader.leader_address:
            why = (f"controller {leadership.replica_id} is a standby; the leader is {leader.leader_id} at "
                   f"{leader.leader_address} (term {leader.term})")
        else:
            why = f"controller {leadership.replica_id} is a standby and no leader is known yet (election under way)"
        await context.abort(grpc.StatusCode.UNAVAILABLE, f"{method}: {why}",
                            trailing_metadata=((LEADER_ADDRESS_METADATA, leader.leader_address),))

    def leadership_proto(self) -> controller_pb2.Leadership:
        leadership = self.core.leadership
        leader = leadership.leader
        return controller_pb2.Leadership(
            election_enabled=leadership.election_enabled, is_leader=self.core.acting,
            replica_id=leadership.replica_id, address=leadership.address, leader_id=leader.leader_id,
            leader_address=leader.leader_address, term=leader.term)

    async def RequestPublication(self, request, context):
        await check_request(request, context)
        await self._require_leader(context, "RequestPublication")
        if not self.core.pusher.enabled:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                                "this controller has no coordinator_address: it publishes nothing")
        ids = await self.core.publish_all()
        if ids is None:
            # ABORTED, not UNAVAILABLE: this replica leads; a caller must not look for another one.
            await context.abort(grpc.StatusCode.ABORTED,
                                f"the SET to the Coordinator at {self.core.pusher.target} failed; retry")
        return controller_pb2.RequestPublicationResponse(instance_ids=ids, term=self.core.leadership.term)

    async def Register(self, request, context):
        await check_request(request, context)
        await self._require_leader(context, "Register")
        identity = await self._check_identity(context, "Register", request, request.instance_id, request.pod.pod_ip)
        try:
            return await self.core.register(request, identity)
        except InstanceCapError as exc:
            self.identity.refused("Register", request.instance_id, request.pod.pod_ip,
                                  IdentityRefusal("instance_cap", str(exc)))
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, str(exc))
        except RegistrationError as exc:
            code = grpc.StatusCode.FAILED_PRECONDITION if exc.precondition else grpc.StatusCode.INVALID_ARGUMENT
            await context.abort(code, str(exc))

    async def Heartbeat(self, request, context):
        await check_request(request, context)
        await self._require_leader(context, "Heartbeat")
        await self._check_identity(context, "Heartbeat", request, request.instance_id, request.pod_ip)
        return self.core.heartbeat(request)

    async def HeartbeatStream(self, request_iterator, context):
        """Heartbeat message by message on one call; the call's deadline bounds the loop."""
        remaining = context.time_remaining()
        if remaining is None or remaining > MAX_HEARTBEAT_STREAM_SEC:
            asked = "none" if remaining is None else f"{remaining:.0f} s"
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                f"HeartbeatStream needs a deadline of at most {MAX_HEARTBEAT_STREAM_SEC:.0f} s; "
                                f"it has {asked}")
        caller = caller_of(context, self.identity.trust_domain)
        core = self.core
        streams = self._heartbeat_streams
        await streams.opened(context)
        try:
            async for message in request_iterator:
                if not streams.received(context):
                    return
                await check_request(message, context)
                await self._require_leader(context, "Heartbeat")
                request = message.heartbeat
                await self._check_caller(context, caller, "Heartbeat", request, request.instance_id, request.pod_ip)
                yield controller_pb2.HeartbeatStreamResponse(heartbeat=core.heartbeat(request),
                                                             leader_term=core.leadership.term)
                await streams.answered(context)
        finally:
            streams.closed(context)

    async def ReportSoftwareFault(self, request, context):
        await check_request(request, context)
        await self._require_leader(context, "ReportSoftwareFault")
        await self._check_identity(context, "ReportSoftwareFault", request, request.instance_id, request.pod_ip)
        try:
            return software_reports.take(self.core, request)
        except UnknownInstanceError:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"unknown instance_id {request.instance_id}")
        except software_reports.ReportInvalid as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))

    async def ReportSoftwareFaults(self, request, context):
        await check_request(request, context)
        await self._require_leader(context, "ReportSoftwareFaults")
        try:
            instance_id, pod_ip = software_reports.one_pod(request)
        except software_reports.ReportInvalid as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        # Every report's claims are checked before any is taken: a call is refused whole or not at all.
        caller = caller_of(context, self.identity.trust_domain)
        for report in request.reports:
            await self._check_caller(context, caller, "ReportSoftwareFault", report, instance_id, pod_ip)
        try:
            return software_reports.take_all(self.core, request)
        except UnknownInstanceError:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"unknown instance_id {instance_id}")

    async def ReportHardwareFault(self, request, context):
        await check_request(request, context)
        await self._require_leader(context, "ReportHardwareFault")
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
        runtimes = self.core.status_runtimes()
        if request.instance_ids:
            known = {r.instance_id for r in runtimes}
            unknown = sorted(set(request.instance_ids) - known)
            if unknown:
                await context.abort(grpc.StatusCode.NOT_FOUND, f"unknown instance_ids {unknown}")
            runtimes = [r for r in runtimes if r.instance_id in set(request.instance_ids)]
        return controller_pb2.GetFaultToleranceStatusResponse(instances=[runtime_proto(r) for r in runtimes],
                                                              leadership=self.leadership_proto())

    async def WatchFaultToleranceStatus(self, request, context) -> AsyncIterator[controller_pb2.WatchFaultToleranceStatusResponse]:
        await check_request(request, context)
        wanted = set(request.instance_ids)
        queue = self.core.broadcaster.subscribe()
        try:
            for runtime in self.core.status_runtimes():
                if not wanted or runtime.instance_id in wanted:
                    yield controller_pb2.WatchFaultToleranceStatusResponse(
                        runtime=runtime_proto(runtime),
                        changed_at_unix_sec=self.core.broadcaster.changed_at(runtime.instance_id))
            while True:
                instance_id = await queue.get()
                if wanted and instance_id not in wanted:
                    continue
                runtime = self.core.runtimes.find(instance_id)
                if runtime is not None:
                    yield controller_pb2.WatchFaultToleranceStatusResponse(
                        runtime=runtime_proto(runtime),
                        changed_at_unix_sec=self.core.broadcaster.changed_at(runtime.instance_id))
        finally:
            self.core.broadcaster.unsubscribe(queue)

    async def GetTimeline(self, request, context):
        await check_request(request, context)
        if not any(r.instance_id == request.instance_id for r in self.core.status_runtimes()):
            await context.abort(grpc.StatusCode.NOT_FOUND, f"unknown instance_id {request.instance_id}")
        if request.limit < 0:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"limit {request.limit} is negative")
        txns = self.core.timelines.transactions(request.instance_id, request.limit)
        return controller_pb2.GetTimelineResponse(transactions=[t.proto for t in txns])

    async def RestoreInstance(self, request, context):
        await check_request(request, context)
        await self._require_leader(context, "RestoreInstance")
        if not request.request_id or len(request.request_id) > 128:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                f"request_id {request.request_id!r} must be 1 to 128 characters")
        if not 0 <= request.deadline_sec <= 86400:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                f"deadline_sec {request.deadline_sec:g} must be within [0, 86400]")
        try:
            req = self.core.restorer.request(request.instance_id, request.request_id, request.when_ready,
                                             request.deadline_sec)
        except RestoreRefused as exc:
            await context.abort(getattr(grpc.StatusCode, exc.code), str(exc))
        return controller_pb2.RestoreInstanceResponse(state=req.state, transaction_id=req.transaction_id,
                                                      message=req.message, unplaced_ranks=list(req.unplaced))
