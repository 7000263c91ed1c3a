"""Typed refusals of the NodeManager's plain functions; the servicers map each to a gRPC status.

The pure modules (guard, id checks, FT proxy) raise these and stay free of gRPC; `nodemanager.rpc`
owns the one mapping to status codes. Every message names the offending value.
"""

from __future__ import annotations


class NodeManagerError(Exception):
    """A call the NodeManager refuses; the message is what the caller sees."""


class InvalidArgument(NodeManagerError):
    """Bad input: lease, empty id, wrong instruction, unknown/duplicate/headless/retired endpoint ids,
    another instance's id (INVALID_ARGUMENT)."""


class FailedPrecondition(NodeManagerError):
    """The call is well-formed but the state refuses it: guard held by another request_id, stale
    apply/finalize, engine identity contract broken, engine status malformed (FAILED_PRECONDITION)."""


class AlreadyExists(NodeManagerError):
    """An apply with this request_id was already forwarded; it is never forwarded twice (ALREADY_EXISTS)."""


class Unavailable(NodeManagerError):
    """An engine could not be reached (UNAVAILABLE)."""


class DeadlineExceeded(NodeManagerError):
    """An engine did not answer in time (DEADLINE_EXCEEDED)."""


class ProxyDisabled(NodeManagerError):
    """The FT proxy is off (UNIMPLEMENTED, the RFC's 404)."""

    def __init__(self) -> None:
        super().__init__("DP scale-down proxy is disabled (enable_dp_scale_down_proxy=false)")
