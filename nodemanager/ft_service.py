"""gRPC servicer of motor.v1.NodeManagerFaultTolerance: adapts requests to ``FtProxy`` calls.

Status mapping (see ``nodemanager.rpc``): proxy off → UNIMPLEMENTED; bad input → INVALID_ARGUMENT;
guard conflict, stale apply/finalize, identity or malformed engine status → FAILED_PRECONDITION;
apply forwarded before → ALREADY_EXISTS; engine unreachable → UNAVAILABLE; engine timeout →
DEADLINE_EXCEEDED.
"""

from __future__ import annotations

import grpc

from gen.motor.v1 import node_manager_pb2, node_manager_pb2_grpc
from motor.common.term_fence import term_of
from nodemanager.ft_proxy import FtProxy, ReadAfter
from nodemanager.status_reads import StatusAsk
from nodemanager.rpc import rpc_method, status_code_of

# Kept back from the caller's deadline so an engine timeout is reported before the call expires.
_DEADLINE_MARGIN_SEC = 0.1


def engine_timeout(context: grpc.aio.ServicerContext) -> float | None:
    remaining = context.time_remaining()
    if remaining is None:
        return None
    return max(0.01, remaining - _DEADLINE_MARGIN_SEC)


def carried(request: node_manager_pb2.GuardRequest | node_manager_pb2.ApplyRequest
            ) -> node_manager_pb2.StatusRead | None:
    """The status read a Guard or Apply request carries, if any."""
    return request.then_status if request.HasField("then_status") else None


def read_fields(read: ReadAfter | None) -> dict:
    """The `then_status` of a Guard or Apply answer: the reads, or why they failed; none when no
    read was made."""
    if read is None:
        return {}
    if read.error is not None:
        answer = node_manager_pb2.StatusReadAnswer(error_code=status_code_of(read.error).value[0],
                                                   error=str(read.error), read_sec=read.read_sec)
    else:
        answer = node_manager_pb2.StatusReadAnswer(
            status=node_manager_pb2.StatusResponse(engines=[e.to_pb() for e in read.entries]), read_sec=read.read_sec)
    return {"then_status": answer}


def status_ask(proxy: FtProxy, instance_id: int, read: node_manager_pb2.StatusRead | None) -> StatusAsk | None:
    """The read a Guard or Apply request carries, checked by the proxy (InvalidArgument naming a bad
    value) before the call does anything; None when it carries none."""
    if read is None:
        return None
    return proxy.check_status(instance_id, list(read.endpoint_ids), [(w.status, w.ft_state) for w in read.wait_while],
                              read.settle_sec)


class FtServicer(node_manager_pb2_grpc.NodeManagerFaultToleranceServicer):
    def __init__(self, proxy: FtProxy) -> None:
        self._proxy = proxy

    @rpc_method("Guard")
    async def Guard(self, request: node_manager_pb2.GuardRequest, context: grpc.aio.ServicerContext
                    ) -> node_manager_pb2.GuardResponse:
        grant, read = await self._proxy.guard_then_read(
            request.request_id, request.lease_sec, request.instance_id, term_of(context.invocation_metadata()) or 0,
            status_ask(self._proxy, request.instance_id, carried(request)), lambda: engine_timeout(context))
        return node_manager_pb2.GuardResponse(
            request_id=grant.request_id, lease_remaining_sec=grant.lease_remaining_sec, renewed=grant.renewed,
            **read_fields(read))

    @rpc_method("Status")
    async def Status(self, request: node_manager_pb2.StatusRequest, context: grpc.aio.ServicerContext
                     ) -> node_manager_pb2.StatusResponse:
        entries = await self._proxy.status(request.instance_id, list(request.endpoint_ids), request.request_id,
                                           engine_timeout(context),
                                           wait_while=[(w.status, w.ft_state) for w in request.wait_while],
                                           settle_sec=request.settle_sec,
                                           taken_as_evidence=request.taken_as_evidence,
                                           reread_max_sec=request.reread_max_sec)
        return node_manager_pb2.StatusResponse(engines=[e.to_pb() for e in entries])

    @rpc_method("Apply")
    async def Apply(self, request: node_manager_pb2.ApplyRequest, context: grpc.aio.ServicerContext
                    ) -> node_manager_pb2.ApplyResponse:
        result = await self._proxy.apply(
            instance_id=request.instance_id, request_id=request.request_id, instruction=request.instruction,
            removed_dp_ranks=list(request.removed_dp_ranks), dp_master_ip=request.dp_master_ip,
            dp_master_rank=request.dp_master_rank, endpoint_ids=list(request.endpoint_ids),
            timeout_sec=engine_timeout(context), dp_store_port=request.dp_store_port,
            term=term_of(context.invocation_metadata()) or 0, added_dp_ranks=list(request.added_dp_ranks),
            round_removed_dp_ranks=list(request.round_removed_dp_ranks),
            then=status_ask(self._proxy, request.instance_id, carried(request)),
            read_timeout_sec=lambda: engine_timeout(context),
        )
        return node_manager_pb2.ApplyResponse(
            accepted=result.accepted,
            dp_store_port=result.dp_store_port,
            **read_fields(result.read),
            results=[
                node_manager_pb2.EngineApplyResult(
                    endpoint_id=o.endpoint_id, accepted=o.accepted, http_status=o.http_status,
                    engine_request_id=o.engine_request_id, message=o.message, request_body=o.request_body,
                    elapsed_sec=o.elapsed_sec, sent_at_unix_sec=o.sent_at_unix_sec,
                )
                for o in result.outcomes
            ],
        )

    @rpc_method("Finalize")
    async def Finalize(self, request: node_manager_pb2.FinalizeRequest, context: grpc.aio.ServicerContext
                       ) -> node_manager_pb2.FinalizeResponse:
        if request.commit:
            await self._proxy.injected_finalize_delay(request.request_id)
        result = self._proxy.finalize(instance_id=request.instance_id, request_id=request.request_id,
                                      commit=request.commit, retired_ids=list(request.retired_ids))
        return node_manager_pb2.FinalizeResponse(retired_ids=result.retired_ids, guard_released=result.guard_released)
