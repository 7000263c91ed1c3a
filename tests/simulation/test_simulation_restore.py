"""Capacity restorations in the simulation (the schedule's `restore` event: an operator's
RestoreInstance with when_ready): one after a scale-down brings every original rank back, and a
death or a leader crash during it is handled by the ordinary rules; every invariant holds."""

from __future__ import annotations

import pytest

from motor.simulation.runner import run
from motor.simulation.schedule import Event

AFTER_SCALE_DOWN = [Event(20.0, "executor_death", rank=1), Event(3.0, "restore", after="SCALED_DOWN_RUNNING")]


@pytest.mark.parametrize("during", [
    [],
    # Before the engines are started again: the rebuild replaces the dead engine too.
    [Event(0.5, "executor_death", rank=2, after="RECONFIGURING")],
    # The new leader resumes the interrupted rebuild as a reconfiguration.
    [Event(0.3, "leader_crash", duration_sec=5.0, after="RECONFIGURING")],
], ids=["plain", "death-during", "leader-crash-during"])
def test_a_restoration_keeps_every_invariant_and_ends_on_every_rank(during: list[Event]) -> None:
    result = run(7, "vllm", events=AFTER_SCALE_DOWN + during)
    assert [f"{v.invariant}: {v.message}" for v in result.violations] == [], result.trace
    assert any("restore requested: restoring" in line for line in result.trace), result.trace
    end = next(line for line in reversed(result.trace) if " end: " in line)
    assert "phase=NORMAL published=[0, 1, 2, 3] healthy=[0, 1, 2, 3]" in end, end


def test_a_restoration_asked_before_any_fault_has_nothing_to_do() -> None:
    result = run(7, "vllm", events=[Event(10.0, "restore"), Event(20.0, "kill_process", rank=0)])
    assert result.violations == [], result.trace
    assert any("restore requested: full" in line for line in result.trace), result.trace
