"""vllm-router as a serving publisher: the router's membership kept equal to Motor's serving view.

A worker is one DP rank's OpenAI server, `http://ip:business_port`; the router's calls go through
`motor.controller.router_client`. The router's list lives in its memory only: a restarted router
starts with what its command line names (nothing, the way Motor runs it), which the reconcile loop
repairs. Its own health checks and circuit breaker keep running; they are a second, slower detector
that Motor's view overrides (a worker Motor removed is never re-added by the router, one Motor
publishes is added back by the reconcile)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable

from gen.motor.v1 import common_pb2
from motor.controller.router_client import RouterCallError, VllmRouterClient
from motor.controller.serving import PublisherHealth, PublishError

log = logging.getLogger(__name__)


def worker_url(endpoint: common_pb2.Endpoint) -> str:
    host = f"[{endpoint.ip}]" if ":" in endpoint.ip else endpoint.ip
    return f"http://{host}:{endpoint.business_port}"


class VllmRouterPublisher:
    """The router's membership follows the serving view: ADD adds the view's workers (and removes the
    instance's others), DEL removes every worker of the instance it routes to, SET replaces the whole
    list (a worker nobody published is removed), and the reconcile loop puts back what a restarted
    router lost and takes out what was added by hand. Motor owns the list: the router's command line
    names no workers."""

    kind = "vllm_router"

    def __init__(self, client: VllmRouterClient, wall_clock: Callable[[], float] = time.time,
                 on_repair: Callable[[str, int], None] = lambda action, n: None) -> None:
        self._client = client
        self._interval_sec = client.config.reconcile_interval_sec
        required = client.config.required
        self._clock = wall_clock
        self._on_repair = on_repair
        self._lock = asyncio.Lock()
        # What the router acknowledged, by instance id → endpoint id → worker URL.
        self._published: dict[int, dict[int, str]] = {}
        # Workers the router listed that no publication of this term accounts for (a previous leader's).
        self._unowned: set[str] = set()
        # Workers a drain meant to remove but the router did not take: withdrawn all the same, so the
        # reconcile removes them once the router answers (never puts a drained rank back).
        self._withdrawn: set[str] = set()
        # True once a SET replaced the router's whole list in this term: only then is a worker no
        # publication accounts for drift to remove, not a previous leader's publication to drain.
        self._authoritative = False
        self.health = PublisherHealth(f"vllm_router:{client.address}", self.kind, client.address, required)

    @property
    def enabled(self) -> bool:
        return True

    @property
    def target(self) -> str:
        return self._client.address

    @property
    def required(self) -> bool:
        return self.health.required

    def routed(self) -> set[str]:
        """The worker URLs this publisher last had the router acknowledge."""
        return {url for workers in self._published.values() for url in workers.values()}

    async def _guarded(self, make):
        try:
            result = await make()
        except RouterCallError as exc:
            self.health.failed(str(exc))
            raise PublishError(str(exc)) from None
        self.health.ok(self._clock())
        return result

    async def add(self, view: common_pb2.Instance) -> None:
        async with self._lock:
            desired = {e.id: worker_url(e) for e in view.endpoints}
            stale = set(self._published.get(view.id, {}).values()) - set(desired.values())

            async def apply() -> None:
                for url in sorted(stale):
                    await self._client.remove_worker(url)
                for url in sorted(set(desired.values())):
                    await self._client.add_worker(url)

            self._withdrawn -= set(desired.values())
            await self._guarded(apply)
            self._published[view.id] = desired
            self._unowned -= set(desired.values())
            log.info("instance=%d vllm-router %s routes to endpoints %s", view.id, self.target, sorted(desired))

    async def drain(self, topology: common_pb2.Instance) -> tuple[int, ...] | None:
        async with self._lock:
            entry = self._published.get(topology.id)
            if entry is None:
                if not self._authoritative and not self._unowned:
                    self._unowned = await self._guarded(self._client.list_workers)
                entry = {e.id: worker_url(e) for e in topology.endpoints if worker_url(e) in self._unowned}
                if not entry:
                    return None

            async def remove() -> None:
                for url in sorted(set(entry.values())):
                    await self._client.remove_worker(url)

            # Withdrawn whether or not the router takes it: what it still lists goes at the next reconcile.
            self._published.pop(topology.id, None)
            self._unowned -= set(entry.values())
            self._withdrawn |= set(entry.values())
            await self._guarded(remove)
            self._withdrawn -= set(entry.values())
            log.info("instance=%d vllm-router %s no longer routes to endpoints %s", topology.id, self.target,
                     sorted(entry))
            return tuple(sorted(entry))

    async def pause(self, topology: common_pb2.Instance) -> bool:
        """The router holds nothing: its workers are withdrawn, and the requests they run go on."""
        return await self.drain(topology) is not None

    async def set_all(self, compute_views: Callable[[], Iterable[common_pb2.Instance]]) -> list[int]:
        async with self._lock:
            views = [v for v in compute_views() if v.endpoints]
            desired = {v.id: {e.id: worker_url(e) for e in v.endpoints} for v in views}
            wanted = {url for workers in desired.values() for url in workers.values()}

            async def replace() -> None:
                listed = await self._client.list_workers()
                await self._converge(listed, wanted, remove_extra=True)

            await self._guarded(replace)
            self._published, self._unowned, self._withdrawn, self._authoritative = desired, set(), set(), True
            return [v.id for v in views]

    async def learn(self) -> dict[int, tuple[int, ...]]:
        """The router does not know instances: what it lists is kept as workers a first drain withdraws."""
        async with self._lock:
            self._unowned = await self._guarded(self._client.list_workers)
            return {}

    def forget(self) -> None:
        self._published.clear()
        self._unowned.clear()
        self._withdrawn.clear()
        self._authoritative = False

    async def _converge(self, listed: set[str], wanted: set[str], remove_extra: bool) -> tuple[int, int]:
        removed = sorted(listed - wanted) if remove_extra else sorted(listed & self._withdrawn)
        added = sorted(wanted - listed)
        for url in removed:
            await self._client.remove_worker(url)
        for url in added:
            await self._client.add_worker(url)
        return len(added), len(removed)

    async def reconcile(self) -> tuple[int, int]:
        """One pass: the router's list back to what was last acknowledged; (added, removed)."""
        async with self._lock:
            wanted = self.routed()

            async def repair() -> tuple[int, int]:
                listed = await self._client.list_workers()
                return await self._converge(listed, wanted, remove_extra=self._authoritative)

            added, removed = await self._guarded(repair)
            self._withdrawn.clear()
        if added or removed:
            self.health.repairs += added + removed
            self._on_repair("added", added)
            self._on_repair("removed", removed)
            log.warning("vllm-router %s had drifted from the serving view: %d workers re-added, %d removed",
                        self.target, added, removed)
        return added, removed

    async def reconcile_loop(self) -> None:
        """Until cancelled: one bounded reconcile pass every reconcile_interval_sec (failures reported in
        the health, logged once per outage, and retried at the next pass)."""
        while True:
            await asyncio.sleep(self._interval_sec)
            was_up = self.health.up
            try:
                await self.reconcile()
            except PublishError as exc:
                if was_up is not False:
                    log.warning("vllm-router %s unreachable (retried every %gs): %s", self.target,
                                self._interval_sec, exc)
                continue
            if was_up is False:
                log.info("vllm-router %s answers again", self.target)

    async def close(self) -> None:
        await self._client.close()
