"""The Coordinator's routing table: what is published, what may take traffic, and where the next
request goes. Pure: no I/O, no clock of its own (callers pass monotonic ``now``), no protobuf.

Publication (``refresh``) follows the Coordinator contract (protos/motor/v1/coordinator.proto):

* ADD publishes each given instance, replacing the view of an instance already published (its
  paused flag is kept). An instance with zero endpoints is refused.
* DEL withdraws each given instance; each must equal what is published (same instance id and
  exactly the same endpoint id set), else FAILED_PRECONDITION naming the instance and both id sets.
* SET replaces the whole published set (instances not listed are withdrawn; paused flags of
  instances that stay are kept).
* PAUSE / RESUME toggle routing of published instances; an unknown instance is NOT_FOUND.
* The revision must be greater than the last acknowledged one, else FAILED_PRECONDITION.

A refused refresh changes nothing (all-or-nothing across the request) and does not consume its
revision. Validation failures (`motor.coordinator.serving_view`, checked before the revision) are
INVALID_ARGUMENT and name the offending value.

An endpoint with an ``instance_route`` is reached through its instance's one inference endpoint with
its rank pinned (``Route.pinned_rank``); it is chosen, counted and cooled down as its own rank.

Selection (``pick``): among published, not-paused instances serving the requested model, the
routable endpoints (not headless, not excluded for this request, not cooling down after a recent
failure) are ordered by (outstanding requests, original DP rank); remaining ties rotate round robin
across instances. A retry names the instances that already failed it: their endpoints come last.
Outstanding requests are counted per (instance id, original rank) and survive withdrawal and
re-publication, so in-flight requests to a withdrawn endpoint are released normally.

No route is UNKNOWN_MODEL (HTTP 404) only when instances are published but none serves the model
and none ever did since start; a model withdrawn for a while (the drain of a scale-down), paused
instances, nothing published at all, or every endpoint busy failing are UNAVAILABLE (HTTP 503).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any

from motor.coordinator.serving_view import (
    EndpointSpec,
    InstanceSpec,
    RefreshError,
    RefreshErrorCode,
    RefreshEvent,
    format_ids,
    validate_refresh,
)

EndpointKey = tuple[int, int]
"""(instance id, original DP rank): the identity of one routable endpoint."""


@dataclass(frozen=True)
class Route:
    """One chosen endpoint for one attempt of one request. ``pinned_rank``: set when ip:port is the
    instance's one inference endpoint, which must be told the rank (``routed_dp_rank``)."""

    instance_id: int
    rank: int
    ip: str
    port: int
    model: str
    pinned_rank: int | None = None

    @classmethod
    def of(cls, instance_id: int, ep: EndpointSpec, model: str) -> Route:
        if ep.instance_route is not None:
            return cls(instance_id, ep.id, ep.instance_route.host, ep.instance_route.port, model, pinned_rank=ep.id)
        return cls(instance_id, ep.id, ep.ip, ep.business_port, model)

    @property
    def key(self) -> EndpointKey:
        return (self.instance_id, self.rank)

    @property
    def label(self) -> str:
        """``<instance_id>/<rank>``: the X-Motor-Endpoint header value."""
        return f"{self.instance_id}/{self.rank}"


class NoRouteKind(str, enum.Enum):
    UNKNOWN_MODEL = "UNKNOWN_MODEL"  # no published instance serves the model (HTTP 404)
    UNAVAILABLE = "UNAVAILABLE"  # published, but nothing can take the request now (HTTP 503)


@dataclass(frozen=True)
class NoRoute:
    kind: NoRouteKind
    message: str


@dataclass(frozen=True)
class EndpointState:
    spec: EndpointSpec
    outstanding: int
    cooling_down: bool


@dataclass(frozen=True)
class PublishedView:
    spec: InstanceSpec
    paused: bool
    endpoints: tuple[EndpointState, ...]

    @property
    def outstanding(self) -> dict[int, int]:
        return {e.spec.id: e.outstanding for e in self.endpoints}


@dataclass(frozen=True)
class TableSnapshot:
    revision: int
    instances: tuple[PublishedView, ...]


