"""Receiver-side fencing of Controller leaders: the highest leader term seen, and a server
interceptor that refuses calls of an older term, or of no readable term once one was seen.

Every call a Controller leader makes to a NodeManager or the Coordinator carries its term in gRPC
metadata (`LEADER_TERM_METADATA`); the term is the etcd revision that created its leader key, so a
later leader always has a larger one. A receiver remembers the largest term it has seen (from those
calls and, on the NodeManager, from the leader's answers to its heartbeats) and refuses a guarded
method with FAILED_PRECONDITION when it is called

* with a smaller term (naming both terms): the calling Controller was deposed;
* with a term that is not a decimal number (naming the value): never a Controller's;
* without a term once a term was seen: a Controller without election cannot act beside elected ones.

Before any term was seen, a call without one runs (a lone Controller without election). This closes
the window a leader's own lease check leaves open (a process frozen between the check and the send).

A fenced read (the Coordinator's ListInstances) is judged the same way, except that a call without a
term always runs (an operator reading). A leader's read carries its term, so the receiver records
the new term at the read: a deposed leader's write cannot land between a new leader's read and its
first fenced write, which the new leader's view would then miss.

The highest term is kept in a `TermStorage` when one is given (the NodeManager's log_dir, the
Coordinator's state_dir), so a restarted receiver does not accept a deposed leader's first call. A
wiped etcd (revisions start again at 1) or a switch back to a Controller without election needs
that record removed (docs/security.md).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Protocol

import grpc

from motor.common.metadata import LEADER_TERM_METADATA
from motor.common.text_file import TextFile

log = logging.getLogger(__name__)

TERM_FILE_NAME = "leader-term.json"
# A term is an etcd revision: an int64.
_MAX_TERM = 2**63 - 1


class TermStorage(Protocol):
    """Where the highest term is kept; it must outlive the receiver's process."""

    @property
    def where(self) -> str: ...

    def read(self) -> str | None:
        """The record's text, None when there is none; OSError when it cannot be read."""

    def write(self, text: str) -> None:
        """Replaces the record atomically."""


class FileTermStorage(TextFile):
    """``leader-term.json`` in a directory."""

    def __init__(self, directory: Path | str) -> None:
        super().__init__(directory, TERM_FILE_NAME)


class MalformedTerm(str):
    """The raw text of a leader-term metadata value that is not a decimal term."""


class TermFence:
    """The largest leader term seen by this process (and, with a storage, by its earlier runs)."""

    def __init__(self, label: str, storage: TermStorage | None = None) -> None:
        self._label = label
        self._storage = storage
        self.term = 0
        self.refused = 0
        if storage is not None:
            self.term = self._load(storage)

    def _load(self, storage: TermStorage) -> int:
        try:
            text = storage.read()
            if text is None:
                return 0
            term = int(json.loads(text)["term"])
            if not 0 <= term <= _MAX_TERM:
                raise ValueError(f"term {term} out of range")
        except (OSError, ValueError, KeyError, TypeError) as exc:
            # Unreadable is not "nothing seen": starting from 0 would accept a deposed leader again.
            raise RuntimeError(f"{self._label}: leader term record {storage.where} is unreadable ({exc}); "
                               "remove it to start without a known term") from exc
        if term:
            log.info("%s: highest leader term seen before the restart: %d (%s)", self._label, term, storage.where)
        return term

    def observe(self, term: int, source: str) -> None:
        if term > self.term:
            if self.term:
                log.info("%s: leader term %d -> %d (%s)", self._label, self.term, term, source)
            self.term = term
            if self._storage is not None:
                try:
                    self._storage.write(json.dumps({"term": term}))
                except OSError as exc:
                    log.error("%s: leader term %d not persisted to %s: %s", self._label, term,
                              self._storage.where, exc)

    def refusal(self, term: int | MalformedTerm | None, method: str, read: bool = False) -> str | None:
        """None when a call of `term` may run (recording it), else why it is refused; a `read`
        without a term always runs."""
        if isinstance(term, MalformedTerm):
            self.refused += 1
            return (f"{method} refused: leader term {term[:40]!r} in {LEADER_TERM_METADATA} is not a decimal "
                    "term")
        if term is None:
            if not self.term or read:
                return None
            self.refused += 1
            return (f"{method} refused: the call carries no leader term ({LEADER_TERM_METADATA}) but term "
                    f"{self.term} was already seen; only the elected leader may call")
        if term < self.term:
            self.refused += 1
            return (f"{method} refused: leader term {term} is older than term {self.term} already seen; "
                    "the calling Controller was deposed")
        self.observe(term, method)
        return None


def parse_term(metadata: Iterable[tuple[str, str | bytes]] | None) -> int | MalformedTerm | None:
    """The leader term in a call's metadata: None when absent, MalformedTerm when not a decimal term."""
    for key, value in metadata or ():
        if key == LEADER_TERM_METADATA:
            text = value.decode("ascii", "replace") if isinstance(value, bytes) else value
            if text.isascii() and text.isdigit() and len(text) <= 19 and int(text) <= _MAX_TERM:
                return int(text)
            return MalformedTerm(text)
    return None


def term_of(metadata: Iterable[tuple[str, str | bytes]] | None) -> int | None:
    """The leader term in a call's (or answer's) metadata; None when absent or not a decimal."""
    term = parse_term(metadata)
    return term if isinstance(term, int) else None


class TermFenceInterceptor(grpc.aio.ServerInterceptor):
    """Refuses the `guarded` methods (full names) called with an older, a malformed, or (once a term
    was seen) no leader term; the `reads` with an older or a malformed one."""

    def __init__(self, fence: TermFence, guarded: Iterable[str], reads: Iterable[str] = ()) -> None:
        self._fence = fence
        self._guarded = frozenset(guarded)
        self._reads = frozenset(reads)

    async def intercept_service(self, continuation, handler_call_details):
        method = handler_call_details.method
        read = method in self._reads
        if method not in self._guarded and not read:
            return await continuation(handler_call_details)
        term = parse_term(handler_call_details.invocation_metadata)
        handler = await continuation(handler_call_details)
        if handler is None or handler.unary_unary is None:
            return handler
        inner = handler.unary_unary
        fence = self._fence

        async def unary_unary(request, context):
            # Judged when the call runs, not when it arrived: a newer term may have been seen since.
            why = fence.refusal(term, method, read)
            if why is not None:
                log.warning("%s", why)
                await context.abort(grpc.StatusCode.FAILED_PRECONDITION, why)
            return await inner(request, context)

        return grpc.unary_unary_rpc_method_handler(
            unary_unary, request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer)
