"""The withdrawn-stream stall watch: a started stream whose endpoint left the serving view is moved
elsewhere only once it delivers nothing for ``stall_sec``.

A withdrawal is a drain: in-flight requests finish where they are. But a wedged engine (frozen, its
connection still open) would hold its streams forever, so each started stream of a withdrawn
endpoint gets a timer; a stream that made no progress for ``stall_sec`` has its engine response
closed, which fails the attempt's pending read with ``withdrawn`` set (re-inference then continues
it elsewhere).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import aiohttp

from motor.coordinator.routing import EndpointKey

log = logging.getLogger(__name__)


@dataclass
class WatchedStream:
    """One attempt's engine response, as the watch sees it."""

    resp: aiohttp.ClientResponse | None = None
    withdrawn: bool = False  # closed by the watch: why the attempt's read failed
    streaming: bool = False
    last_progress: float = 0.0  # loop time of the last chunk
    timer: asyncio.TimerHandle | None = None


class StallWatch:
    """Add ``on_withdrawn`` as a withdrawal listener of the routing table."""

    def __init__(self, stall_sec: float) -> None:
        self.stall_sec = stall_sec
        self._by_key: dict[EndpointKey, set[int]] = {}
        self._by_id: dict[int, WatchedStream] = {}

    def on_withdrawn(self, keys: frozenset[EndpointKey]) -> None:
        for key in keys:
            streams = [self._by_id[i] for i in self._by_key.get(key, ()) if self._by_id[i].streaming]
            for watched in streams:
                if watched.timer is None:
                    watched.timer = asyncio.get_running_loop().call_later(self.stall_sec, self._check, watched)
            if streams:
                log.info("instance=%d rank=%d left the serving view with %d streams in flight: each moves if it "
                         "delivers nothing for %gs", key[0], key[1], len(streams), self.stall_sec)

    def _check(self, watched: WatchedStream) -> None:
        if id(watched) not in self._by_id:
            return  # the attempt ended
        loop = asyncio.get_running_loop()
        idle = loop.time() - watched.last_progress
        if idle < self.stall_sec:
            watched.timer = loop.call_later(self.stall_sec - idle, self._check, watched)
            return
        watched.withdrawn = True
        if watched.resp is not None:
            watched.resp.close()  # wakes the attempt's pending read

    @contextmanager
    def watch(self, key: EndpointKey) -> Iterator[WatchedStream]:
        """Watched for the duration of one attempt on ``key``."""
        watched = WatchedStream()
        self._by_id[id(watched)] = watched
        self._by_key.setdefault(key, set()).add(id(watched))
        try:
            yield watched
        finally:
            if watched.timer is not None:
                watched.timer.cancel()
            self._by_id.pop(id(watched), None)
            ids = self._by_key.get(key)
            if ids is not None:
                ids.discard(id(watched))
                if not ids:
                    del self._by_key[key]
