"""Stages of a transaction read from its typed timeline: boundaries, missing steps, reconfiguration."""

from __future__ import annotations

import itertools

import pytest

from gen.motor.v1 import controller_pb2
from motor.controller.fault_tolerance.stages import (
    SCALE_DOWN_STAGES,
    fault_to_published_sec,
    reconfiguration_stages,
    transaction_stages,
)

K = controller_pb2.TimelineEventKind
T0 = 1_700_000_000.0


def round_txn(*, drain: bool = True, publish: bool = True, strategy: str = "dp_scale_down") -> controller_pb2.Transaction:
    txn = controller_pb2.Transaction(request_id="sd-1", strategy=strategy, started_at_unix_sec=T0 + 1.0,
                                     ended_at_unix_sec=T0 + 9.0, outcome="succeeded")

    def call(name: str, at: float, took: float, **facts) -> None:
        txn.events.add(event_kind=K.TIMELINE_EVENT_KIND_CALL, name=name, at_unix_sec=T0 + at, duration_sec=took, **facts)

    txn.events.add(event_kind=K.TIMELINE_EVENT_KIND_EVIDENCE, name="DEAD", at_unix_sec=T0,
                   observed_at_unix_sec=T0, received_at_unix_sec=T0 + 0.1)
    txn.events.add(event_kind=K.TIMELINE_EVENT_KIND_EVIDENCE, name="UNHEALTHY", at_unix_sec=T0 + 0.5,
                   observed_at_unix_sec=T0 + 0.5, received_at_unix_sec=T0 + 0.6)
    txn.events.add(event_kind=K.TIMELINE_EVENT_KIND_DECISION, name="scale_down", at_unix_sec=T0 + 1.0)
    call("guard", 1.0, 0.2)
    call("guard", 1.0, 0.3)
    call("status", 1.3, 0.1)
    call("status", 1.5, 0.5)  # last pre-apply poll ends at +2.0
    if drain:
        call("drain", 2.0, 0.5)
    call("apply", 2.5, 0.25)
    call("apply", 2.5, 0.5)  # +3.0
    call("status", 3.0, 0.1)
    call("status", 4.0, 1.0)  # survivors healthy at +5.0
    call("finalize", 5.0, 1.0, commit=True)  # +6.0
    call("publish", 6.0, 0.0, error="UNAVAILABLE: down")  # a failed publish is not the publication
    if publish:
        call("publish", 6.0, 2.0)  # +8.0
    return txn


def test_every_scale_down_stage_ends_where_the_next_begins() -> None:
    stages = transaction_stages(round_txn())
    assert [s.name for s in stages] == list(SCALE_DOWN_STAGES)
    durations = {s.name: round(s.duration_sec, 6) for s in stages}
    assert durations == {"detection": 0.1, "decision": 0.9, "guard": 0.3, "apply_ready": 0.7, "drain": 0.5,
                         "apply": 0.5, "rebuild": 2.0, "commit": 1.0, "publish": 2.0}
    assert all(a.end_unix_sec == b.start_unix_sec for a, b in itertools.pairwise(stages))
    assert fault_to_published_sec(round_txn()) == pytest.approx(8.0)


def test_a_missing_step_is_left_out_and_the_next_stage_starts_at_the_last_boundary() -> None:
    stages = {s.name: s for s in transaction_stages(round_txn(drain=False, publish=False))}
    assert "drain" not in stages and "publish" not in stages
    # apply-readiness is judged by the polls before the apply when nothing was drained.
    assert stages["apply_ready"].end_unix_sec == pytest.approx(T0 + 2.0)
    assert stages["apply"].start_unix_sec == pytest.approx(T0 + 2.0)
    assert fault_to_published_sec(round_txn(publish=False)) is None


def test_reconfiguration_stages_and_an_unknown_strategy() -> None:
    txn = controller_pb2.Transaction(strategy="instance_reconfiguration", started_at_unix_sec=T0)
    for name, at, took in (("drain", 0.0, 0.1), ("stop_engines", 0.1, 1.0), ("stop_engines", 0.1, 1.9),
                           ("start_engines", 2.0, 3.0), ("publish", 5.0, 0.5)):
        txn.events.add(event_kind=K.TIMELINE_EVENT_KIND_CALL, name=name, at_unix_sec=T0 + at, duration_sec=took)
    assert [(s.name, round(s.duration_sec, 6)) for s in reconfiguration_stages(txn)] == [
        ("drain", 0.1), ("stop", 1.9), ("start", 3.0), ("publish", 0.5)]
    assert fault_to_published_sec(txn) is None  # no evidence led to it
    assert transaction_stages(round_txn(strategy="fast_recovery")) == []
