"""The `motor.v1.Coordinator` gRPC servicer: adapts Refresh / ListInstances to the routing table, and
SendCanary (the Controller's idle-fault probe) to the canary. ListInstances also reports the
re-inference counts per instance.

When a management key is configured, Refresh requires the gRPC metadata ``x-motor-key`` to equal
it (constant-time comparison), else UNAUTHENTICATED. ListInstances is read-only and stays open. With
TLS off the key is Refresh's only guard; with mTLS the server's interceptor also requires the
controller role (`motor.common.authz`). Field bounds are checked first (`motor.common.validation`).
"""

from __future__ import annotations

import hmac
import logging
import time
import uuid
from collections.abc import Callable

import grpc

from gen.motor.v1 import common_pb2, coordinator_pb2, coordinator_pb2_grpc
from motor.common.metadata import MANAGEMENT_KEY_METADATA
from motor.common.validation import check_request
from motor.coordinator.canary import Canary, CanaryRefused
from motor.coordinator.migration_ledger import MigrationLedger
from motor.coordinator.routing import RoutingTable
from motor.coordinator.serving_view import EndpointSpec, InstanceRoute, InstanceSpec, RefreshError, RefreshErrorCode, RefreshEvent

log = logging.getLogger(__name__)


_EVENTS = {
    coordinator_pb2.REFRESH_EVENT_ADD: RefreshEvent.ADD,
    coordinator_pb2.REFRESH_EVENT_DEL: RefreshEvent.DEL,
    coordinator_pb2.REFRESH_EVENT_SET: RefreshEvent.SET,
    coordinator_pb2.REFRESH_EVENT_PAUSE: RefreshEvent.PAUSE,
    coordinator_pb2.REFRESH_EVENT_RESUME: RefreshEvent.RESUME,
}
_CODES = {
    RefreshErrorCode.INVALID_ARGUMENT: grpc.StatusCode.INVALID_ARGUMENT,
    RefreshErrorCode.FAILED_PRECONDITION: grpc.StatusCode.FAILED_PRECONDITION,
    RefreshErrorCode.NOT_FOUND: grpc.StatusCode.NOT_FOUND,
}


def _event_name(value: int) -> str:
    try:
        return coordinator_pb2.RefreshEvent.Name(value)
    except ValueError:
        return str(value)


def instance_from_proto(msg: common_pb2.Instance) -> InstanceSpec:
    source = common_pb2.Instance()
    source.CopyFrom(msg)
    try:
        role = common_pb2.Role.Name(msg.role)
    except ValueError:
        role = str(msg.role)
    return InstanceSpec(
        id=msg.id,
        model=msg.model,
        role=role,
        dp_size=msg.dp_size,
        endpoints=tuple(
            EndpointSpec(id=e.id, ip=e.ip, business_port=e.business_port, mgmt_port=e.mgmt_port, headless=e.headless,
                         instance_route=InstanceRoute(e.instance_route.host, e.instance_route.port)
                         if e.HasField("instance_route") else None)
            for e in msg.endpoints
        ),
        source=source,
    )


def instance_to_proto(spec: InstanceSpec) -> common_pb2.Instance:
    if isinstance(spec.source, common_pb2.Instance):
        out = common_pb2.Instance()
        out.CopyFrom(spec.source)
        return out
    out = common_pb2.Instance(id=spec.id, model=spec.model, dp_size=spec.dp_size)
    if spec.role in common_pb2.Role.keys():
        out.role = common_pb2.Role.Value(spec.role)
    for ep in spec.endpoints:
        added = out.endpoints.add(id=ep.id, ip=ep.ip, business_port=ep.business_port, mgmt_port=ep.mgmt_port,
                                  headless=ep.headless)
        if ep.instance_route is not None:
            added.instance_route.host, added.instance_route.port = ep.instance_route.host, ep.instance_route.port
    return out


def _describe(instances: list[InstanceSpec]) -> str:
    return ", ".join(f"{i.id}:{i.endpoint_ids}" for i in instances) or "-"


