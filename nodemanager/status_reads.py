"""The Status long poll's reads: the pod's engines read concurrently, and read again while they wait.

``FtProxy`` checks a request and decides what the answer means; this module only reads. Every read
is bounded by ``engine_request_timeout_sec`` and the caller's deadline; any failed read fails the
whole answer: unreachable → UNAVAILABLE, timeout → DEADLINE_EXCEEDED, identity or malformed →
FAILED_PRECONDITION (the first error, the others appended).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

from nodemanager.clock import Clock
from nodemanager.engine_answers import (
    EngineCallError,
    EngineProtocolError,
    EngineStatusEntry,
    EngineTimeout,
    EngineUnreachable,
)
from nodemanager.engine_http import EngineAddress, EngineHttpClient
from nodemanager.errors import DeadlineExceeded, FailedPrecondition, NodeManagerError, Unavailable
from nodemanager.metrics import NodeManagerMetrics
from nodemanager.settle import SETTLE_SHARE_OF_DEADLINE, EngineStatePair, engine_state, reread_delay_sec

log = logging.getLogger("nodemanager.status_reads")


def engine_error(exc: EngineCallError) -> NodeManagerError:
    if isinstance(exc, EngineTimeout):
        return DeadlineExceeded(str(exc))
    if isinstance(exc, EngineUnreachable):
        return Unavailable(str(exc))
    if isinstance(exc, EngineProtocolError):
        return FailedPrecondition(str(exc))
    return Unavailable(str(exc))


@dataclass(frozen=True)
class StatusAsk:
    """One checked status read (`FtProxy.check_status` makes them): ids (routable, local), the pairs
    waited out (empty: one read), the long poll's bound and its re-read cap."""
    ids: list[int]
    waits: frozenset[EngineStatePair]
    settle_sec: float
    reread_cap_sec: float


class StatusReads:
    def __init__(self, http: EngineHttpClient, address_of: Callable[[int], EngineAddress | None], instance_id: int,
                 metrics: NodeManagerMetrics, clock: Clock) -> None:
        """`address_of`: an endpoint's FT address (the dialect's), None before it has a port."""
        self._http = http
        self._address_of = address_of
        self._instance = instance_id
        self._metrics = metrics
        self._clock = clock

    async def read(self, ask: StatusAsk, request_id: str, timeout_sec: float | None) -> list[EngineStatusEntry]:
        """One read of each engine; with `ask.waits` a long poll. The ranks of a DP group move together
        (one vote, one rebuild), so a long poll reads one engine, the probe, and the others only once a
        probe has left the waited-out states, or at the bound: the first probe is the first engine,
        then one waiting engine is read again at a time (nodemanager.settle's cadence, rotating; the
        re-read cap bounds the gap), an engine not read yet counting as waiting. The answer holds a
        read of each engine taken after the last probe, or, at the bound, a final read of those still
        waiting or not read yet."""
        ids, waits = ask.ids, ask.waits
        started = self._clock.monotonic()
        settle_until = started + (min(ask.settle_sec, SETTLE_SHARE_OF_DEADLINE * timeout_sec)
                                  if timeout_sec is not None else ask.settle_sec)

        def left() -> float | None:
            return None if timeout_sec is None else max(0.01, timeout_sec - (self._clock.monotonic() - started))

        async def read(some: list[int], kind: str = "reread") -> None:
            self._metrics.status_rpc_reads.labels(kind).inc(len(some))
            entries.update(zip(some, await self._read_all(some, request_id, left()), strict=True))

        entries: dict[int, EngineStatusEntry] = {}
        if waits and len(ids) > 1:
            await read(ids[:1], "first")
            if engine_state(entries[ids[0]]) not in waits:
                await read(ids[1:], "first")
        else:
            await read(ids, "first")
        probes = 0
        while waits:
            pending = [i for i in ids if i not in entries or engine_state(entries[i]) in waits]
            if not pending:
                break
            delay = reread_delay_sec(probes, ask.reread_cap_sec)
            if self._clock.monotonic() + delay >= settle_until:
                # Older than the last probe, or not read at all: the answer is as fresh as the probe.
                stale = pending if probes else [i for i in pending if i not in entries]
                if stale:
                    await read(stale)
                break
            await asyncio.sleep(delay)
            probe = pending[probes % len(pending)]
            probes += 1
            await read([probe])
            if engine_state(entries[probe]) not in waits:
                await read([i for i in pending if i != probe])
        return [entries[i] for i in ids]

    async def _read_all(self, ids: list[int], request_id: str, timeout_sec: float | None) -> list[EngineStatusEntry]:
        async def read(i: int) -> EngineStatusEntry:
            addr = self._address_of(i)
            if addr is None:
                raise EngineUnreachable(i, "engine has not been launched (no port yet)")
            return await self._http.read_status(addr, timeout_sec, request_id)

        results = await asyncio.gather(*(read(i) for i in ids), return_exceptions=True)
        errors = [r for r in results if isinstance(r, BaseException)]
        for r in errors:
            if not isinstance(r, EngineCallError):
                raise r
        if errors:
            first = engine_error(errors[0])  # type: ignore[arg-type]
            if len(errors) > 1:
                first = type(first)(f"{first}; also: " + "; ".join(str(e) for e in errors[1:]))
            log.warning("instance=%d request_id=%s status of %s failed: %s", self._instance, request_id or "-",
                        ids, first)
            raise first
        return [r for r in results if isinstance(r, EngineStatusEntry)]
