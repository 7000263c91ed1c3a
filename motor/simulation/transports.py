"""In-memory transports: the peer interfaces the gRPC clients implement, over a simulated network.

- `SimNodeManagerClients` / `SimNodeManagerClient`: what `motor.controller.clients.NodeManagerClients`
  offers the Controller; each call goes to the pod's real `NodeManagerAgent` (its `FtProxy`,
  `EngineLifecycle`, `ExitPolicy`) as the NodeManager's servicers adapt it, NodeManager refusals
  mapped by `nodemanager.rpc.status_code_of`.
- `SimCoordinatorClient`: `CoordinatorClient` over the Coordinator's real `RoutingTable`.
- `SimControllerClient`: `nodemanager.controller_client.ControllerClient` over the acting leader's
  `ControllerCore` (Register, Heartbeat, ReportSoftwareFault and ReportSoftwareFaults as the Controller's
  servicer adapts them).

A Controller call goes through the real `motor.controller.clients._invoke` (the sending replica's
leadership check, its term in the metadata), then its `Sender` (`motor.simulation.fences`), the
network, and the receiver's real term fence, which judges the term when the call runs.

`motor.simulation.network.Network` is the only thing between them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import grpc

from gen.motor.v1 import controller_pb2, coordinator_pb2, node_manager_pb2
from motor.common.leader_client import LeaderUnavailable
from motor.common.term_fence import TermFence, term_of
from motor.controller.clients import _invoke
from motor.controller import software_reports
from motor.controller.fencing import Leadership
from motor.controller.instances import RegistrationError
from motor.controller.model.runtime import UnknownInstanceError
from motor.coordinator.routing import RoutingTable
from motor.coordinator.servicer import instance_from_proto, instance_to_proto
from motor.coordinator.serving_view import RefreshError, RefreshErrorCode, RefreshEvent
from nodemanager.errors import FailedPrecondition, NodeManagerError
from nodemanager.ft_service import read_fields, status_ask
from nodemanager.pod_stop import stop_target_mismatch
from nodemanager.rpc import status_code_of

from motor.simulation.fences import (
    COORDINATOR_FENCED,
    COORDINATOR_READS,
    NODEMANAGER_FENCED,
    FenceRefused,
    Sender,
    through_fence,
)
from motor.simulation.network import CallFailed, Network

_EVENTS = {coordinator_pb2.REFRESH_EVENT_ADD: RefreshEvent.ADD, coordinator_pb2.REFRESH_EVENT_DEL: RefreshEvent.DEL,
           coordinator_pb2.REFRESH_EVENT_SET: RefreshEvent.SET, coordinator_pb2.REFRESH_EVENT_PAUSE: RefreshEvent.PAUSE,
           coordinator_pb2.REFRESH_EVENT_RESUME: RefreshEvent.RESUME}
_REFRESH_CODES = {RefreshErrorCode.INVALID_ARGUMENT: grpc.StatusCode.INVALID_ARGUMENT,
                  RefreshErrorCode.FAILED_PRECONDITION: grpc.StatusCode.FAILED_PRECONDITION,
                  RefreshErrorCode.NOT_FOUND: grpc.StatusCode.NOT_FOUND}


async def _sent(sender: Sender | None, call: str, target: str, request_id: str, term: int, deliver):
    """The call leaves its sender; one the sender holds is on the wire: delivered after the hold
    even when the caller has given up on it meanwhile (its answer then goes nowhere)."""
    hold = 0.0 if sender is None else await sender.send(call, target, request_id, term)
    if hold <= 0:
        return await deliver()

    async def held():
        await asyncio.sleep(hold)
        return await deliver()

    wire = asyncio.get_running_loop().create_task(held())
    wire.add_done_callback(lambda t: t.cancelled() or t.exception())
    sender.on_wire(wire)  # type: ignore[union-attr]
    return await asyncio.shield(wire)


# -- Controller → NodeManager ------------------------------------------------------------------
class SimNodeManagerClient:
    """`leadership`: the sending replica's; each call is checked and carries its term through the
    real `_invoke`, and the pod's real `TermFenceInterceptor` judges it (`motor.simulation.fences`)."""

    def __init__(self, net: Network, pods: dict, address: str, timeout_sec: float,
                 leadership: Leadership | None = None, sender: Sender | None = None) -> None:
        self.net, self._pods, self.address, self._timeout = net, pods, address, timeout_sec
        self._leadership, self._sender = leadership, sender

    async def _call(self, name: str, fn, timeout_sec: float | None = None, request_id: str = ""):
        timeout = timeout_sec or self._timeout

        def pod():
            nm = self._pods.get(self.address)
            if nm is None:
                raise CallFailed(grpc.StatusCode.UNAVAILABLE, "connection refused")
            return nm

        async def method(request, timeout, metadata=None):
            term = term_of(metadata) or 0
            sender = self._sender

            async def invoke():
                nm = pod()
                fence = getattr(nm, "term_fence", None)

                async def handle():
                    if sender is not None and fence is not None:
                        sender.accepted(fence, name, term)
                    return await fn(nm, term)

                try:
                    return await through_fence(fence, NODEMANAGER_FENCED, name, metadata, handle)
                except FenceRefused as exc:
                    raise CallFailed(exc.code, exc.details) from None
                except NodeManagerError as exc:
                    raise CallFailed(status_code_of(exc), str(exc)) from None
                except asyncio.CancelledError:
                    # Not this call's cancellation: the NodeManager crashed under its handler (its tasks
                    # are cancelled); a gRPC client sees the connection go, not a cancellation of its own.
                    if asyncio.current_task().cancelling():  # type: ignore[union-attr]
                        raise
                    raise CallFailed(grpc.StatusCode.UNAVAILABLE, "connection lost: the NodeManager went away") from None

            try:
                return await _sent(sender, name, self.address, request_id, term,
                                   lambda: self.net.call(self.address, invoke, timeout))
            except CallFailed as exc:
                raise exc.rpc_error() from None

        return await _invoke(name, self.address, method, None, timeout, leadership=self._leadership)

    def _engine_timeout(self, timeout_sec: float | None = None) -> float:
        return max(0.01, (timeout_sec or self._timeout) - 0.1)

    def _settle(self, then_status) -> float:
        return self._timeout + (then_status.settle_sec if then_status is not None else 0.0)

    async def guard(self, instance_id, request_id, lease_sec, then_status=None):
        async def fn(nm, term):
            g, read = await nm.proxy.guard_then_read(request_id, lease_sec, instance_id, term,
                                                     status_ask(nm.proxy, instance_id, then_status),
                                                     lambda: self._engine_timeout(self._settle(then_status)))
            return node_manager_pb2.GuardResponse(request_id=g.request_id, lease_remaining_sec=g.lease_remaining_sec,
                                                  renewed=g.renewed, **read_fields(read))
        return await self._call("guard", fn, self._settle(then_status), request_id)

    async def status(self, instance_id, request_id, endpoint_ids, wait_while=(), settle_sec=0.0,
                     taken_as_evidence=False, reread_max_sec=0.0):
        async def fn(nm, term):
            entries = await nm.proxy.status(instance_id, list(endpoint_ids), request_id,
                                            self._engine_timeout(self._timeout + settle_sec),
                                            wait_while=sorted(wait_while), settle_sec=settle_sec,
                                            taken_as_evidence=taken_as_evidence, reread_max_sec=reread_max_sec)
            return [e.to_pb() for e in entries]
        return await self._call("status", fn, self._timeout + settle_sec, request_id)

    async def apply(self, instance_id, request_id, removed_dp_ranks, dp_master_ip, dp_master_rank, endpoint_ids,
                    dp_store_port=0, instruction=node_manager_pb2.INSTRUCTION_SCALE_DOWN, added_dp_ranks=(),
                    round_removed_dp_ranks=(), then_status=None):
        async def fn(nm, term):
            result = await nm.proxy.apply(
                instance_id=instance_id, request_id=request_id, instruction=instruction,
                removed_dp_ranks=list(removed_dp_ranks), dp_master_ip=dp_master_ip, dp_master_rank=dp_master_rank,
                endpoint_ids=list(endpoint_ids), timeout_sec=self._engine_timeout(), dp_store_port=dp_store_port,
                term=term, added_dp_ranks=list(added_dp_ranks), round_removed_dp_ranks=list(round_removed_dp_ranks),
                then=status_ask(nm.proxy, instance_id, then_status),
                read_timeout_sec=lambda: self._engine_timeout(self._settle(then_status)))
            return node_manager_pb2.ApplyResponse(
                accepted=result.accepted, dp_store_port=result.dp_store_port, **read_fields(result.read), results=[
                node_manager_pb2.EngineApplyResult(
                    endpoint_id=o.endpoint_id, accepted=o.accepted, http_status=o.http_status,
                    engine_request_id=o.engine_request_id, message=o.message, request_body=o.request_body,
                    elapsed_sec=o.elapsed_sec, sent_at_unix_sec=o.sent_at_unix_sec) for o in result.outcomes])
        return await self._call("apply", fn, self._settle(then_status), request_id)

    async def finalize(self, instance_id, request_id, commit, retired_ids):
        async def fn(nm, term):
            if commit:
                await nm.proxy.injected_finalize_delay(request_id)
            r = nm.proxy.finalize(instance_id=instance_id, request_id=request_id, commit=commit,
                                  retired_ids=list(retired_ids))
            return node_manager_pb2.FinalizeResponse(retired_ids=r.retired_ids, guard_released=r.guard_released)
        return await self._call("finalize", fn, request_id=request_id)

    async def stop_engines(self, instance_id, request_id, timeout_sec):
        async def fn(nm, term):
            stopped = await nm.engines.stop_engines(instance_id=instance_id, request_id=request_id, grace_sec=0.0,
                                                    endpoint_ids=[])
            return node_manager_pb2.StopEnginesResponse(stopped_ids=stopped)
        return await self._call("stop_engines", fn, timeout_sec, request_id)

    async def start_engines(self, instance_id, request_id, dp_master_ip, dp_master_port, timeout_sec, endpoint_ids=(),
                            join=False):
        async def fn(nm, term):
            launch = await nm.engines.start_engines(instance_id=instance_id, request_id=request_id,
                                                    dp_master_ip=dp_master_ip, dp_master_port=dp_master_port,
                                                    endpoint_ids=list(endpoint_ids),
                                                    timeout_sec=self._engine_timeout(timeout_sec), join=join)
            return node_manager_pb2.StartEnginesResponse(endpoints=[e.to_pb() for e in launch.endpoints],
                                                         launched_at_unix_sec=launch.launched_at_unix_sec)
        return await self._call("start_engines", fn, timeout_sec, request_id)

    async def stop_pod(self, request_id, reason, instance_id, pod_ip):
        async def fn(nm, term):
            why = stop_target_mismatch(instance_id, pod_ip, nm.config.instance_id, nm.config.pod_ip)
            if why:
                raise FailedPrecondition(f"StopPod {why}: not obeyed")
            nm.exit_policy.stop_pod(request_id, reason)
            return node_manager_pb2.StopPodResponse(accepted=True)
        return await self._call("stop_pod", fn, request_id=request_id)

    async def close(self) -> None:
        pass


