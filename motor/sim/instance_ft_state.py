"""The instance FT manager's state (pure, no I/O): SGLang's shape (PR #40078) over the reference
engine's ranks. The server is ``motor.sim.instance_ft``.

* Ranks link to the manager (``register``: rank, the rank's internal FT URL, its run id) every
  ``LINK_INTERVAL_SEC``, as SGLang's watchdogs heartbeat to its manager; a rank whose link lapsed
  (``lease_sec``) reads ``dead``. A removed rank that links with a new run (a relaunch) is expected
  again, as SGLang re-adds a removed DP rank once its processes are back.
* The document: one entry per rank, ``healthy`` | ``unhealthy`` | ``dead`` (not expected, no live
  link, or its own status ``dead``); ``last_ft_request_id`` / ``ft_error`` at the top level, set
  when an apply finishes and kept until the next one finishes.
* An apply: ``retry`` | ``scale_down`` with ``params.removed_dp_ranks`` (only ranks still expected);
  400 ``{"message"}`` for a bad body or a rank out of range, 409 ``ft_operation_in_progress`` while
  one runs, else 202; what fails after the 202 is a code in ``ft_error``.
* Inference admission (``route``): a rank is *active* while expected, linked and not ``dead`` in the
  last observed view (``observe``); a request pinned by ``routed_dp_rank`` to another rank is 503
  ``routed_dp_rank=N is not active``, any request while an apply runs 503 ``fault_tolerance_paused``
  (SGLang checks in that order), and an unpinned one goes to the next active rank, round robin.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

LINK_INTERVAL_SEC = 0.3
ACCEPTED_MESSAGE = "Request accepted; poll /v1/fault_tolerance/status for updates."
BUSY = "ft_operation_in_progress"
INSTRUCTIONS = ("retry", "scale_down")
PAUSED = "fault_tolerance_paused"


@dataclass(frozen=True)
class InstanceApply:
    instruction: str
    removed_dp_ranks: tuple[int, ...]
    request_id: str


class ApplyRefused(ValueError):
    """HTTP 400 ``{"message"}``."""


@dataclass(frozen=True)
class RouteRefusal:
    """An inference request the manager answers itself: the HTTP status and the message."""

    status: int
    message: str


def parse_apply(raw: bytes, dp_size: int) -> InstanceApply:
    try:
        doc = json.loads(raw)
    except (ValueError, RecursionError):
        raise ApplyRefused("Request body is not valid JSON.") from None
    if not isinstance(doc, dict):
        raise ApplyRefused("Request body must be a JSON object.")
    instruction = doc.get("instruction")
    if instruction not in INSTRUCTIONS:
        raise ApplyRefused(f"Invalid instruction: '{instruction}'.")
    request_id = doc.get("request_id", "")
    if not isinstance(request_id, str):
        raise ApplyRefused("Input should be a valid string")
    params = doc.get("params", {})
    if not isinstance(params, dict):
        raise ApplyRefused("Input should be a valid dictionary")
    ranks: tuple[int, ...] = ()
    if instruction == "scale_down":
        removed = params.get("removed_dp_ranks")
        if not isinstance(removed, list) or not all(type(r) is int and r >= 0 for r in removed):
            raise ApplyRefused("'removed_dp_ranks' must be a list of non-negative integers.")
        if any(r >= dp_size for r in removed):
            raise ApplyRefused("'removed_dp_ranks' contains a rank out of range.")
        ranks = tuple(removed)
    # Extra params (dp_master_ip, dp_store_port, ...) are ignored: the manager picks the new master.
    return InstanceApply(instruction, ranks, request_id)


@dataclass
class RankLink:
    url: str
    run: str
    seen_at: float


@dataclass(frozen=True)
class RankView:
    """One rank's own FT status as its internal route answered (None: no answer)."""

    status: str
    ft_state: str | None = None
    ft_error: str | None = None


