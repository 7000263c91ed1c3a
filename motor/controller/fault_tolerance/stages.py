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


def _end(e: controller_pb2.TimelineEvent) -> float:
    return e.at_unix_sec + e.duration_sec


def _calls(txn: controller_pb2.Transaction, name: str, start: int = 0,
           stop: int | None = None) -> list[controller_pb2.TimelineEvent]:
    """Successful calls named `name` among events[start:stop] (by position: the events are in the
    order they happened, even when a manual or coarse clock gives several the same time)."""
    events = list(txn.events)[start:stop]
    return [e for e in events if e.event_kind == Kind.TIMELINE_EVENT_KIND_CALL and e.name == name and not e.error]


def _first_index(txn: controller_pb2.Transaction, name: str) -> int | None:
    return next((i for i, e in enumerate(txn.events)
                 if e.event_kind == Kind.TIMELINE_EVENT_KIND_CALL and e.name == name and not e.error), None)


def _last_end(events: list[controller_pb2.TimelineEvent]) -> float | None:
    return max((_end(e) for e in events), default=None)


def _evidence_marks(txn: controller_pb2.Transaction) -> list[tuple[str, float | None]]:
    evidence = [e for e in txn.events if e.event_kind == Kind.TIMELINE_EVENT_KIND_EVIDENCE]
    observed = [e.observed_at_unix_sec for e in evidence if e.observed_at_unix_sec > 0]
    received = [e.received_at_unix_sec for e in evidence if e.received_at_unix_sec > 0]
    if not observed:
        return [("", txn.started_at_unix_sec)]
    return [("", min(observed)), ("detection", min(received) if received else None),
            ("decision", txn.started_at_unix_sec)]


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
    drain_at = _first_index(txn, "drain")
    apply_at = _first_index(txn, "apply")
    # Polls before the drain (or, with nothing to drain, before the apply) judged apply-readiness;
    # polls after the apply judged the rebuild.
    ready_before = drain_at if drain_at is not None else apply_at
    commits = [e for e in _calls(txn, "finalize") if e.commit]
    return _chain(_evidence_marks(txn) + [
        ("guard", _last_end(_calls(txn, "guard"))),
        ("apply_ready", None if ready_before is None else _last_end(_calls(txn, "status", 0, ready_before))),
        ("drain", _last_end(_calls(txn, "drain")[:1])),
        ("apply", _last_end(_calls(txn, "apply"))),
        ("rebuild", None if apply_at is None else _last_end(_calls(txn, "status", apply_at + 1))),
        ("commit", _last_end(commits)),
        ("publish", _last_end(_calls(txn, "publish")[:1])),
    ])


def reconfiguration_stages(txn: controller_pb2.Transaction) -> list[Stage]:
    return _chain(_evidence_marks(txn) + [
        ("drain", _last_end(_calls(txn, "drain")[:1])),
        ("stop", _last_end(_calls(txn, "stop_engines"))),
        ("start", _last_end(_calls(txn, "start_engines"))),
        ("publish", _last_end(_calls(txn, "publish")[:1])),
    ])


def scale_up_stages(txn: controller_pb2.Transaction) -> list[Stage]:
    drain_at = _first_index(txn, "drain")
    apply_at = _first_index(txn, "apply")
    ready_before = drain_at if drain_at is not None else apply_at
    commits = [e for e in _calls(txn, "finalize") if e.commit]
    return _chain([("", txn.started_at_unix_sec),
                   ("guard", _last_end(_calls(txn, "guard"))),
                   ("join", _last_end(_calls(txn, "start_engines"))),
                   ("ready", None if ready_before is None else _last_end(_calls(txn, "status", 0, ready_before))),
                   ("drain", _last_end(_calls(txn, "drain")[:1])),
                   ("apply", _last_end(_calls(txn, "apply"))),
                   ("rebuild", None if apply_at is None else _last_end(_calls(txn, "status", apply_at + 1))),
                   ("commit", _last_end(commits)),
                   ("publish", _last_end(_calls(txn, "publish")[:1]))])


def transaction_stages(txn: controller_pb2.Transaction) -> list[Stage]:
    """The stages present in the timeline, in order (empty for a strategy without a stage model)."""
    if txn.strategy == "dp_scale_down":
        return scale_down_stages(txn)
    if txn.strategy == "instance_reconfiguration":
        return reconfiguration_stages(txn)
    if txn.strategy == "scale_up":
        return scale_up_stages(txn)
    return []


def fault_to_published_sec(txn: controller_pb2.Transaction) -> float | None:
    """From the first NodeManager observation of the evidence to the publication of the result; None
    when the timeline has no evidence or no publication."""
    stages = transaction_stages(txn)
    if not stages or stages[0].name != "detection" or stages[-1].name != "publish":
        return None
    return stages[-1].end_unix_sec - stages[0].start_unix_sec