class CoordinatorServicer(coordinator_pb2_grpc.CoordinatorServicer):
    def __init__(
        self, table: RoutingTable, management_key: str | None = None, clock: Callable[[], float] = time.monotonic,
        ledger: MigrationLedger | None = None, canary: Canary | None = None,
        leader_term: Callable[[], int] = lambda: 0,
    ) -> None:
        self._table = table
        # The highest leader term the server's fence has seen (ListInstances reports it).
        self._leader_term = leader_term
        self._key = management_key.encode() if management_key else None
        self._clock = clock
        self._ledger = ledger
        self._canary = canary

    async def _authorize(self, context: grpc.aio.ServicerContext, method: str) -> None:
        if self._key is None:
            return
        given = b""
        for item in context.invocation_metadata() or ():
            if item.key == MANAGEMENT_KEY_METADATA:
                value = item.value
                given = value if isinstance(value, bytes) else value.encode()
                break
        if not hmac.compare_digest(given, self._key):
            log.warning("%s from %s refused: %s", method, context.peer(),
                        "wrong management key" if given else "no management key")
            await context.abort(
                grpc.StatusCode.UNAUTHENTICATED,
                f"{method} needs the management key in gRPC metadata {MANAGEMENT_KEY_METADATA!r} "
                f"({'it does not match' if given else 'none was sent'})",
            )

    async def Refresh(
        self, request: coordinator_pb2.RefreshRequest, context: grpc.aio.ServicerContext
    ) -> coordinator_pb2.RefreshResponse:
        await self._authorize(context, "Refresh")
        await check_request(request, context)
        event_name = _event_name(request.event)
        instances = [instance_from_proto(i) for i in request.instances]
        try:
            event = _EVENTS.get(request.event)
            if event is None:
                raise RefreshError(
                    RefreshErrorCode.INVALID_ARGUMENT,
                    f"event {event_name} is not one of {', '.join(coordinator_pb2.RefreshEvent.keys()[1:])}",
                )
            revision = self._table.refresh(event, instances, request.revision)
        except RefreshError as exc:
            log.warning("refresh event=%s revision=%d instances=%s refused (%s): %s", event_name, request.revision,
                        _describe(instances), exc.code.value, exc.message)
            await context.abort(_CODES[exc.code], exc.message)
            raise  # unreachable: abort raises
        views = self._table.snapshot(self._clock()).instances
        log.info("refresh event=%s revision=%d instances=%s acknowledged; published=%s paused=%s", event_name,
                 revision, _describe(instances), [v.spec.id for v in views], [v.spec.id for v in views if v.paused])
        return coordinator_pb2.RefreshResponse(revision=revision)

    async def ListInstances(
        self, request: coordinator_pb2.ListInstancesRequest, context: grpc.aio.ServicerContext
    ) -> coordinator_pb2.ListInstancesResponse:
        await check_request(request, context)
        snapshot = self._table.snapshot(self._clock())
        return coordinator_pb2.ListInstancesResponse(
            revision=snapshot.revision,
            instances=[
                coordinator_pb2.PublishedInstance(
                    instance=instance_to_proto(view.spec), paused=view.paused, outstanding_requests=view.outstanding
                )
                for view in snapshot.instances
            ],
            reinference=[
                coordinator_pb2.InstanceReinference(instance_id=iid, migrated_requests=counts.migrated_requests,
                                                    failed_requests=counts.failed_requests)
                for iid, counts in (self._ledger.snapshot().items() if self._ledger is not None else ())
            ],
            leader_term=self._leader_term(),
        )

    async def SendCanary(
        self, request: coordinator_pb2.SendCanaryRequest, context: grpc.aio.ServicerContext
    ) -> coordinator_pb2.SendCanaryResponse:
        # The same guard as Refresh: it makes the Coordinator send traffic to an engine.
        await self._authorize(context, "SendCanary")
        await check_request(request, context)
        if self._canary is None:
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, "this Coordinator sends no canaries")
            raise AssertionError("unreachable: abort raises")
        request_id = request.request_id or f"canary-{uuid.uuid4().hex[:12]}"
        try:
            result = await self._canary.send(request.instance_id, list(request.endpoint_ids), request.timeout_sec,
                                             request_id)
        except CanaryRefused as exc:
            log.warning("request_id=%s instance=%d canary refused (%s): %s", request_id, request.instance_id,
                        exc.code, exc.message)
            await context.abort(getattr(grpc.StatusCode, exc.code), exc.message)
            raise  # unreachable: abort raises
        return coordinator_pb2.SendCanaryResponse(
            endpoint_id=result.endpoint_id, served=result.served, http_status=result.http_status,
            detail=result.detail, duration_sec=result.duration_sec, request_id=request_id,
        )