class SimNodeManagerClients:
    def __init__(self, net: Network, pods: dict, timeout_sec: float, leadership: Leadership | None = None,
                 sender: Sender | None = None) -> None:
        self.net, self.pods, self._timeout = net, pods, timeout_sec
        self._leadership, self._sender = leadership, sender

    def get(self, address: str) -> SimNodeManagerClient:
        return SimNodeManagerClient(self.net, self.pods, address, self._timeout, self._leadership, self._sender)

    async def close(self) -> None:
        pass


# -- Controller → Coordinator ------------------------------------------------------------------
class SimCoordinatorClient:
    """`fence`: the Coordinator's current `TermFence` (its process's); `leadership` and `sender` as
    for `SimNodeManagerClient` (ListInstances is checked and fenced as a read, as in the real client)."""

    address = "coordinator"

    def __init__(self, net: Network, table: Callable[[], RoutingTable], timeout_sec: float,
                 serve: Callable[[int], bool] = lambda rank: False, leadership: Leadership | None = None,
                 sender: Sender | None = None, fence: Callable[[], TermFence | None] = lambda: None) -> None:
        self.net, self._table, self._timeout, self._serve = net, table, timeout_sec, serve
        self._leadership, self._sender, self._fence = leadership, sender, fence

    async def _call(self, name: str, fn):
        sender = self._sender

        async def method(request, timeout, metadata=None):
            term = term_of(metadata) or 0
            fence = self._fence()

            async def handle():
                if sender is not None and fence is not None and term:
                    sender.accepted(fence, name, term)
                return await fn()

            async def invoke():
                try:
                    return await through_fence(fence, COORDINATOR_FENCED, name, metadata, handle, COORDINATOR_READS)
                except FenceRefused as exc:
                    raise CallFailed(exc.code, exc.details) from None

            try:
                return await _sent(sender, name, self.address, "", term,
                                   lambda: self.net.call(self.address, invoke, timeout))
            except CallFailed as exc:
                raise exc.rpc_error() from None

        return await _invoke(name, self.address, method, None, self._timeout,
                             leadership=self._leadership)

    async def refresh(self, event, instances, revision) -> int:
        async def fn():
            try:
                return self._table().refresh(_EVENTS[event], [instance_from_proto(i) for i in instances], revision)
            except RefreshError as exc:
                raise CallFailed(_REFRESH_CODES[exc.code], exc.message) from None
        name = coordinator_pb2.RefreshEvent.Name(event).removeprefix("REFRESH_EVENT_").lower()
        return await self._call(f"refresh:{name}", fn)

    async def list_instances(self):
        async def fn():
            snap = self._table().snapshot(0.0)
            return coordinator_pb2.ListInstancesResponse(revision=snap.revision, instances=[
                coordinator_pb2.PublishedInstance(instance=instance_to_proto(v.spec), paused=v.paused)
                for v in snap.instances])
        return await self._call("list_instances", fn)

    async def send_canary(self, instance_id, endpoint_ids, timeout_sec, request_id):
        async def fn():
            target = endpoint_ids[0]
            served = self._serve(target)
            return coordinator_pb2.SendCanaryResponse(endpoint_id=target, served=served,
                                                      http_status=200 if served else 503,
                                                      detail="served" if served else "the engine failed the request",
                                                      request_id=request_id)
        return await self._call("send_canary", fn)

    async def close(self) -> None:
        pass


