"""The receivers' REAL term fences on the in-memory transports, as the gRPC servers run them.

A Controller call carries its leader term in metadata (the real `motor.controller.clients._invoke`
builds it from the replica's `Leadership`); at the receiver the real `TermFenceInterceptor` of
`motor.common.term_fence` wraps the handler, with the receiver's own `TermFence` (a NodeManager's,
the Coordinator's) and the methods its server guards (`nodemanager.main.FENCED_METHODS`,
`motor.coordinator.main.FENCED_METHODS`, and its fenced read `FENCED_READS`), and judges the term when the call runs. A refusal is the
interceptor's `context.abort(FAILED_PRECONDITION, ...)`, which the transport turns into the status
a gRPC client would see.

`Sender` is the sending Controller process as the transports see it: it may be gone (its calls
fail), it may stall a call after the leadership check and before the send, and it is told which
calls a receiver accepted (the `two_leaders_act` invariant's observations).
"""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Protocol

import grpc

from motor.common.term_fence import TermFence, TermFenceInterceptor
from motor.coordinator.main import FENCED_METHODS as COORDINATOR_FENCED
from motor.coordinator.main import FENCED_READS as COORDINATOR_READS
from nodemanager.main import FENCED_METHODS as NODEMANAGER_FENCED

__all__ = ["COORDINATOR_FENCED", "COORDINATOR_READS", "NODEMANAGER_FENCED", "METHODS", "Sender", "through_fence"]

METHODS = {
    "guard": "/motor.v1.NodeManagerFaultTolerance/Guard", "status": "/motor.v1.NodeManagerFaultTolerance/Status",
    "apply": "/motor.v1.NodeManagerFaultTolerance/Apply", "finalize": "/motor.v1.NodeManagerFaultTolerance/Finalize",
    "stop_engines": "/motor.v1.NodeManager/StopEngines", "start_engines": "/motor.v1.NodeManager/StartEngines",
    "stop_pod": "/motor.v1.NodeManager/StopPod", "list_instances": "/motor.v1.Coordinator/ListInstances",
    "send_canary": "/motor.v1.Coordinator/SendCanary",
}


def method_of(call: str) -> str:
    return "/motor.v1.Coordinator/Refresh" if call.startswith("refresh:") else METHODS[call]


class Sender(Protocol):
    async def send(self, call: str, target: str, request_id: str, term: int) -> float:
        """The call leaves the process (it has passed the leadership check): how long it is held on
        the wire (0: not held); raises `transports.CallFailed` when the process is gone."""

    def on_wire(self, task: Any) -> None:
        """A held call's delivery, which outlives the caller (the sender keeps it referenced)."""

    def accepted(self, receiver: object, call: str, term: int) -> None:
        """`receiver` (a receiver process's fence) accepted the call and runs it."""


_Details = namedtuple("_Details", ["method", "invocation_metadata"])


class FenceRefused(Exception):
    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self.code, self.details = code, details


class _Context:
    async def abort(self, code: grpc.StatusCode, details: str = "", trailing_metadata: Any = ()) -> None:
        raise FenceRefused(code, details)


async def through_fence(fence: TermFence | None, guarded: Iterable[str], call: str, metadata: Any,
                        handle: Callable[[], Awaitable[Any]], reads: Iterable[str] = ()) -> Any:
    """Runs `handle` behind the receiver's interceptor (FenceRefused when the fence refuses)."""
    if fence is None:
        return await handle()

    async def unary(request: Any, context: Any) -> Any:
        return await handle()

    async def continuation(details: Any) -> Any:
        return grpc.unary_unary_rpc_method_handler(unary)

    interceptor = TermFenceInterceptor(fence, guarded, reads)
    handler = await interceptor.intercept_service(continuation, _Details(method_of(call), tuple(metadata or ())))
    return await handler.unary_unary(None, _Context())
