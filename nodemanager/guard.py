"""The transaction guard of one pod (RFC §6): pure state with an injectable monotonic clock.

* ``acquire(request_id, lease_sec)``: ``lease_sec`` ∈ (0, 3600]. The same request_id renews the lease
  to the *later* deadline (a shorter renewal never shortens it); another request_id while the lease
  is live is refused (FAILED_PRECONDITION naming both ids and the remaining lease); once the lease
  has expired anyone may take the guard.
* Each grant records the leader term of the Guard call (0 without election). A call of a *newer*
  term takes a live guard over from an older one: the older term's Controller was deposed, and its
  guard must not block its successor for the rest of the lease. A same-or-older term is refused as
  above. The holder's apply then fails ``require_live`` at the NodeManager, even one already in
  flight (the proxy checks again just before it sends to the engines).
* While the lease is live the NodeManager freezes its own self-restart/"suicide" paths.
* Apply and finalize(commit) need the *live* lease of their request_id (RFC §6: an expired lease or
  a wrong id is refused). finalize(abort) needs the recorded holder: an expired lease that nobody
  replaced still belongs to its request_id, so the transaction can still be called off, but a
  finalize from any other id is stale and never releases the guard of a newer transaction.
* ``ForwardedApplies`` remembers request_ids whose apply was forwarded, so an apply is never
  forwarded twice (ALREADY_EXISTS), bounded to the most recent ids.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from motor.common.config.fault_tolerance import MAX_GUARD_LEASE_SEC
from nodemanager.errors import AlreadyExists, FailedPrecondition, InvalidArgument

Clock = Callable[[], float]


def check_request_id(request_id: str, what: str = "request_id") -> str:
    if not request_id or not request_id.strip():
        raise InvalidArgument(f"{what} {request_id!r} is empty")
    if len(request_id) > 256 or any(ch in request_id for ch in "\r\n\t\0"):
        raise InvalidArgument(f"{what} {request_id[:80]!r} is longer than 256 characters or has control characters")
    return request_id


def check_lease(lease_sec: float) -> float:
    if not math.isfinite(lease_sec) or not 0 < lease_sec <= MAX_GUARD_LEASE_SEC:
        raise InvalidArgument(f"lease_sec={lease_sec!r} is not in (0, {MAX_GUARD_LEASE_SEC:g}]")
    return float(lease_sec)


@dataclass(frozen=True)
class GuardGrant:
    request_id: str
    lease_remaining_sec: float
    renewed: bool
    # The request_id whose expired lease this grant replaced, if any.
    replaced_expired: str | None = None
    # The request_id of an older leader term whose live lease this grant took over, if any.
    replaced_live: str | None = None
    term: int = 0


class GuardState:
    def __init__(self, clock: Clock = time.monotonic) -> None:
        self._clock = clock
        self._holder: str | None = None
        self._deadline = 0.0
        # The leader term of the call that took the guard (0: no election).
        self._term = 0

    # -- queries ----------------------------------------------------------------------------
    @property
    def holder(self) -> str | None:
        """The recorded holder, live or expired (None once released)."""
        return self._holder

    @property
    def term(self) -> int:
        """The leader term that took the recorded holder's guard."""
        return self._term

    def remaining_sec(self) -> float:
        if self._holder is None:
            return 0.0
        return max(0.0, self._deadline - self._clock())

    def is_live(self) -> bool:
        return self._holder is not None and self._clock() < self._deadline

    def live_holder(self) -> str | None:
        return self._holder if self.is_live() else None

    # -- transitions ------------------------------------------------------------------------
    def acquire(self, request_id: str, lease_sec: float, term: int = 0) -> GuardGrant:
        check_request_id(request_id)
        lease = check_lease(lease_sec)
        now = self._clock()
        new_deadline = now + lease
        live = self._holder is not None and now < self._deadline
        if self._holder == request_id and live:
            self._deadline = max(self._deadline, new_deadline)
            self._term = max(self._term, term)
            return GuardGrant(request_id, self._deadline - now, renewed=True, term=self._term)
        taken_live = None
        if self._holder is not None and self._holder != request_id and live:
            if term <= self._term:
                raise FailedPrecondition(
                    f"guard is held by request_id {self._holder!r} (leader term {self._term}) for another "
                    f"{self._deadline - now:.1f}s; request_id {request_id!r} of term {term} refused"
                )
            taken_live = self._holder
        replaced = self._holder if self._holder is not None and self._holder != request_id and not live else None
        self._holder = request_id
        self._deadline = new_deadline
        self._term = term
        return GuardGrant(request_id, lease, renewed=False, replaced_expired=replaced, replaced_live=taken_live,
                          term=term)

    def require_live(self, request_id: str, action: str) -> None:
        """Apply: the request_id must hold a live lease, else the call is stale."""
        if self._holder is None:
            raise FailedPrecondition(f"stale {action}: request_id {request_id!r} holds no guard (none is held)")
        if self._holder != request_id:
            raise FailedPrecondition(
                f"stale {action}: request_id {request_id!r} is not the guard holder {self._holder!r}"
            )
        if not self.is_live():
            raise FailedPrecondition(
                f"stale {action}: the guard lease of request_id {request_id!r} expired "
                f"{self._clock() - self._deadline:.1f}s ago"
            )

    def require_holder(self, request_id: str, action: str) -> None:
        """Finalize: the request_id must be the recorded holder (an expired, unreplaced lease counts)."""
        if self._holder is None:
            raise FailedPrecondition(f"stale {action}: request_id {request_id!r} holds no guard (none is held)")
        if self._holder != request_id:
            raise FailedPrecondition(
                f"stale {action}: request_id {request_id!r} is not the guard holder {self._holder!r}"
            )

    def release(self, request_id: str) -> bool:
        if self._holder != request_id:
            return False
        self._holder = None
        self._deadline = 0.0
        self._term = 0
        return True

    def clear(self) -> str | None:
        """Drops any guard (the proxy was switched off, or every engine restarts); returns the holder."""
        holder, self._holder, self._deadline, self._term = self._holder, None, 0.0, 0
        return holder


class ForwardedApplies:
    """request_ids whose apply was forwarded (the most recent ``capacity``)."""

    def __init__(self, capacity: int = 1024) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self._capacity = capacity
        self._ids: OrderedDict[str, None] = OrderedDict()

    def __contains__(self, request_id: object) -> bool:
        return request_id in self._ids

    def claim(self, request_id: str) -> None:
        """Records the id before forwarding; a second claim of the same id is refused."""
        if request_id in self._ids:
            raise AlreadyExists(f"apply with request_id {request_id!r} was already forwarded; it is never sent twice")
        self._ids[request_id] = None
        while len(self._ids) > self._capacity:
            self._ids.popitem(last=False)
