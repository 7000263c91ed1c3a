"""What the Controller publishes to the Coordinator, as the routing table takes it (no protobuf):
instance and endpoint views, the refresh events, the error a refused refresh raises, and the checks
that need no table state (a malformed refresh is INVALID_ARGUMENT naming the offending value,
before its revision or the published state are looked at).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

MIN_PORT = 1
MAX_PORT = 65535


class RefreshEvent(str, enum.Enum):
    ADD = "ADD"
    DEL = "DEL"
    SET = "SET"
    PAUSE = "PAUSE"
    RESUME = "RESUME"


class RefreshErrorCode(str, enum.Enum):
    INVALID_ARGUMENT = "INVALID_ARGUMENT"
    FAILED_PRECONDITION = "FAILED_PRECONDITION"
    NOT_FOUND = "NOT_FOUND"


class RefreshError(Exception):
    """A refused refresh; nothing changed. ``message`` names the offending value."""

    def __init__(self, code: RefreshErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class InstanceRoute:
    """The instance's one inference endpoint; requests for the rank go there with the rank pinned."""

    host: str
    port: int


@dataclass(frozen=True)
class EndpointSpec:
    id: int
    ip: str
    business_port: int
    mgmt_port: int = 0
    headless: bool = False
    instance_route: InstanceRoute | None = None


@dataclass(frozen=True)
class InstanceSpec:
    id: int
    model: str
    endpoints: tuple[EndpointSpec, ...]
    role: str = ""
    dp_size: int = 0
    # The publisher's own representation (the servicer keeps the proto here to echo it back).
    source: Any = field(default=None, compare=False, repr=False)

    @property
    def endpoint_ids(self) -> list[int]:
        return sorted(e.id for e in self.endpoints)


def format_ids(values: Iterable[int]) -> str:
    """``[1, 2, 5]``: ids as the refusal messages name them."""
    return "[" + ", ".join(str(v) for v in sorted(values)) + "]"


def _invalid(message: str) -> RefreshError:
    return RefreshError(RefreshErrorCode.INVALID_ARGUMENT, message)


def _check_endpoint_ids(instance: InstanceSpec) -> None:
    seen: set[int] = set()
    for ep in instance.endpoints:
        if ep.id < 0:
            raise _invalid(f"instance {instance.id}: endpoint id {ep.id} is negative (ids are original DP ranks)")
        if ep.id in seen:
            raise _invalid(f"instance {instance.id}: endpoint id {ep.id} appears more than once")
        seen.add(ep.id)


def validate_published_instance(instance: InstanceSpec) -> None:
    """The checks of a view to publish (ADD/SET); raises INVALID_ARGUMENT naming the value."""
    if not instance.endpoints:
        raise _invalid(f"instance {instance.id} has no endpoints; a published view needs at least one")
    _check_endpoint_ids(instance)
    for ep in instance.endpoints:
        if not ep.ip or ep.ip != ep.ip.strip() or any(ch.isspace() for ch in ep.ip):
            raise _invalid(f"instance {instance.id} endpoint {ep.id}: ip {ep.ip!r} is empty or has spaces")
        # A headless rank has no API of its own: it is never routed to, so its port is not used.
        if not ep.headless and not MIN_PORT <= ep.business_port <= MAX_PORT:
            raise _invalid(
                f"instance {instance.id} endpoint {ep.id}: business_port {ep.business_port} "
                f"not in {MIN_PORT}..{MAX_PORT}"
            )
        if not 0 <= ep.mgmt_port <= MAX_PORT:
            raise _invalid(
                f"instance {instance.id} endpoint {ep.id}: mgmt_port {ep.mgmt_port} not in 0..{MAX_PORT}"
            )
        route = ep.instance_route
        if route is not None:
            where = f"instance {instance.id} endpoint {ep.id}: instance_route"
            if ep.headless:
                raise _invalid(f"{where} is set on a headless endpoint (never routed to)")
            if not route.host or any(ch.isspace() for ch in route.host):
                raise _invalid(f"{where} host {route.host!r} is empty or has spaces")
            if not MIN_PORT <= route.port <= MAX_PORT:
                raise _invalid(f"{where} port {route.port} not in {MIN_PORT}..{MAX_PORT}")


def validate_refresh(event: RefreshEvent | Any, instances: Sequence[InstanceSpec]) -> None:
    """The checks of one refresh request on its own; raises INVALID_ARGUMENT naming the value."""
    if not isinstance(event, RefreshEvent):
        raise _invalid(f"event {event!r} is not one of {', '.join(e.value for e in RefreshEvent)}")
    seen: set[int] = set()
    for inst in instances:
        if inst.id < 0:
            raise _invalid(f"instance id {inst.id} is negative")
        if inst.id in seen:
            raise _invalid(f"{event.value}: instance {inst.id} appears more than once")
        seen.add(inst.id)
    if not instances and event is not RefreshEvent.SET:
        raise _invalid(f"{event.value} names no instance (only SET may be empty: it withdraws everything)")
    if event in (RefreshEvent.ADD, RefreshEvent.SET):
        for inst in instances:
            validate_published_instance(inst)
    elif event is RefreshEvent.DEL:
        for inst in instances:
            _check_endpoint_ids(inst)