# -- NodeManager → Controller ------------------------------------------------------------------
class SimControllerClient:
    """The NodeManager's Controller client; errors are `grpc.aio.AioRpcError` as the real one raises,
    or `LeaderUnavailable` while a replica runs but none acts (an election or a takeover under way).
    `core`: the acting replica's core (None: none acts); `standing_by`: some replica process runs.
    The acting leader's term comes back with every answer (`term`, `on_term`: the pod's fence).
    `dead`: the NodeManager's process is gone, nothing it was about to send leaves."""

    def __init__(self, net: Network, core: Callable[[], object], timeout_sec: float,
                 on_term: Callable[[int], None] | None = None, standing_by: Callable[[], bool] = lambda: False) -> None:
        self.net, self._core, self.timeout_sec = net, core, timeout_sec
        self._standing_by = standing_by
        self.address = "controller"
        self.addresses = ["controller"]
        self.term = 0
        self.on_term = on_term
        self.dead = False

    async def _call(self, fn, idempotent: bool):
        answered: list[int] = []

        async def invoke():
            core = self._core()
            if core is None:
                if self._standing_by():
                    raise LeaderUnavailable("no Controller replica leads now (an election or a takeover)")
                raise CallFailed(grpc.StatusCode.UNAVAILABLE, "controller is down")
            result = await fn(core)
            answered.append(core.leadership.term)  # type: ignore[attr-defined]
            return result
        try:
            if self.dead:  # nothing leaves a process that is gone, not even onto the network
                raise CallFailed(grpc.StatusCode.CANCELLED, "the NodeManager process is gone")
            result = await self.net.call("controller", invoke, self.timeout_sec, idempotent)
        except CallFailed as exc:
            raise exc.rpc_error() from None
        if answered and answered[-1]:
            self.term = answered[-1]
            if self.on_term is not None:
                self.on_term(self.term)
        return result

    async def register(self, request: controller_pb2.RegisterRequest) -> controller_pb2.RegisterResponse:
        async def fn(core):
            try:
                return await core.register(request)
            except RegistrationError as exc:
                code = grpc.StatusCode.FAILED_PRECONDITION if exc.precondition else grpc.StatusCode.INVALID_ARGUMENT
                raise CallFailed(code, str(exc)) from None
        return await self._call(fn, idempotent=False)

    async def heartbeat(self, request: controller_pb2.HeartbeatRequest) -> controller_pb2.HeartbeatResponse:
        async def fn(core):
            return core.heartbeat(request)
        return await self._call(fn, idempotent=True)

    async def report_software_fault(self, request: controller_pb2.ReportSoftwareFaultRequest):
        async def fn(core):
            try:
                return software_reports.take(core, request)
            except UnknownInstanceError:
                raise CallFailed(grpc.StatusCode.NOT_FOUND, f"unknown instance_id {request.instance_id}") from None
            except software_reports.ReportInvalid as exc:
                raise CallFailed(grpc.StatusCode.INVALID_ARGUMENT, str(exc)) from None
        return await self._call(fn, idempotent=True)

    async def report_software_faults(self, request: controller_pb2.ReportSoftwareFaultsRequest):
        async def fn(core):
            try:
                instance_id, _ = software_reports.one_pod(request)
                return software_reports.take_all(core, request)
            except UnknownInstanceError:
                raise CallFailed(grpc.StatusCode.NOT_FOUND, f"unknown instance_id {instance_id}") from None
            except software_reports.ReportInvalid as exc:
                raise CallFailed(grpc.StatusCode.INVALID_ARGUMENT, str(exc)) from None
        return await self._call(fn, idempotent=True)

    async def close(self) -> None:
        pass