@dataclass
class InstanceFtState:
    dp_size: int
    lease_sec: float
    expected: list[bool] = field(default_factory=list)
    links: dict[int, RankLink] = field(default_factory=dict)
    in_progress: bool = False
    last_ft_request_id: str | None = None
    ft_error: str | None = None
    # Fault injection: the next applies answered 409; the next accepted apply's ft_error code.
    busy_next: int = 0
    fail_next: str | None = None
    journal: list[dict[str, Any]] = field(default_factory=list)
    # Inference: the last observed view of every rank, the round robin's last rank, and per rank the
    # requests that named it in routed_dp_rank (admitted or not) and those forwarded to it; the
    # requests that named no rank.
    views: dict[int, RankView | None] = field(default_factory=dict)
    last_routed: int = -1
    unpinned_requests: int = 0
    pinned_requests: dict[int, int] = field(default_factory=dict)
    forwarded_requests: dict[int, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.expected:
            self.expected = [True] * self.dp_size

    def register(self, rank: int, url: str, run: str, now: float) -> bool:
        """A rank's link; True when a removed rank is expected again (a new run)."""
        old = self.links.get(rank)
        self.links[rank] = RankLink(url, run, now)
        if (old is None or old.run != run) and not self.expected[rank] and not self.in_progress:
            self.expected[rank] = True
            return True
        return False

    def linked(self, now: float) -> dict[int, str]:
        """Rank -> internal FT URL of every rank whose link is live."""
        return {r: link.url for r, link in self.links.items() if now - link.seen_at <= self.lease_sec}

    def rank_status(self, rank: int, views: dict[int, RankView | None]) -> str:
        view = views.get(rank)
        if not self.expected[rank] or view is None or view.status == "dead":
            return "dead"
        # (healthy, failed): a per-rank refusal left the rank serving.
        return "healthy" if view.status == "healthy" else "unhealthy"

    def document(self, views: dict[int, RankView | None]) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "schema_version": 1, "total_engines": self.dp_size,
            "engines": [{"id": r, "status": self.rank_status(r, views)} for r in range(self.dp_size)],
        }
        if self.last_ft_request_id is not None:
            doc["last_ft_request_id"] = self.last_ft_request_id
            if self.ft_error is not None:
                doc["ft_error"] = self.ft_error
        return doc

    def admit(self, req: InstanceApply) -> tuple[int, dict[str, Any]]:
        """The answer to a well-formed apply; on 202 the operation is in progress."""
        if self.in_progress or self.busy_next > 0:
            if not self.in_progress:
                self.busy_next -= 1
            answer: tuple[int, dict[str, Any]] = (409, {"message": BUSY})
        else:
            self.in_progress = True
            answer = (202, {"message": ACCEPTED_MESSAGE, "request_id": req.request_id})
        self.journal.append({"instruction": req.instruction, "removed_dp_ranks": list(req.removed_dp_ranks),
                             "request_id": req.request_id, "http_status": answer[0]})
        return answer

    def precheck(self, req: InstanceApply, views: dict[int, RankView | None]) -> str | None:
        """The error code of an accepted apply before anything runs, or None."""
        if self.fail_next is not None:
            code, self.fail_next = self.fail_next, None
            return code
        if all(self.rank_status(r, views) == "healthy" for r in range(self.dp_size) if self.expected[r]):
            return f"{req.instruction}_requires_unresolved_expected_dp_fault"
        if req.instruction == "retry":
            if any(self.expected[r] and self.rank_status(r, views) == "dead" for r in range(self.dp_size)):
                return "retry_requires_all_expected_processes_alive"
            return None
        if not req.removed_dp_ranks:
            return "scale_down_requires_ranks"
        if any(not self.expected[r] for r in req.removed_dp_ranks):
            return "scale_down_requires_expected_ranks"
        if not self.survivors(req):
            return "cannot_scale_down_all_expected_ranks"
        return None

    def survivors(self, req: InstanceApply) -> list[int]:
        return [r for r in range(self.dp_size) if self.expected[r] and r not in req.removed_dp_ranks]

    def removed_after(self, req: InstanceApply) -> list[int]:
        """Every rank not expected once `req` commits (cumulative: what the ranks' rebuild takes)."""
        return sorted({r for r in range(self.dp_size) if not self.expected[r]} | set(req.removed_dp_ranks))

    def finish(self, req: InstanceApply, error: str | None) -> None:
        if error is None and req.instruction == "scale_down":
            for r in req.removed_dp_ranks:
                self.expected[r] = False
        self.last_ft_request_id = req.request_id
        self.ft_error = error
        self.in_progress = False

    def observe(self, views: dict[int, RankView | None]) -> None:
        self.views = dict(views)

    def active_ranks(self, now: float) -> list[int]:
        linked = self.linked(now)
        return [r for r in range(self.dp_size) if self.expected[r] and r in linked
                and (view := self.views.get(r)) is not None and view.status != "dead"]

    def route(self, routed_dp_rank: int | None, now: float) -> int | RouteRefusal:
        """The rank an inference request goes to (counted as forwarded), or the manager's own answer."""
        if routed_dp_rank is not None:
            self.pinned_requests[routed_dp_rank] = self.pinned_requests.get(routed_dp_rank, 0) + 1
        else:
            self.unpinned_requests += 1
        active = self.active_ranks(now)
        if routed_dp_rank is not None and routed_dp_rank not in active:
            return RouteRefusal(503, f"routed_dp_rank={routed_dp_rank} is not active")
        if self.in_progress:
            return RouteRefusal(503, PAUSED)
        if routed_dp_rank is None:
            if not active:
                return RouteRefusal(503, "no DP rank is active")
            routed_dp_rank = next((r for r in active if r > self.last_routed), active[0])
            self.last_routed = routed_dp_rank
        self.forwarded_requests[routed_dp_rank] = self.forwarded_requests.get(routed_dp_rank, 0) + 1
        return routed_dp_rank
