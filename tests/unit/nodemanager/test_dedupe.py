"""Fault dedupe per endpoint: report on a change to UNHEALTHY/DEAD/PROTOCOL_ERROR, not while it
persists; healthy after a report sends RECOVERED once and re-arms."""

from __future__ import annotations

from nodemanager.engine_answers import EngineStatusEntry
from nodemanager.ft_poller import (
    DEAD,
    PROTOCOL_ERROR,
    RECOVERED,
    UNHEALTHY,
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


def test_a_new_fault_of_the_same_kind_is_reported_again() -> None:
    # A survivor fails again right after a rebuild, before any poll saw it healthy: the engine's
    # fault_info changes, and the Controller (which dropped the old evidence) must hear of it.
    d = FaultDeduper()
    assert d.observe(3, UNHEALTHY, "collective failed in group 'init'") == UNHEALTHY
    assert d.observe(3, UNHEALTHY, "collective failed in group 'init'") is None
    assert d.observe(3, UNHEALTHY, "") is None
    assert d.observe(3, UNHEALTHY, "collective timed out in group 'sd-1'") == UNHEALTHY
    assert d.observe(3, UNHEALTHY, "collective timed out in group 'sd-1'") is None
