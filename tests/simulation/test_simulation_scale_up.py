"""Elastic scale-up in the simulation (engines that declare scale_up, `run(scale_up=True)`): a
restoration after a scale-down re-admits the removed rank without restarting the survivors; a
fault during the round (a survivor's or the joiner's death, a leader crash) ends it in the planned
restoration or the ordinary rules; engines without scale_up (vllm-0.33, sglang) fall back to the
planned restoration; every invariant holds."""

from __future__ import annotations

import pytest

from motor.simulation.runner import run, schedule_for
from motor.simulation.schedule import Event

AFTER_SCALE_DOWN = [Event(20.0, "executor_death", rank=1), Event(3.0, "restore", after="SCALED_DOWN_RUNNING")]


def _end(trace: list[str]) -> str:
    return next(line for line in reversed(trace) if " end: " in line)


@pytest.mark.parametrize("dialect", ["vllm", "rfc"])
def test_a_scale_up_readmits_the_rank_without_a_relaunch(dialect: str) -> None:
    result = run(7, dialect, events=AFTER_SCALE_DOWN, scale_up=True)
    assert [f"{v.invariant}: {v.message}" for v in result.violations] == [], result.trace
    assert any("phase=SCALING_UP" in line for line in result.trace), result.trace
    assert not any("start_engines" in line and ("reconf-" in line or "restore-" in line) for line in result.trace)
    assert "phase=NORMAL published=[0, 1, 2, 3] healthy=[0, 1, 2, 3]" in _end(result.trace)


@pytest.mark.parametrize("during", [
    # The joiner dies while it loads: the round fails and the planned restoration rebuilds.
    [Event(0.5, "kill_process", rank=1, after="SCALING_UP")],
    # A survivor dies during the round.
    [Event(1.0, "executor_death", rank=2, after="SCALING_UP")],
    # The leader crashes: the new one takes the interrupted round as a reconfiguration.
    [Event(0.3, "leader_crash", duration_sec=5.0, after="SCALING_UP")],
    # The joiners' NodeManager crashes and comes back.
    [Event(0.5, "nm_crash", pod=0, duration_sec=3.0, after="SCALING_UP")],
], ids=["joiner-dies", "survivor-dies", "leader-crash", "nodemanager-crash"])
@pytest.mark.parametrize("dialect", ["vllm", "rfc"])
def test_a_fault_during_the_scale_up_keeps_every_invariant_and_ends_on_every_rank(dialect: str,
                                                                                   during: list[Event]) -> None:
    result = run(7, dialect, events=AFTER_SCALE_DOWN + during, scale_up=True)
    assert [f"{v.invariant}: {v.message}" for v in result.violations] == [], result.trace
    assert "healthy=[0, 1, 2, 3]" in _end(result.trace), _end(result.trace)


@pytest.mark.parametrize("dialect", ["vllm-0.33", "sglang"])
def test_engines_without_scale_up_get_the_planned_restoration(dialect: str) -> None:
    result = run(7, dialect, events=AFTER_SCALE_DOWN, scale_up=True)
    assert [f"{v.invariant}: {v.message}" for v in result.violations] == [], result.trace
    assert "published=[0, 1, 2, 3] healthy=[0, 1, 2, 3]" in _end(result.trace), _end(result.trace)


def test_scale_up_schedules_add_a_restoration_and_leave_the_generated_faults_alone() -> None:
    plain, with_scale_up = schedule_for(5, 120), schedule_for(5, 120, scale_up=True)
    assert with_scale_up[:len(plain)] == plain
    added = with_scale_up[len(plain):]
    assert added[0].kind == "restore" or any(e.kind == "restore" for e in added)
    assert all(e.after in ("SCALED_DOWN_RUNNING", "SCALING_UP") for e in added)