class RoutingTable:
    """Published serving views, pause flags, revision, endpoint selection and outstanding counts."""

    def __init__(self, cooldown_sec: float = 2.0) -> None:
        if cooldown_sec < 0:
            raise ValueError(f"cooldown_sec={cooldown_sec!r} must be >= 0")
        self.cooldown_sec = cooldown_sec
        self._revision = 0
        self._instances: dict[int, InstanceSpec] = {}
        self._paused: set[int] = set()
        self._outstanding: dict[EndpointKey, int] = {}
        self._cooling_until: dict[EndpointKey, float] = {}
        self._last_pick: EndpointKey | None = None
        # Every model published since start: one withdrawn for a while (a drain) is 503, not 404.
        self._known_models: set[str] = set()
        # Told (synchronously, after an accepted refresh) which endpoints left the published view.
        self._withdrawal_listeners: list[Callable[[frozenset[EndpointKey]], None]] = []

    # -- publication ----------------------------------------------------------------------
    @property
    def revision(self) -> int:
        return self._revision

    def refresh(self, event: RefreshEvent | Any, instances: Sequence[InstanceSpec], revision: int) -> int:
        """Applies one publication event all-or-nothing; returns the revision now acknowledged."""
        validate_refresh(event, instances)
        if revision <= self._revision:
            raise RefreshError(
                RefreshErrorCode.FAILED_PRECONDITION,
                f"revision {revision} is not greater than the last acknowledged revision {self._revision}",
            )
        if event is RefreshEvent.DEL:
            mismatches = []
            for inst in instances:
                current = self._instances.get(inst.id)
                if current is None:
                    mismatches.append(f"instance {inst.id} with endpoint ids "
                                      f"{format_ids(e.id for e in inst.endpoints)} is not published")
                elif set(current.endpoint_ids) != {e.id for e in inst.endpoints}:
                    mismatches.append(
                        f"instance {inst.id}: endpoint ids {format_ids(e.id for e in inst.endpoints)} do not match "
                        f"the published endpoint ids {format_ids(current.endpoint_ids)}"
                    )
            if mismatches:
                raise RefreshError(RefreshErrorCode.FAILED_PRECONDITION, "DEL refused: " + "; ".join(mismatches))
        elif event in (RefreshEvent.PAUSE, RefreshEvent.RESUME):
            unknown = [inst.id for inst in instances if inst.id not in self._instances]
            if unknown:
                raise RefreshError(
                    RefreshErrorCode.NOT_FOUND,
                    f"{event.value} refused: instance(s) {format_ids(unknown)} not published "
                    f"(published: {format_ids(self._instances)})",
                )
        # Every check passed: apply.
        before = self._published_keys()
        if event in (RefreshEvent.ADD, RefreshEvent.SET):
            self._known_models.update(inst.model for inst in instances)
        if event is RefreshEvent.ADD:
            for inst in instances:
                self._instances[inst.id] = inst
        elif event is RefreshEvent.SET:
            self._instances = {inst.id: inst for inst in instances}
            self._paused &= set(self._instances)
        elif event is RefreshEvent.DEL:
            for inst in instances:
                del self._instances[inst.id]
                self._paused.discard(inst.id)
        elif event is RefreshEvent.PAUSE:
            self._paused.update(inst.id for inst in instances)
        else:
            self._paused.difference_update(inst.id for inst in instances)
        self._forget_unpublished_cooldowns()
        self._revision = revision
        withdrawn = frozenset(before - self._published_keys())
        if withdrawn:
            for listener in self._withdrawal_listeners:
                listener(withdrawn)
        return revision

    def add_withdrawal_listener(self, listener: Callable[[frozenset[EndpointKey]], None]) -> None:
        """``listener(keys)`` runs after every accepted refresh that withdrew endpoints (DEL, SET, or an
        ADD with fewer endpoints); it must not raise."""
        self._withdrawal_listeners.append(listener)

    def _published_keys(self) -> set[EndpointKey]:
        return {(inst.id, ep.id) for inst in self._instances.values() for ep in inst.endpoints}

    def _forget_unpublished_cooldowns(self) -> None:
        published = self._published_keys()
        for key in [k for k in self._cooling_until if k not in published]:
            del self._cooling_until[key]

    # -- queries --------------------------------------------------------------------------
    def is_published(self, instance_id: int) -> bool:
        return instance_id in self._instances

    def is_paused(self, instance_id: int) -> bool:
        return instance_id in self._paused

    def models(self) -> list[str]:
        """Models of every published instance (paused ones included), sorted, without blanks."""
        return sorted({inst.model for inst in self._instances.values() if inst.model})

    def route_to(self, instance_id: int, rank: int) -> Route | None:
        """A route to one published, non-headless endpoint (paused or cooling down included), or None."""
        inst = self._instances.get(instance_id)
        ep = next((e for e in inst.endpoints if e.id == rank), None) if inst is not None else None
        if ep is None or ep.headless:
            return None
        return Route.of(instance_id, ep, inst.model)

    def outstanding(self, key: EndpointKey) -> int:
        return self._outstanding.get(key, 0)

    def total_outstanding(self) -> int:
        return sum(self._outstanding.values())

    def cooling_down(self, key: EndpointKey, now: float) -> bool:
        until = self._cooling_until.get(key)
        return until is not None and now < until

    def snapshot(self, now: float) -> TableSnapshot:
        views = []
        for inst_id in sorted(self._instances):
            inst = self._instances[inst_id]
            endpoints = tuple(
                EndpointState(ep, self.outstanding((inst_id, ep.id)), self.cooling_down((inst_id, ep.id), now))
                for ep in sorted(inst.endpoints, key=lambda e: e.id)
            )
            views.append(PublishedView(inst, inst_id in self._paused, endpoints))
        return TableSnapshot(self._revision, tuple(views))

    # -- selection and accounting ----------------------------------------------------------
    def select(
        self, model: str | None, now: float, exclude: Collection[EndpointKey] = (), avoid_instances: Collection[int] = ()
    ) -> Route | NoRoute:
        """The endpoint the next attempt should use, or why there is none. Does not count it.

        ``exclude``: endpoints never to use (already tried by this request). ``avoid_instances``:
        instances to use only when no other one can serve (a retry after a failure: the ranks of
        one DP group step in lockstep, so a peer of a failed rank is the likeliest to fail next).
        """
        if not self._instances:
            return NoRoute(NoRouteKind.UNAVAILABLE, "no instance is published")
        instances = [i for i in self._instances.values() if model is None or i.model == model]
        if not instances:
            if model in self._known_models:
                return NoRoute(NoRouteKind.UNAVAILABLE, f"no instance serving model `{model}` is published now")
            return NoRoute(NoRouteKind.UNKNOWN_MODEL, f"The model `{model}` does not exist.")
        active = [i for i in instances if i.id not in self._paused]
        what = "any model" if model is None else f"model `{model}`"
        if not active:
            return NoRoute(
                NoRouteKind.UNAVAILABLE,
                f"every instance serving {what} is paused (instances {format_ids(i.id for i in instances)})",
            )
        candidates: list[tuple[bool, int, int, int, EndpointSpec, InstanceSpec]] = []
        tried = cooling = headless = 0
        for inst in active:
            for ep in inst.endpoints:
                key = (inst.id, ep.id)
                if ep.headless:
                    headless += 1
                elif key in exclude:
                    tried += 1
                elif self.cooling_down(key, now):
                    cooling += 1
                else:
                    candidates.append((inst.id in avoid_instances, self.outstanding(key), ep.id, inst.id, ep, inst))
        if not candidates:
            reasons = []
            if tried:
                reasons.append(f"{tried} already tried for this request")
            if cooling:
                reasons.append(f"{cooling} cooling down after a failure")
            if headless:
                reasons.append(f"{headless} headless")
            return NoRoute(
                NoRouteKind.UNAVAILABLE,
                f"no endpoint of the instances serving {what} can take the request now "
                f"({', '.join(reasons) or 'none routable'})",
            )
        best = min(c[:3] for c in candidates)
        tied = sorted((c for c in candidates if c[:3] == best), key=lambda c: c[3])
        chosen = tied[0]
        if len(tied) > 1 and self._last_pick is not None:
            after = [c for c in tied if (c[3], c[2]) > self._last_pick]
            if after:
                chosen = after[0]
        _, _, _, inst_id, ep, inst = chosen
        return Route.of(inst_id, ep, inst.model)

    def acquire(self, route: Route) -> None:
        self._outstanding[route.key] = self._outstanding.get(route.key, 0) + 1
        self._last_pick = route.key

    def release(self, route: Route) -> None:
        count = self._outstanding.get(route.key, 0) - 1
        if count > 0:
            self._outstanding[route.key] = count
        else:
            self._outstanding.pop(route.key, None)

    def pick(
        self, model: str | None, now: float, exclude: Collection[EndpointKey] = (), avoid_instances: Collection[int] = ()
    ) -> Route | NoRoute:
        """``select`` and, when it found an endpoint, count the request against it."""
        choice = self.select(model, now, exclude, avoid_instances)
        if isinstance(choice, Route):
            self.acquire(choice)
        return choice

    def mark_failed(self, key: EndpointKey, now: float) -> None:
        """The endpoint failed a request before its first byte: skip it for ``cooldown_sec``."""
        if self.cooldown_sec <= 0:
            return
        inst = self._instances.get(key[0])
        if inst is None or all(ep.id != key[1] for ep in inst.endpoints):
            return  # withdrawn meanwhile: nothing to cool down
        self._cooling_until[key] = max(self._cooling_until.get(key, now), now + self.cooldown_sec)
