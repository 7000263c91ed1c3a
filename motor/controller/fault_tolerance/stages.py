"""The stages of one recovery transaction, read from its typed timeline (`motor.v1.Transaction`). Pure.

One definition serves the `motor_scale_down_stage_seconds` histogram, `motorctl timeline` and
`motor demo`'s stage bar, so what a person reads and what Prometheus records never disagree.

A scale-down round, each stage ending where the next begins:

  detection    first NodeManager observation of the evidence → the Controller received it
  decision     → the round started (waiting for a complete snapshot, then deciding)
  guard        → the last guard answered
  apply_ready  → the last status poll before the drain answered (every survivor apply-ready)
  drain        → the Coordinator acknowledged the DEL
  apply        → the last apply answered (202s)
  rebuild      → the last status poll after apply answered (every survivor healthy)
  commit       → the last finalize(commit) answered
  publish      → the Coordinator acknowledged the ADD of the survivors

A whole-instance reconfiguration: detection, decision (when evidence led to it), drain, stop, start,
publish. An elastic scale-up (from its start): guard, join (the joiners started), ready (the last
poll before the drain), drain, apply, rebuild, commit, publish. A stage whose closing step is not in the timeline (nothing published to drain, a round
that failed half-way) is left out; the next stage starts where the last one present ended.
"""

from __future__ import annotations

from dataclasses import dataclass

from gen.motor.v1 import controller_pb2

Kind = controller_pb2.TimelineEventKind

SCALE_DOWN_STAGES = ("detection", "decision", "guard", "apply_ready", "drain", "apply", "rebuild", "commit", "publish")
RECONFIGURATION_STAGES = ("detection", "decision", "drain", "stop", "start", "publish")
SCALE_UP_STAGES = ("guard", "join", "ready", "drain", "apply", "rebuild", "commit", "publish")


@dataclass(frozen=True)
class Stage:
    name: str
    start_unix_sec: float
    end_unix_sec: float

    @property
    def duration_sec(self) -> float:
        return max(0.0, self.end_unix_sec - self.start_unix_sec)


@dataclass(frozen=True)
class _Call:
    position: int  # among the transaction's events: they are in the order they happened
    end_unix_sec: float
    commit: bool


class _Timeline:
    """One pass over a transaction's events: its successful calls by name, and its evidence times.
    Reading a protobuf event's fields is what the stages cost (hundreds of events at DP 256), so each
    is read once."""

    def __init__(self, txn: controller_pb2.Transaction) -> None:
        self.started_at_unix_sec = txn.started_at_unix_sec
        self.calls: dict[str, list[_Call]] = {}
        self.observed: list[float] = []
        self.received: list[float] = []
        call_kind, evidence_kind = Kind.TIMELINE_EVENT_KIND_CALL, Kind.TIMELINE_EVENT_KIND_EVIDENCE
        for i, e in enumerate(txn.events):
            kind = e.event_kind
            if kind == call_kind:
                if not e.error:
                    self.calls.setdefault(e.name, []).append(_Call(i, e.at_unix_sec + e.duration_sec, e.commit))
            elif kind == evidence_kind:
                if e.observed_at_unix_sec > 0:
                    self.observed.append(e.observed_at_unix_sec)
                if e.received_at_unix_sec > 0:
                    self.received.append(e.received_at_unix_sec)

    def calls_of(self, name: str, start: int = 0, stop: int | None = None) -> list[_Call]:
        """Successful calls named `name` among events[start:stop] (by position)."""
        return [c for c in self.calls.get(name, ()) if c.position >= start and (stop is None or c.position < stop)]

    def first_position(self, name: str) -> int | None:
        calls = self.calls.get(name)
        return calls[0].position if calls else None

    def evidence_marks(self) -> list[tuple[str, float | None]]:
        if not self.observed:
            return [("", self.started_at_unix_sec)]
        return [("", min(self.observed)), ("detection", min(self.received) if self.received else None),
                ("decision", self.started_at_unix_sec)]


