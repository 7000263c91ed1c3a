"""Calls to the Controller's leader among its replicas (NodeManagers, the Coordinator).

A `LeaderFollowingClient` knows every Controller replica's address and sends each call to the one
it believes leads. A standby answers UNAVAILABLE with the leader's address in trailing metadata
(`LEADER_ADDRESS_METADATA`, empty while none is known); the client then switches to that address
and sends the call again at once. A replica that does not answer (connection refused, or no answer
within the deadline: a crashed or frozen leader) makes it try the next address. Each attempt has
the caller's deadline and every address is tried at most once per call (a named leader once
more), so one call is bounded by (replicas + 1) deadlines.

A replica that did not answer is skipped for a moment (`_DOWN_SEC`), even when a standby still
names it (its lease has not expired yet), so calls do not bounce between a dead leader and the
standby while the takeover runs.

When every replica was tried and one of them answered as a standby, the call fails with
`LeaderUnavailable`: an election or a takeover is under way and the caller should hold what it
sends rather than count a lost attempt. Any other failure is the last `grpc.aio.AioRpcError`.
The leader term in the leader's answers (`LEADER_TERM_METADATA`) is kept in `term`; it changes
when another leader took over, which callers use to register again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

import grpc

from gen.motor.v1 import controller_pb2_grpc
from motor.common.cert_reload import client_files, close_later
from motor.common.config.tls import ClientTlsConfig
from motor.common.grpc_server import open_channel
from motor.common.metadata import LEADER_ADDRESS_METADATA
from motor.common.term_fence import term_of

log = logging.getLogger(__name__)

_FOLLOW_CODES = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED})
# How long a replica that did not answer is left out of the next calls' choices.
_DOWN_SEC = 2.0


class LeaderUnavailable(Exception):
    """No Controller replica leads right now (a standby answered); the message says what was tried."""


def leader_hint(metadata: Any) -> str | None:
    """The leader address a standby named ("" when it knows none); None when no standby answered."""
    for key, value in metadata or ():
        if key == LEADER_ADDRESS_METADATA:
            return value.decode() if isinstance(value, bytes) else value
    return None


class LeaderFollowingClient:
    def __init__(self, addresses: Sequence[str], *, timeout_sec: float, tls: ClientTlsConfig | None = None,
                 label: str = "controller client", on_term: Callable[[int], None] | None = None) -> None:
        if not addresses:
            raise ValueError("LeaderFollowingClient needs at least one Controller address")
        self.addresses = list(dict.fromkeys(addresses))
        self.timeout_sec = timeout_sec
        self._tls = tls
        self._label = label
        self._on_term = on_term
        self.address = self.addresses[0]
        # The leader term of the last answer that carried one (0: none yet, or no election).
        self.term = 0
        self.switches = 0
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._stubs: dict[str, controller_pb2_grpc.ControllerStub] = {}
        # Rotated certificate files reopen the channels (their credentials are fixed when opened).
        self._files = client_files(tls)
        self._stamps: dict[str, tuple] = {}
        # Replicas that did not answer, until when they are left out (monotonic time).
        self._down_until: dict[str, float] = {}

    def stub(self, address: str) -> controller_pb2_grpc.ControllerStub:
        """The stub of `address`'s channel, opened lazily inside the running event loop and reopened
        when the certificate files rotated (a caller holding a stream sees a new stub)."""
        stub = self._stubs.get(address)
        if stub is not None and self._files is not None and self._files.changed_since(self._stamps[address]):
            log.warning("%s: certificate files changed; channel to %s reopened", self._label, address)
            close_later(self._channels.pop(address))
            stub = None
        if stub is None:
            if self._files is not None:
                self._stamps[address] = self._files.stamp()
            self._channels[address] = open_channel(address, self._tls)
            stub = self._stubs[address] = controller_pb2_grpc.ControllerStub(self._channels[address])
        return stub

    def _usable(self, address: str, tried: set[str]) -> bool:
        return address not in tried and self._down_until.get(address, 0.0) <= time.monotonic()

    def _next_untried(self, after: str, tried: set[str]) -> str | None:
        order = self.addresses[self.addresses.index(after) + 1:] + self.addresses if after in self.addresses \
            else self.addresses
        return next((a for a in order if self._usable(a, tried)), None)

    def _switch(self, address: str, why: str) -> None:
        if address != self.address:
            log.info("%s: %s -> %s (%s)", self._label, self.address, address, why)
            self.address = address
            self.switches += 1

    def answered(self, address: str, term: int) -> None:
        """`address` answered a call made outside `call` (a stream's message), with leader `term`."""
        self._down_until.pop(address, None)
        if term:
            self._observe_term(term)

    def not_answering(self, address: str) -> bool:
        """`address` did not answer a call made outside `call` in time: it is left out for a moment,
        as `call` does, and the next call goes to another replica. False when there is none."""
        self._down_until[address] = time.monotonic() + _DOWN_SEC
        nxt = self._next_untried(address, {address})
        if nxt is None:
            return False
        self._switch(nxt, f"{address} did not answer in {self.timeout_sec:g}s")
        return True

    def _observe_term(self, term: int) -> None:
        if term != self.term:
            if self.term:
                log.info("%s: leader term %d -> %d at %s", self._label, self.term, term, self.address)
            self.term = term
        if self._on_term is not None:
            self._on_term(term)

    async def call(self, rpc: str, request: Any) -> Any:
        """Sends `request` to the leader's method `rpc` (a Controller method name, e.g. "Heartbeat")."""
        tried: set[str] = set()
        standby_said: list[str] = []
        last: grpc.aio.AioRpcError | None = None
        target = self.address
        for _ in range(len(self.addresses) + 1):
            call = getattr(self.stub(target), rpc)(request, timeout=self.timeout_sec)
            try:
                response = await call
            except grpc.aio.AioRpcError as exc:
                tried.add(target)
                last = exc
                if exc.code() not in _FOLLOW_CODES:
                    raise
                hint = leader_hint(exc.trailing_metadata())
                if hint is not None:
                    standby_said.append(f"{target} is a standby ({'leader ' + hint if hint else 'no leader known'})")
                else:
                    self._down_until[target] = time.monotonic() + _DOWN_SEC
                following = hint if hint and self._usable(hint, tried) else None
                nxt = following or self._next_untried(target, tried)
                if nxt is None:
                    break
                self._switch(nxt, f"the replica's leader is {hint}" if following else
                             f"{target} answered {exc.code().name}: {exc.details()}")
                target = nxt
                continue
            self._down_until.pop(target, None)
            term = term_of(await call.trailing_metadata())
            if term:
                self._observe_term(term)
            return response
        assert last is not None
        if standby_said:
            raise LeaderUnavailable(f"{rpc}: no Controller replica leads now: " + "; ".join(standby_said)
                                    + f"; last answer {last.code().name}: {last.details()}") from last
        raise last

    async def close(self) -> None:
        channels, self._channels, self._stubs = list(self._channels.values()), {}, {}
        for channel in channels:
            await channel.close(grace=None)
