"""What every action of the Controller checks first: is this replica the leader, now?

A `Fence` is one leadership term of this replica. Its `term` is the etcd revision that created the
leader key (so a later leader always has a larger one), and it holds until its lease deadline, a
local monotonic time the election pushes forward on every answered keepalive and that always ends
before etcd could let the lease expire. A fence is lost for good when the deadline passes
unrenewed, when etcd says the lease or the key is gone, or when etcd refuses a fenced write; losing
it calls `on_lost` once, which demotes the replica. A lost fence never leads again: a new term gets
a new fence.

`Leadership` is the one shared holder: the store, the peer clients, the servicer and the core ask
it (`check`, `leading`, `call_metadata`), so a task of a term that just ended is refused by the same
check as anything else. Without election the fence is `Fence.solo()`: term 0, no key, no deadline
(a lone Controller always leads).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from motor.common.metadata import LEADER_TERM_METADATA

log = logging.getLogger(__name__)


class NotLeaderError(RuntimeError):
    """This replica does not lead (any more): the action was not taken."""


class Fence:
    def __init__(self, term: int, key: bytes | None, deadline: float, *, clock: Callable[[], float] = time.monotonic,
                 lease_id: int = 0, lost: str | None = None,
                 on_lost: Callable[[str], None] = lambda reason: None) -> None:
        self.term = term
        self.key = key
        self.lease_id = lease_id
        self._deadline = deadline
        self._clock = clock
        self._lost = lost
        self._on_lost = on_lost

    @classmethod
    def solo(cls) -> Fence:
        return cls(0, None, math.inf)

    @classmethod
    def standby(cls, reason: str = "this replica is a standby") -> Fence:
        return cls(0, None, 0.0, lost=reason)

    @property
    def deadline(self) -> float:
        return self._deadline

    def extend(self, deadline: float) -> None:
        """A keepalive was answered: the lease holds at least until `deadline` (never shortened)."""
        if self._lost is None and deadline > self._deadline:
            self._deadline = deadline

    @property
    def lost_reason(self) -> str | None:
        if self._lost is None and self._clock() >= self._deadline:
            self.lose(f"lease of term {self.term} not renewed before its deadline")
        return self._lost

    @property
    def leading(self) -> bool:
        return self.lost_reason is None

    def lose(self, reason: str) -> None:
        if self._lost is not None:
            return
        self._lost = reason
        log.warning("leadership of term %d lost: %s", self.term, reason)
        self._on_lost(reason)

    def check(self, what: str) -> None:
        reason = self.lost_reason
        if reason is not None:
            raise NotLeaderError(f"{what} {'' if what.endswith(':') else 'refused: '}not the leader ({reason})")


@dataclass
class LeaderView:
    """Who leads, as this replica knows it."""

    leader_id: str = ""
    leader_address: str = ""
    term: int = 0


class Leadership:
    """The current fence and what this replica knows about the leader (the status page's source)."""

    def __init__(self, *, election_enabled: bool, replica_id: str, address: str = "",
                 on_refused: Callable[[str], None] = lambda kind: None) -> None:
        """`on_refused`: called with the kind ("store", "peer") of every action refused because this
        replica did not lead (the metrics)."""
        self.election_enabled = election_enabled
        self.replica_id = replica_id
        self.address = address
        self.fence = Fence.standby("no leadership won yet") if election_enabled else Fence.solo()
        self.leader = LeaderView() if election_enabled else LeaderView(replica_id, address, 0)
        self._on_refused = on_refused

    @classmethod
    def solo(cls, replica_id: str = "", address: str = "") -> Leadership:
        return cls(election_enabled=False, replica_id=replica_id, address=address)

    @property
    def leading(self) -> bool:
        return self.fence.leading

    @property
    def term(self) -> int:
        return self.fence.term

    def advertise(self, address: str) -> None:
        """host:port others reach this replica at, known once its gRPC server is bound."""
        self.address = address

    def adopt(self, fence: Fence) -> None:
        """The fence of a term this replica just won: every check goes through it from now on."""
        self.fence = fence

    def check(self, what: str, kind: str = "peer") -> Fence:
        """The fence to act under; NotLeaderError (counted) when this replica does not lead now."""
        fence = self.fence
        try:
            fence.check(what)
        except NotLeaderError:
            self._on_refused(kind)
            raise
        return fence

    def call_metadata(self, fence: Fence) -> tuple[tuple[str, str], ...]:
        """The term every call to a NodeManager or the Coordinator carries (none without election)."""
        return ((LEADER_TERM_METADATA, str(fence.term)),) if fence.term else ()

    def set_leader(self, leader_id: str, leader_address: str, term: int) -> None:
        if (leader_id, leader_address, term) != (self.leader.leader_id, self.leader.leader_address, self.leader.term):
            if leader_id:
                log.info("leader is %s at %s (term %d)%s", leader_id, leader_address, term,
                         " (this replica)" if leader_id == self.replica_id else "")
            self.leader = LeaderView(leader_id, leader_address, term)
