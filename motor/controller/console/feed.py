"""What the operator console reads, and its live feed: Server-Sent Events from the broadcaster behind
WatchFaultToleranceStatus.

`ConsoleSource` is the console's view of one Controller replica (built from its core by
`ConsoleSource.of`, duck-typed so this layer imports nothing above it). `ConsoleFeed` renders the
fleet rows (`cells.fleet_row`), an instance's page (runtime, evidence, waits, transactions with
their stages) and streams changes:

  event: hello       {leadership, scale_down_enabled, server_unix_sec}   first, on every (re)connect
  event: fleet       {rows: [...]}                                      every row, after hello
  event: row         one row                                            each change of an instance
  event: gone        {instance_id}                                      an instance no longer reported
  event: leadership  the Leadership message as JSON                     when it changes

Changes are coalesced for `coalesce_sec` and sent only when the row differs from the one last sent,
so a burst on one instance costs one event. A standby's runtimes come from the store, not from the
broadcaster: every `refresh_sec` each row is compared again (and leadership is checked on every
replica), so its console follows what the leader persisted.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from motor.common.waiting import get_within
from motor.controller.console.cells import fleet_row
from motor.controller.fault_tolerance.evidence import RankEvidence
from motor.controller.fault_tolerance.stages import fault_to_published_sec, transaction_stages
from motor.controller.status import message_json, runtime_proto

log = logging.getLogger(__name__)

# The instance page shows the last transactions of the instance, newest last.
INSTANCE_TRANSACTIONS = 8
# Events of one transaction on the instance page (a long reconfiguration retry loop is cut, newest kept).
TRANSACTION_EVENTS_MAX = 200


@dataclass(frozen=True)
class ConsoleSource:
    runtimes: Callable[[], list]
    evidence: Callable[[int], Mapping[int, RankEvidence]]
    strategy: Callable[[int], str]
    # (what, until as Unix seconds, detail), soonest first.
    waits: Callable[[int], list[tuple[str, float, str]]]
    transactions: Callable[[int], list]
    leadership: Callable[[], dict[str, Any]]
    subscribe: Callable[[], asyncio.Queue[int]]
    unsubscribe: Callable[[asyncio.Queue[int]], None]
    wall: Callable[[], float]
    scale_down_enabled: bool

    @classmethod
    def of(cls, core: Any, leadership: Callable[[], dict[str, Any]]) -> ConsoleSource:
        """From a ControllerCore: a standby holds no evidence and runs nothing (it does not act)."""
        def acting() -> bool:
            return core.acting or not core.leadership.election_enabled

        def strategy(iid: int) -> str:
            running = core.faults.running(iid) if acting() else None
            return running.name if running is not None else ""

        def waits(iid: int) -> list[tuple[str, float, str]]:
            if not acting():
                return []
            offset = core.clock.wall() - core.clock.monotonic()
            return [(what, until + offset, detail) for what, until, detail in core.faults.waits(iid)]

        return cls(
            runtimes=core.status_runtimes,
            evidence=lambda iid: core.faults.evidence(iid) if acting() else {},
            strategy=strategy, waits=waits,
            transactions=lambda iid: core.timelines.transactions(iid, INSTANCE_TRANSACTIONS),
            leadership=leadership,
            subscribe=core.broadcaster.subscribe, unsubscribe=core.broadcaster.unsubscribe,
            wall=core.clock.wall, scale_down_enabled=core.scale_down_enabled,
        )


def _evidence_doc(ev: RankEvidence) -> dict[str, Any]:
    return {"rank": ev.rank, "health": str(ev.health), "kind": str(ev.kind), "detail": ev.detail,
            "observed_at_unix_sec": ev.observed_at_sec, "received_at_unix_sec": ev.received_at_sec}


def transaction_doc(txn_proto) -> dict[str, Any]:
    """One transaction for the instance page: its stages (those of `motorctl timeline`) and events."""
    stages = transaction_stages(txn_proto)
    doc = message_json(txn_proto)
    events = doc.pop("events")
    return {
        **doc,
        "stages": [{"name": s.name, "start_unix_sec": s.start_unix_sec, "end_unix_sec": s.end_unix_sec,
                    "duration_sec": s.duration_sec} for s in stages],
        "fault_to_published_sec": fault_to_published_sec(txn_proto, stages),
        "events": [{k: e[k] for k in ("at_unix_sec", "event_kind", "name", "target", "outcome", "detail",
                                       "duration_sec", "ranks")} for e in events[-TRANSACTION_EVENTS_MAX:]],
        "events_cut": max(0, len(events) - TRANSACTION_EVENTS_MAX),
    }


class ConsoleFeed:
    def __init__(self, source: ConsoleSource, *, coalesce_sec: float = 0.05, refresh_sec: float = 2.0,
                 keepalive_sec: float = 15.0) -> None:
        self.source = source
        self.coalesce_sec = coalesce_sec
        self.refresh_sec = refresh_sec
        self.keepalive_sec = keepalive_sec
        self._streams: dict[asyncio.Task, asyncio.Queue[int]] = {}
        self._closing = False
        self._every_row: tuple[float, dict[int, dict[str, Any]]] | None = None

    # ---- documents ------------------------------------------------------------------------------

    def _row(self, runtime) -> dict[str, Any]:
        iid = runtime.instance_id
        waiting = [what for what, _, _ in self.source.waits(iid)]
        return fleet_row(runtime, self.source.evidence(iid), self.source.strategy(iid), waiting)

    def rows(self, wanted: Iterable[int] | None = None) -> dict[int, dict[str, Any]]:
        ids = None if wanted is None else set(wanted)
        return {r.instance_id: self._row(r) for r in self.source.runtimes() if ids is None or r.instance_id in ids}

    def every_row(self) -> dict[int, dict[str, Any]]:
        """Every row, shared by the streams for half a refresh: a fleet of 64 × 256 ranks costs the
        loop tens of ms, once per refresh however many consoles are open."""
        now = asyncio.get_running_loop().time()
        if self._every_row is None or now - self._every_row[0] >= self.refresh_sec / 2:
            self._every_row = (now, self.rows())
        return self._every_row[1]

    def hello(self) -> dict[str, Any]:
        return {"leadership": self.source.leadership(), "scale_down_enabled": self.source.scale_down_enabled,
                "server_unix_sec": self.source.wall()}

    def instance(self, instance_id: int) -> dict[str, Any] | None:
        """The instance page's document, or None for an unknown instance. The transactions are copied
        here, on the loop: a running round goes on adding to its own."""
        runtime = next((r for r in self.source.runtimes() if r.instance_id == instance_id), None)
        if runtime is None:
            return None
        evidence = self.source.evidence(instance_id)
        waits = self.source.waits(instance_id)
        copies = []
        for txn in self.source.transactions(instance_id):
            copy = type(txn.proto)()
            copy.CopyFrom(txn.proto)
            copies.append(copy)
        return {
            "row": fleet_row(runtime, evidence, self.source.strategy(instance_id), [w[0] for w in waits]),
            "runtime": message_json(runtime_proto(runtime)),  # as GET .../status renders it
            "evidence": [_evidence_doc(evidence[r]) for r in sorted(evidence)],
            "waits": [{"what": what, "until_unix_sec": until, "detail": detail}
                      for what, until, detail in waits],
            "transactions": [transaction_doc(t) for t in copies],
            "server_unix_sec": self.source.wall(),
        }

    # ---- the stream -----------------------------------------------------------------------------

    async def stream(self, request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache",
                                               "X-Accel-Buffering": "no"})
        await response.prepare(request)
        queue = self.source.subscribe()
        task = asyncio.current_task()
        if task is not None:
            self._streams[task] = queue
        try:
            await self._serve(response, queue)
            await response.write_eof()  # the server stops: the stream ends whole, the browser reconnects
        except ConnectionResetError:
            pass  # the browser went away: nothing to tell it
        finally:
            self.source.unsubscribe(queue)
            self._streams.pop(task, None)
        return response

    async def close(self, grace_sec: float = 2.0) -> None:
        """Ends every open stream: a server stopping must not wait for browsers to hang up. Each
        stream is woken and ends itself; one still writing after `grace_sec` is cancelled."""
        self._closing = True
        for queue in self._streams.values():
            if queue.full():
                queue.get_nowait()
            queue.put_nowait(0)  # a wake-up; the loop sees _closing first
        streams = list(self._streams)
        if streams:
            _, late = await asyncio.wait(streams, timeout=grace_sec)
            for task in late:
                task.cancel()
            await asyncio.gather(*late, return_exceptions=True)

    async def _serve(self, response: web.StreamResponse, queue: asyncio.Queue[int]) -> None:
        loop = asyncio.get_running_loop()
        # The browser's EventSource reconnects on its own after `retry` ms.
        hello = self.hello()
        await _send(response, "hello", hello, retry_ms=2000)
        sent = self.rows()  # fresh: what changed before this stream subscribed is in it
        self._every_row = (loop.time(), dict(sent))
        await _send(response, "fleet", {"rows": list(sent.values())})
        leadership = json.dumps(hello["leadership"], sort_keys=True)
        next_refresh = loop.time() + self.refresh_sec
        last_write = loop.time()
        while not self._closing:
            changed: set[int] = set()
            timeout = max(0.0, min(next_refresh, last_write + self.keepalive_sec) - loop.time())
            try:
                changed.add(await get_within(queue, timeout))
                await asyncio.sleep(self.coalesce_sec)
                while not queue.empty():
                    changed.add(queue.get_nowait())
            except asyncio.TimeoutError:
                pass
            if self._closing:
                return
            refresh = loop.time() >= next_refresh
            if refresh:
                next_refresh = loop.time() + self.refresh_sec
                now = self.source.leadership()
                if json.dumps(now, sort_keys=True) != leadership:
                    leadership = json.dumps(now, sort_keys=True)
                    await _send(response, "leadership", now)
                    last_write = loop.time()
            rows = self.every_row() if refresh else self.rows(changed)
            for iid, row in rows.items():
                if sent.get(iid) != row:
                    sent[iid] = row
                    await _send(response, "row", row)
                    last_write = loop.time()
            gone = [iid for iid in (sent if refresh else changed) if iid not in rows]
            for iid in gone:
                sent.pop(iid, None)
                await _send(response, "gone", {"instance_id": iid})
                last_write = loop.time()
            if loop.time() - last_write >= self.keepalive_sec:
                await response.write(b": keepalive\n\n")  # proxies close a silent stream
                last_write = loop.time()


async def _send(response: web.StreamResponse, event: str, data: Any, retry_ms: int | None = None) -> None:
    head = f"retry: {retry_ms}\n" if retry_ms is not None else ""
    await response.write(f"{head}event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode())
