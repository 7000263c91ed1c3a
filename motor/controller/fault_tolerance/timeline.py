"""Per-transaction timelines: the evidence that opened a round, each decision, phase entry and remote
call, with timestamps, outcome and typed facts.

Events are `motor.v1.TimelineEvent` messages from the start, so GetTimeline, the JSON page, motorctl,
the benchmark and the tests all read the same typed fields; `detail` is only the human line. Kept in
memory for the last transactions of every instance (observed state, never persisted). Times are
wall-clock seconds passed in by the caller.

A `TimelineObserver` sees every event as it is added and every transaction as it finishes: the
Controller's metrics are computed from these same messages, so the pages and Prometheus agree.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Protocol

from gen.motor.v1 import controller_pb2
from motor.controller.fault_tolerance.evidence import RankEvidence
from motor.controller.model.runtime import FtPhase

Kind = controller_pb2.TimelineEventKind
Cause = controller_pb2.FallbackCause

# The first contract's lower-case `kind` string, still filled for its readers.
_LEGACY_KIND = {
    Kind.TIMELINE_EVENT_KIND_EVIDENCE: "evidence",
    Kind.TIMELINE_EVENT_KIND_DECISION: "decision",
    Kind.TIMELINE_EVENT_KIND_PHASE: "phase",
    Kind.TIMELINE_EVENT_KIND_CALL: "call",
    Kind.TIMELINE_EVENT_KIND_NOTE: "note",
}


def phase_proto(phase: FtPhase) -> int:
    return controller_pb2.FtPhase.Value(f"FT_PHASE_{phase}")


def evidence_kind_proto(kind: str) -> int:
    return controller_pb2.SoftwareFaultKind.Value(f"SOFTWARE_FAULT_KIND_{kind}")


def fallback_cause_proto(cause: str) -> int:
    return controller_pb2.FallbackCause.Value(f"FALLBACK_CAUSE_{cause}")


def gate_reason_proto(code: str) -> int:
    return controller_pb2.GateReason.Value(f"GATE_REASON_{code}")


class TimelineObserver(Protocol):
    def event(self, txn: Transaction, event: controller_pb2.TimelineEvent) -> None: ...

    def finished(self, txn: Transaction) -> None: ...


class Transaction:
    """One recovery transaction; its `proto` is what GetTimeline returns."""

    def __init__(self, instance_id: int, strategy: str, request_id: str, started_at_sec: float,
                 observer: TimelineObserver | None = None) -> None:
        self.instance_id = instance_id
        self.proto = controller_pb2.Transaction(
            request_id=request_id, strategy=strategy, started_at_unix_sec=started_at_sec, outcome="running"
        )
        self._observer = observer

    @property
    def strategy(self) -> str:
        return self.proto.strategy

    @property
    def request_id(self) -> str:
        return self.proto.request_id

    @property
    def outcome(self) -> str:
        return self.proto.outcome

    @property
    def events(self):  # RepeatedCompositeFieldContainer[controller_pb2.TimelineEvent]
        return self.proto.events

    def add(self, kind: int, name: str, at_sec: float, **facts: Any) -> controller_pb2.TimelineEvent:
        event = self.proto.events.add(event_kind=kind, kind=_LEGACY_KIND[kind], name=name, at_unix_sec=at_sec, **facts)
        if self._observer is not None:
            self._observer.event(self, event)
        return event

    def evidence(self, ev: RankEvidence) -> None:
        self.add(
            Kind.TIMELINE_EVENT_KIND_EVIDENCE, str(ev.kind), ev.observed_at_sec,
            ranks=[ev.rank], evidence_kind=evidence_kind_proto(ev.kind), observed_at_unix_sec=ev.observed_at_sec,
            received_at_unix_sec=ev.received_at_sec, diagnosing_observed_at_unix_sec=ev.diagnosing_at_sec,
            detail=f"rank {ev.rank} {ev.kind}: {ev.detail}",
        )

    def phase(self, phase: FtPhase, at_sec: float, detail: str = "") -> None:
        self.add(Kind.TIMELINE_EVENT_KIND_PHASE, str(phase), at_sec, phase=phase_proto(phase), detail=detail)

    def decision(self, name: str, at_sec: float, detail: str, **facts: Any) -> None:
        self.add(Kind.TIMELINE_EVENT_KIND_DECISION, name, at_sec, detail=detail, **facts)

    def note(self, name: str, at_sec: float, detail: str = "", outcome: str = "ok", **facts: Any) -> None:
        self.add(Kind.TIMELINE_EVENT_KIND_NOTE, name, at_sec, outcome=outcome, detail=detail, **facts)

    def call(self, name: str, target: str, started_sec: float, duration_sec: float, error: str = "",
             **facts: Any) -> controller_pb2.TimelineEvent:
        # A call that answered may still carry a refusal in its answer (e.g. "not accepted").
        outcome = f"error: {error}" if error else facts.pop("outcome", "ok")
        return self.add(Kind.TIMELINE_EVENT_KIND_CALL, name, started_sec, target=target, duration_sec=duration_sec,
                        outcome=outcome, error=error, **facts)

    def finish(self, outcome: str, at_sec: float) -> None:
        first = not self.proto.ended_at_unix_sec
        self.proto.outcome = outcome
        self.proto.ended_at_unix_sec = at_sec
        if first and self._observer is not None:
            self._observer.finished(self)


class TimelineBook:
    """The last `keep` transactions per instance, oldest first."""

    def __init__(self, keep: int = 20, observer: TimelineObserver | None = None) -> None:
        if keep < 1:
            raise ValueError(f"keep must be >= 1, got {keep}")
        self._keep = keep
        self._observer = observer
        self._by_instance: dict[int, deque[Transaction]] = {}

    def begin(self, instance_id: int, strategy: str, request_id: str, at_sec: float) -> Transaction:
        txn = Transaction(instance_id, strategy, request_id, at_sec, self._observer)
        self._by_instance.setdefault(instance_id, deque(maxlen=self._keep)).append(txn)
        return txn

    def transactions(self, instance_id: int, limit: int = 0) -> list[Transaction]:
        items = list(self._by_instance.get(instance_id, ()))
        return items[-limit:] if limit > 0 else items
