"""The one mapping from NodeManager errors to gRPC status codes, as a decorator for servicer methods.

Every request's field bounds are checked first (`motor.common.validation`: INVALID_ARGUMENT naming
the field). A refused call aborts with its status and message; anything unexpected is logged with its
traceback and answered INTERNAL, so a bad request never takes the NodeManager down.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import grpc

from motor.common.text import shorten
from motor.common.validation import FieldBoundError, check_bounds
from nodemanager.errors import (
    AlreadyExists,
    DeadlineExceeded,
    FailedPrecondition,
    InvalidArgument,
    NodeManagerError,
    ProxyDisabled,
    Unavailable,
)

log = logging.getLogger("nodemanager.rpc")

STATUS_OF: dict[type[NodeManagerError], grpc.StatusCode] = {
    InvalidArgument: grpc.StatusCode.INVALID_ARGUMENT,
    FailedPrecondition: grpc.StatusCode.FAILED_PRECONDITION,
    AlreadyExists: grpc.StatusCode.ALREADY_EXISTS,
    Unavailable: grpc.StatusCode.UNAVAILABLE,
    DeadlineExceeded: grpc.StatusCode.DEADLINE_EXCEEDED,
    ProxyDisabled: grpc.StatusCode.UNIMPLEMENTED,
}


def status_code_of(exc: NodeManagerError) -> grpc.StatusCode:
    for cls in type(exc).__mro__:
        code = STATUS_OF.get(cls)  # type: ignore[arg-type]
        if code is not None:
            return code
    return grpc.StatusCode.INTERNAL


R = TypeVar("R")
Handler = Callable[[Any, Any, grpc.aio.ServicerContext], Awaitable[R]]


def rpc_method(name: str) -> Callable[[Handler[R]], Handler[R]]:
    """Wraps an async servicer method: NodeManagerError → its status; other errors → INTERNAL."""

    def wrap(fn: Handler[R]) -> Handler[R]:
        @functools.wraps(fn)
        async def handler(self: Any, request: Any, context: grpc.aio.ServicerContext) -> R:
            try:
                check_bounds(request)
            except FieldBoundError as exc:
                log.warning("instance=%s %s refused: INVALID_ARGUMENT: %s", getattr(request, "instance_id", "-"), name, exc)
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
            try:
                return await fn(self, request, context)
            except NodeManagerError as exc:
                code = status_code_of(exc)
                log.warning("instance=%s request_id=%s %s refused: %s: %s", getattr(request, "instance_id", "-"),
                            shorten(getattr(request, "request_id", "") or "-"), name, code.name, exc)
                await context.abort(code, str(exc))
                raise  # unreachable: abort raises
            except grpc.aio.AbortError:
                raise
            except Exception as exc:  # noqa: BLE001 - any bug answers INTERNAL, the server keeps serving
                log.exception("instance=%s request_id=%s %s failed unexpectedly", getattr(request, "instance_id", "-"),
                              shorten(getattr(request, "request_id", "") or "-"), name)
                await context.abort(grpc.StatusCode.INTERNAL, f"{name} failed: {type(exc).__name__}: {exc}")
                raise

        return handler

    return wrap
