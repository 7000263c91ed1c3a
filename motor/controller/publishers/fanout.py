"""The publication every strategy, registration and periodic SET goes through: each call goes to
every publisher at once, and the acknowledgement rule that drives `serving_published` (so
`can_serve`) is: acknowledged only when every required publisher acknowledged.

A failed required publisher makes the call fail (PublishError naming each failure) after every
publisher was called, so one router that is down never keeps the others from the new view. A
publisher that is not required is called the same way; its failures are only logged and reported
in its health."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from gen.motor.v1 import common_pb2
from motor.controller.clients import ControllerPeers, CoordinatorClient
from motor.controller.publishers.base import ServingPublisher
from motor.controller.publishers.vllm_router import VllmRouterPublisher
from motor.controller.serving import EventPusher, PublishError

log = logging.getLogger(__name__)


class Publication:
    """The publishers behind one interface (the one `EventPusher` had alone)."""

    def __init__(self, publishers: Sequence[ServingPublisher]) -> None:
        self.publishers = [p for p in publishers if p.enabled]
        # One publication at a time across every publisher: a SET's views are computed once, under
        # this lock, so no drain slips between computing and sending to any of them.
        self._lock = asyncio.Lock()
        self._background: list[asyncio.Task[None]] = []

    @classmethod
    def from_peers(cls, peers: ControllerPeers, wall_clock: Callable[[], float],
                   on_refresh: Callable[[str, bool], None] = lambda event, ok: None,
                   on_call: Callable[[str, str, bool], None] = lambda publisher, call, ok: None,
                   on_repair: Callable[[str, str, int], None] = lambda publisher, action, n: None) -> Publication:
        """The Coordinator's publisher (when it has a client) and one per vllm-router client; the
        callbacks feed the metrics (per Refresh event; per publisher and router call; per repair)."""
        publishers: list[ServingPublisher] = []
        if peers.coordinator is not None:
            publishers.append(EventPusher(peers.coordinator, wall_clock, on_refresh))
        for client in peers.routers:
            name = f"vllm_router:{client.address}"
            client.on_call = lambda call, ok, name=name: on_call(name, call, ok)
            publishers.append(VllmRouterPublisher(client, wall_clock,
                                                  lambda action, n, name=name: on_repair(name, action, n)))
        return cls(publishers)

    @property
    def enabled(self) -> bool:
        return bool(self.publishers)

    @property
    def target(self) -> str:
        return ",".join(p.target for p in self.publishers)

    @property
    def coordinator_publisher(self) -> EventPusher | None:
        return next((p for p in self.publishers if isinstance(p, EventPusher)), None)

    @property
    def coordinator(self) -> CoordinatorClient | None:
        """The Coordinator's client when it is a publisher (reads, the idle probe, re-inference counts)."""
        pusher = self.coordinator_publisher
        return pusher.coordinator if pusher is not None else None

    def health(self) -> list[dict[str, Any]]:
        return [p.health.as_json() for p in self.publishers]

    async def _each(self, call: str, make: Callable[[ServingPublisher], Any]) -> list[Any]:
        """Calls every publisher at once; PublishError when a required one failed (after all ran)."""
        results = await asyncio.gather(*(make(p) for p in self.publishers), return_exceptions=True)
        failed = []
        for publisher, result in zip(self.publishers, results):
            if isinstance(result, BaseException) and not isinstance(result, PublishError):
                raise result
            if isinstance(result, PublishError):
                if publisher.health.required:
                    failed.append(f"{publisher.health.name}: {result}")
                else:
                    log.warning("%s to %s (not required) failed: %s", call, publisher.health.name, result)
        if failed:
            raise PublishError("; ".join(failed))
        return list(results)

    async def add(self, view: common_pb2.Instance) -> None:
        async with self._lock:
            if not view.endpoints:
                raise PublishError(f"instance {view.id}: serving view has no routable endpoint")
            await self._each("ADD", lambda p: p.add(view))

    async def drain(self, topology: common_pb2.Instance) -> tuple[int, ...] | None:
        """The ids withdrawn: the first publisher's that routed the instance (None: none did)."""
        async with self._lock:
            results = await self._each("DEL", lambda p: p.drain(topology))
            return next((r for r in results if isinstance(r, tuple)), None)

    async def pause(self, topology: common_pb2.Instance) -> bool:
        """Whether any publisher routed the instance (and now sends it no new request)."""
        async with self._lock:
            return any(r is True for r in await self._each("PAUSE", lambda p: p.pause(topology)))

    async def set_all(self, compute_views: Callable[[], Iterable[common_pb2.Instance]]) -> list[int]:
        async with self._lock:
            views = [v for v in compute_views() if v.endpoints]
            await self._each("SET", lambda p: p.set_all(lambda: views))
            return [v.id for v in views]

    async def learn(self, deadline_sec: float | None = None) -> dict[int, tuple[int, ...]]:
        """What the publishers route to, by instance (merged; a router knows no instances), each read
        bounded by `deadline_sec` on its own (a router that is down never cuts the Coordinator's short)."""

        async def read(publisher: ServingPublisher) -> dict[int, tuple[int, ...]]:
            try:
                return await asyncio.wait_for(publisher.learn(), deadline_sec)
            except TimeoutError:
                raise PublishError(f"reading {publisher.health.name} timed out after {deadline_sec:g}s") from None

        async with self._lock:
            learned: dict[int, tuple[int, ...]] = {}
            for result in await self._each("read", read):
                if isinstance(result, dict):
                    for iid, ids in result.items():
                        learned.setdefault(iid, ids)
            return learned

    def forget(self) -> None:
        for publisher in self.publishers:
            publisher.forget()

    def start(self) -> None:
        """The publishers' reconcile loops (while this replica acts)."""
        if not self._background:
            self._background = [asyncio.create_task(p.reconcile_loop(), name=f"reconcile-{p.health.name}")
                                for p in self.publishers]

    async def stop(self) -> None:
        tasks, self._background = self._background, []
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def close(self) -> None:
        await self.stop()
        for publisher in self.publishers:
            await publisher.close()
