"""Fault dedupe per endpoint: report on a change to UNHEALTHY/DEAD/PROTOCOL_ERROR, not while it
persists; healthy after a report sends RECOVERED once and re-arms."""

from __future__ import annotations

from nodemanager.engine_answers import EngineStatusEntry
from nodemanager.ft_poller import (
    DEAD,
    PROTOCOL_ERROR,
    RECOVERED,
    UNHEALTHY,
    DIAGNOSING_OBSERVATION,
    FaultDeduper,
    classify,
    kind_name,
)
from nodemanager.ft_poller import (
    HEALTHY_OBSERVATION as H,
)


def run(observations: list[int], endpoint_id: int = 1, d: FaultDeduper | None = None) -> list[int | None]:
    d = d or FaultDeduper()
    return [d.observe(endpoint_id, o) for o in observations]


def test_healthy_is_never_reported_on_its_own() -> None:
    assert run([H, H, H]) == [None, None, None]


def test_a_persisting_state_is_reported_once() -> None:
    assert run([UNHEALTHY, UNHEALTHY, UNHEALTHY]) == [UNHEALTHY, None, None]


def test_each_change_is_reported() -> None:
    assert run([UNHEALTHY, DEAD, DEAD, PROTOCOL_ERROR, DEAD]) == [UNHEALTHY, DEAD, None, PROTOCOL_ERROR, DEAD]


def test_recovery_is_reported_once_and_rearms() -> None:
    assert run([DEAD, H, H, DEAD, H]) == [DEAD, RECOVERED, None, DEAD, RECOVERED]


def test_endpoints_are_independent_and_reset_rearms() -> None:
    d = FaultDeduper()
    assert d.observe(1, UNHEALTHY) == UNHEALTHY
    assert d.observe(2, UNHEALTHY) == UNHEALTHY
    assert d.observe(1, UNHEALTHY) is None
    d.reset(1)
    assert d.last(1) is None and d.last(2) == UNHEALTHY
    assert d.observe(1, UNHEALTHY) == UNHEALTHY


def test_classify_and_names() -> None:
    assert classify(EngineStatusEntry(1, "healthy")) == H
    assert classify(EngineStatusEntry(1, "healthy", ft_state="recovering")) == H
    assert classify(EngineStatusEntry(1, "unhealthy")) == UNHEALTHY
    assert classify(EngineStatusEntry(1, "dead")) == DEAD
    assert [kind_name(k) for k in (H, UNHEALTHY, DEAD, PROTOCOL_ERROR, RECOVERED)] == [
        "HEALTHY", "UNHEALTHY", "DEAD", "PROTOCOL_ERROR", "RECOVERED"]


def test_a_changed_entry_of_the_same_kind_is_a_new_fault() -> None:
    d = FaultDeduper()
    first = ("unhealthy", None, "RuntimeError", (1,), None, None)
    again = ("unhealthy", None, "RuntimeError", (1,), "sd-7-abc", "scale_down refused")
    assert d.observe(3, UNHEALTHY, first) == UNHEALTHY
    assert d.observe(3, UNHEALTHY, first) is None
    assert d.observe(3, UNHEALTHY, again) == UNHEALTHY
    assert d.observe(3, UNHEALTHY, again) is None


def test_vllm_fault_info_is_the_same_every_time_and_diagnosing_between_faults_rearms() -> None:
    # vLLM's fault_info is the exception's type name: two faults can read exactly alike. The engine
    # pushes diagnosing before each verdict, which is an observed change.
    d = FaultDeduper()
    entry = ("unhealthy", None, "RuntimeError", (), None, None)
    assert d.observe(2, DIAGNOSING_OBSERVATION, ("diagnosing",)) is None
    assert d.observe(2, UNHEALTHY, entry) == UNHEALTHY
    assert d.observe(2, DIAGNOSING_OBSERVATION, ("diagnosing",)) is None
    assert d.observe(2, UNHEALTHY, entry) == UNHEALTHY


def test_a_committed_round_rearms_so_an_identical_next_fault_is_reported() -> None:
    # The survivor failed again right after the rebuild, before any poll saw it healthy or diagnosing.
    d = FaultDeduper()
    entry = ("unhealthy", None, "RuntimeError", (), None, None)
    assert d.observe(2, UNHEALTHY, entry) == UNHEALTHY
    d.rearm(2)  # finalize(commit)
    assert d.observe(2, UNHEALTHY, entry) == UNHEALTHY
    d.rearm(2)
    assert d.observe(2, H) == RECOVERED  # what was reported still recovers


def test_diagnosing_is_never_reported_and_never_recovers() -> None:
    assert run([DIAGNOSING_OBSERVATION, DIAGNOSING_OBSERVATION, H]) == [None, None, None]
    assert run([UNHEALTHY, DIAGNOSING_OBSERVATION, H]) == [UNHEALTHY, None, RECOVERED]


def test_a_taken_fault_counts_as_reported_and_a_commit_forgets_it_whole() -> None:
    d = FaultDeduper()
    assert d.observe(1, UNHEALTHY, taken=True) == UNHEALTHY and d.is_taken(1)
    assert d.observe(1, UNHEALTHY) is None, "the same fault: already reported (by the Controller's read)"
    d.rearm(1)  # a committed round superseded it
    assert not d.is_taken(1) and d.last(1) is None and run([H], d=d) == [None], "no RECOVERED owed"
    assert d.observe(2, DEAD, taken=True) == DEAD
    assert d.observe(2, UNHEALTHY) == UNHEALTHY and not d.is_taken(2), "a new fault of its own is the poller's"
    d.rearm(2)
    assert run([H], 2, d) == [RECOVERED], "its own report still owes RECOVERED after a commit"
