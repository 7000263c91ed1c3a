"""Receiver-side fencing of Controller leaders: the highest leader term seen, and a server
interceptor that refuses calls of an older term.

Every call a Controller leader makes to a NodeManager or the Coordinator carries its term in gRPC
metadata (`LEADER_TERM_METADATA`); the term is the etcd revision that created its leader key, so a
later leader always has a larger one. A receiver remembers the largest term it has seen (from those
calls and, on the NodeManager, from the leader's answers to its heartbeats) and refuses a guarded
method called with a smaller one with FAILED_PRECONDITION naming both terms. A call without the
metadata (an operator's motorctl, a Controller without election) is not refused. This closes the
window a leader's own lease check leaves open (a process frozen between the check and the send).

A receiver's memory is its process's: after a restart it accepts the first term it is sent, and a
wiped etcd (revisions start again at 1) needs the receivers restarted too.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

import grpc

from motor.common.metadata import LEADER_TERM_METADATA

log = logging.getLogger(__name__)


class TermFence:
    """The largest leader term seen by this process."""

    def __init__(self, label: str) -> None:
        self._label = label
        self.term = 0
        self.refused = 0

    def observe(self, term: int, source: str) -> None:
        if term > self.term:
            if self.term:
                log.info("%s: leader term %d -> %d (%s)", self._label, self.term, term, source)
            self.term = term

    def refusal(self, term: int, method: str) -> str | None:
        """None when a call of `term` may run (recording it), else why it is refused."""
        if term < self.term:
            self.refused += 1
            return (f"{method} refused: leader term {term} is older than term {self.term} already seen; "
                    "the calling Controller was deposed")
        self.observe(term, method)
        return None


def term_of(metadata: Iterable[tuple[str, str | bytes]] | None) -> int | None:
    """The leader term in a call's (or answer's) metadata; None when absent or not a decimal."""
    for key, value in metadata or ():
        if key == LEADER_TERM_METADATA:
            text = value.decode("ascii", "replace") if isinstance(value, bytes) else value
            return int(text) if text.isdigit() else None
    return None


class TermFenceInterceptor(grpc.aio.ServerInterceptor):
    """Refuses the `guarded` methods (full names) when they carry an older leader term."""

    def __init__(self, fence: TermFence, guarded: Iterable[str]) -> None:
        self._fence = fence
        self._guarded = frozenset(guarded)

    async def intercept_service(self, continuation, handler_call_details):
        method = handler_call_details.method
        if method not in self._guarded:
            return await continuation(handler_call_details)
        term = term_of(handler_call_details.invocation_metadata)
        handler = await continuation(handler_call_details)
        if term is None or handler is None or handler.unary_unary is None:
            return handler
        inner = handler.unary_unary
        fence = self._fence

        async def unary_unary(request, context):
            # Judged when the call runs, not when it arrived: a newer term may have been seen since.
            why = fence.refusal(term, method)
            if why is not None:
                log.warning("%s", why)
                await context.abort(grpc.StatusCode.FAILED_PRECONDITION, why)
            return await inner(request, context)

        return grpc.unary_unary_rpc_method_handler(
            unary_unary, request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer)
