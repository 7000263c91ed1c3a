"""ServingOverlay (one projection of every publication) and EventPusher (the Coordinator's serving
publisher; `motor.controller.publishers` holds the others and the fan-out to all of them).

Every view sent to the Coordinator, whether the ADD after a successful round, the READY of a newly
assembled instance, a RESUME or the periodic SET, goes through `project_serving_view`, which leaves
out dead_committed and pending ranks (and headless ones, which have no API). DEL drains exactly the
view currently published, so a later round never asks to remove ranks the Coordinator no longer has.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from gen.motor.v1 import common_pb2, coordinator_pb2
from motor.controller.clients import CoordinatorClient, PeerCallError
from motor.controller.model.runtime import FtRuntime, serving_ranks

log = logging.getLogger(__name__)


def project_serving_view(topology: common_pb2.Instance, runtime: FtRuntime) -> common_pb2.Instance:
    """The instance as the Coordinator may route to it: serving, routable endpoints only."""
    serving = set(serving_ranks(runtime.original_dp_ranks, runtime.dead_committed, runtime.pending_removed_ranks))
    view = common_pb2.Instance()
    view.CopyFrom(topology)
    del view.endpoints[:]
    view.endpoints.extend(e for e in sorted(topology.endpoints, key=lambda e: e.id) if e.id in serving and not e.headless)
    return view


class PublishError(RuntimeError):
    pass


@dataclass
class PublisherHealth:
    """What a publisher last saw of its peer: shown on the status page and in the metrics."""

    name: str
    kind: str
    target: str
    required: bool = True
    up: bool | None = None  # None: not called yet
    last_error: str | None = None
    last_ok_unix_sec: float = 0.0
    consecutive_failures: int = 0
    repairs: int = 0

    def ok(self, now_unix_sec: float) -> None:
        self.up, self.last_error, self.last_ok_unix_sec, self.consecutive_failures = True, None, now_unix_sec, 0

    def failed(self, error: str) -> None:
        self.up, self.last_error = False, error
        self.consecutive_failures += 1

    def as_json(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "target": self.target, "required": self.required,
                "up": self.up, "last_error": self.last_error, "last_ok_unix_sec": self.last_ok_unix_sec,
                "consecutive_failures": self.consecutive_failures, "repairs": self.repairs}


class EventPusher:
    """Serialised publication with a revision that only grows (wall-clock microseconds, so a
    restarted Controller still outruns what the Coordinator acknowledged before)."""

    def __init__(self, client: CoordinatorClient | None, wall_clock: Callable[[], float] = time.time,
                 on_refresh: Callable[[str, bool], None] = lambda event, ok: None) -> None:
        self._client = client
        self._clock = wall_clock
        # (event name, answered ok) of every Refresh sent: the Controller's publication metrics.
        self._on_refresh = on_refresh
        self._lock = asyncio.Lock()
        self._revision = 0
        # What the Coordinator acknowledged, by instance id → endpoint ids.
        self._published: dict[int, tuple[int, ...]] = {}
        # Whether `_published` is all the Coordinator routes to (this process read it or replaced it
        # with a SET); until then an instance missing from it may still be routed to.
        self._view_known = False
        self.health = PublisherHealth("coordinator", "coordinator", client.address if client else "")

    kind = "coordinator"

    @property
    def enabled(self) -> bool:
        return self._client is not None

    @property
    def target(self) -> str:
        return self._client.address if self._client else ""

    @property
    def coordinator(self) -> CoordinatorClient | None:
        """The Coordinator's client, for the calls that are not publications (reads, the idle probe)."""
        return self._client

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()

    async def reconcile_loop(self) -> None:
        """Nothing to repair here: the Controller's periodic SET converges the Coordinator."""

    def forget(self) -> None:
        """Forgets what was acknowledged (a new leadership term knows nothing published until it reads
        the Coordinator's view or sends its SET)."""
        self._published.clear()
        self._view_known = False

    async def learn(self) -> dict[int, tuple[int, ...]]:
        """Takes what the Coordinator routes to now as published (a new leader, so that its first drain
        withdraws exactly that view), and its revision as the floor of the next ones (the previous
        leader's clock may have been ahead of this one's); PublishError when the Coordinator does not
        answer."""
        if self._client is None:
            return {}
        async with self._lock:
            await self._learn_locked()
            return dict(self._published)

    async def _learn_locked(self) -> None:
        assert self._client is not None
        try:
            resp = await self._client.list_instances()
        except PeerCallError as exc:
            raise PublishError(str(exc)) from None
        self._published = {p.instance.id: tuple(sorted(e.id for e in p.instance.endpoints))
                           for p in resp.instances}
        self._revision = max(self._revision, resp.revision)
        self._view_known = True

    def _next_revision(self) -> int:
        self._revision = max(self._revision + 1, int(self._clock() * 1_000_000))
        return self._revision

    async def _refresh(self, event: int, views: list[common_pb2.Instance]) -> None:
        if self._client is None:
            return
        name = coordinator_pb2.RefreshEvent.Name(event).removeprefix("REFRESH_EVENT_")
        try:
            await self._client.refresh(event, views, self._next_revision())
        except PeerCallError as exc:
            self._on_refresh(name, False)
            self.health.failed(str(exc))
            raise PublishError(str(exc)) from None
        self._on_refresh(name, True)
        self.health.ok(self._clock())

    async def add(self, view: common_pb2.Instance) -> None:
        """Publishes (or replaces) one instance's serving view."""
        async with self._lock:
            if not view.endpoints:
                raise PublishError(f"instance {view.id}: serving view has no routable endpoint")
            await self._refresh(coordinator_pb2.REFRESH_EVENT_ADD, [view])
            self._published[view.id] = tuple(e.id for e in view.endpoints)
            log.info("instance=%d published endpoints %s", view.id, list(self._published[view.id]))

    async def drain(self, topology: common_pb2.Instance) -> tuple[int, ...] | None:
        """DEL of exactly the currently published view; returns the ids drained (None: nothing was).
        Unsure of what the Coordinator routes to (its view could not be read since this process
        started or took over), it reads that view first rather than draining nothing."""
        async with self._lock:
            ids = self._published.get(topology.id)
            if ids is None and not self._view_known and self._client is not None:
                await self._learn_locked()
                ids = self._published.get(topology.id)
            if ids is None:
                return None
            view = common_pb2.Instance()
            view.CopyFrom(topology)
            del view.endpoints[:]
            view.endpoints.extend(e for e in topology.endpoints if e.id in ids)
            await self._refresh(coordinator_pb2.REFRESH_EVENT_DEL, [view])
            del self._published[topology.id]
            log.info("instance=%d drained endpoints %s", topology.id, list(ids))
            return ids

    async def pause(self, topology: common_pb2.Instance) -> bool:
        """PAUSE of a published instance: the Coordinator sends it no new request and keeps counting
        its in-flight ones. False when nothing is published for it (nothing to pause)."""
        async with self._lock:
            ids = self._published.get(topology.id)
            if ids is None:
                return False
            view = common_pb2.Instance()
            view.CopyFrom(topology)
            del view.endpoints[:]
            view.endpoints.extend(e for e in topology.endpoints if e.id in ids)
            await self._refresh(coordinator_pb2.REFRESH_EVENT_PAUSE, [view])
            log.info("instance=%d paused", topology.id)
            return True

    async def set_all(self, compute_views: Callable[[], Iterable[common_pb2.Instance]]) -> list[int]:
        """Replaces everything the Coordinator routes to with exactly the views computed under the
        publication lock (so no drain can slip between computing and sending); returns their ids."""
        async with self._lock:
            listed = [v for v in compute_views() if v.endpoints]
            await self._refresh(coordinator_pb2.REFRESH_EVENT_SET, listed)
            self._published = {v.id: tuple(e.id for e in v.endpoints) for v in listed}
            self._view_known = True
            return [v.id for v in listed]
