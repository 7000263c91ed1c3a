"""The interface every serving publisher implements, and the health it reports.

A publisher receives the projected serving view (`motor.controller.serving.project_serving_view`)
and answers only once its peer applied it; PublishError (motor.controller.serving) otherwise.
Each one reports its peer's health (`PublisherHealth`, on the status page)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Protocol

from gen.motor.v1 import common_pb2
from motor.controller.serving import PublisherHealth


class ServingPublisher(Protocol):
    """One peer the serving view is published to. Every method is bounded by the publisher's deadlines."""

    health: PublisherHealth

    @property
    def enabled(self) -> bool: ...

    @property
    def target(self) -> str: ...

    async def add(self, view: common_pb2.Instance) -> None:
        """Publishes (or replaces) one instance's serving view."""

    async def drain(self, topology: common_pb2.Instance) -> tuple[int, ...] | None:
        """Withdraws what this peer routes to of the instance; the ids withdrawn (None: nothing was)."""

    async def pause(self, topology: common_pb2.Instance) -> bool:
        """No new request to the instance, its in-flight ones go on (a restoration lets them finish);
        False when this peer routes nothing of it."""

    async def set_all(self, compute_views: Callable[[], Iterable[common_pb2.Instance]]) -> list[int]:
        """Replaces everything the peer routes to with exactly these views; their instance ids."""

    async def learn(self) -> dict[int, tuple[int, ...]]:
        """Reads what the peer routes to now (a new leader), by instance id where the peer knows it."""

    def forget(self) -> None:
        """Forgets what was acknowledged (a new leadership term)."""

    async def reconcile_loop(self) -> None:
        """Repairs drift until cancelled (a no-op for a peer that needs none)."""

    async def close(self) -> None: ...
