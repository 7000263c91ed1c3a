"""Per-transaction timelines: each phase entry and each remote call with timestamps and outcome.

Kept in memory for the last transactions of every instance (observed state, never persisted). Times
are wall-clock seconds passed in by the caller.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field


@dataclass
class TimelineEvent:
    at_sec: float
    kind: str  # "phase", "call", "decision" or "note"
    name: str
    target: str = ""
    outcome: str = "ok"
    detail: str = ""
    duration_sec: float = 0.0

    def as_dict(self) -> dict[str, object]:
        return {
            "at_unix_sec": round(self.at_sec, 6),
            "kind": self.kind,
            "name": self.name,
            "target": self.target,
            "outcome": self.outcome,
            "detail": self.detail,
            "duration_sec": round(self.duration_sec, 6),
        }


@dataclass
class Transaction:
    instance_id: int
    strategy: str
    request_id: str
    started_at_sec: float
    ended_at_sec: float = 0.0
    outcome: str = "running"
    events: list[TimelineEvent] = field(default_factory=list)

    def phase(self, name: str, at_sec: float, detail: str = "") -> None:
        self.events.append(TimelineEvent(at_sec, "phase", name, detail=detail))

    def note(self, name: str, at_sec: float, detail: str = "", outcome: str = "ok") -> None:
        self.events.append(TimelineEvent(at_sec, "note", name, outcome=outcome, detail=detail))

    def decision(self, name: str, at_sec: float, detail: str) -> None:
        self.events.append(TimelineEvent(at_sec, "decision", name, detail=detail))

    def call(self, name: str, target: str, started_sec: float, duration_sec: float, outcome: str, detail: str = "") -> None:
        self.events.append(TimelineEvent(started_sec, "call", name, target, outcome, detail, duration_sec))

    def finish(self, outcome: str, at_sec: float) -> None:
        self.outcome = outcome
        self.ended_at_sec = at_sec

    def as_dict(self) -> dict[str, object]:
        return {
            "instance_id": self.instance_id,
            "request_id": self.request_id,
            "strategy": self.strategy,
            "started_at_unix_sec": round(self.started_at_sec, 6),
            "ended_at_unix_sec": round(self.ended_at_sec, 6),
            "outcome": self.outcome,
            "events": [e.as_dict() for e in self.events],
        }


class TimelineBook:
    """The last `keep` transactions per instance, oldest first."""

    def __init__(self, keep: int = 20) -> None:
        if keep < 1:
            raise ValueError(f"keep must be >= 1, got {keep}")
        self._keep = keep
        self._by_instance: dict[int, deque[Transaction]] = {}

    def begin(self, instance_id: int, strategy: str, request_id: str, at_sec: float) -> Transaction:
        txn = Transaction(instance_id, strategy, request_id, at_sec)
        self._by_instance.setdefault(instance_id, deque(maxlen=self._keep)).append(txn)
        return txn

    def transactions(self, instance_id: int, limit: int = 0) -> list[Transaction]:
        items = list(self._by_instance.get(instance_id, ()))
        return items[-limit:] if limit > 0 else items