def _last_end(calls: list[_Call]) -> float | None:
    return max((c.end_unix_sec for c in calls), default=None)


def _chain(marks: list[tuple[str, float | None]]) -> list[Stage]:
    """Stages from an ordered list of (stage ending here, time or None when the step is missing)."""
    stages: list[Stage] = []
    _, start = marks[0]
    assert start is not None
    for name, end in marks[1:]:
        if end is None:
            continue
        stages.append(Stage(name, start, end))
        start = end
    return stages


def scale_down_stages(txn: controller_pb2.Transaction) -> list[Stage]:
    t = _Timeline(txn)
    drain_at = t.first_position("drain")
    apply_at = t.first_position("apply")
    # Polls before the drain (or, with nothing to drain, before the apply) judged apply-readiness;
    # polls after the apply judged the rebuild.
    ready_before = drain_at if drain_at is not None else apply_at
    commits = [c for c in t.calls_of("finalize") if c.commit]
    return _chain(t.evidence_marks() + [
        ("guard", _last_end(t.calls_of("guard"))),
        ("apply_ready", None if ready_before is None else _last_end(t.calls_of("status", 0, ready_before))),
        ("drain", _last_end(t.calls_of("drain")[:1])),
        ("apply", _last_end(t.calls_of("apply"))),
        ("rebuild", None if apply_at is None else _last_end(t.calls_of("status", apply_at + 1))),
        ("commit", _last_end(commits)),
        ("publish", _last_end(t.calls_of("publish")[:1])),
    ])


def reconfiguration_stages(txn: controller_pb2.Transaction) -> list[Stage]:
    t = _Timeline(txn)
    return _chain(t.evidence_marks() + [
        ("drain", _last_end(t.calls_of("drain")[:1])),
        ("stop", _last_end(t.calls_of("stop_engines"))),
        ("start", _last_end(t.calls_of("start_engines"))),
        ("publish", _last_end(t.calls_of("publish")[:1])),
    ])


def scale_up_stages(txn: controller_pb2.Transaction) -> list[Stage]:
    t = _Timeline(txn)
    drain_at = t.first_position("drain")
    apply_at = t.first_position("apply")
    ready_before = drain_at if drain_at is not None else apply_at
    commits = [c for c in t.calls_of("finalize") if c.commit]
    return _chain([("", txn.started_at_unix_sec),
                   ("guard", _last_end(t.calls_of("guard"))),
                   ("join", _last_end(t.calls_of("start_engines"))),
                   ("ready", None if ready_before is None else _last_end(t.calls_of("status", 0, ready_before))),
                   ("drain", _last_end(t.calls_of("drain")[:1])),
                   ("apply", _last_end(t.calls_of("apply"))),
                   ("rebuild", None if apply_at is None else _last_end(t.calls_of("status", apply_at + 1))),
                   ("commit", _last_end(commits)),
                   ("publish", _last_end(t.calls_of("publish")[:1]))])


def transaction_stages(txn: controller_pb2.Transaction) -> list[Stage]:
    """The stages present in the timeline, in order (empty for a strategy without a stage model)."""
    if txn.strategy == "dp_scale_down":
        return scale_down_stages(txn)
    if txn.strategy == "instance_reconfiguration":
        return reconfiguration_stages(txn)
    if txn.strategy == "scale_up":
        return scale_up_stages(txn)
    return []


def fault_to_published_sec(txn: controller_pb2.Transaction, stages: list[Stage] | None = None) -> float | None:
    """From the first NodeManager observation of the evidence to the publication of the result; None
    when the timeline has no evidence or no publication. `stages`: the transaction's stages, when the
    caller has them already."""
    if stages is None:
        stages = transaction_stages(txn)
    if not stages or stages[0].name != "detection" or stages[-1].name != "publish":
        return None
    return stages[-1].end_unix_sec - stages[0].start_unix_sec
