"""Fast recovery by `retry` in the simulation (the real strategy centre, strategy and NodeManager
proxy over the simulated engines of each dialect): a transient fault is retried in place, a fault
inside the retry falls back to a reconfiguration, the switch off keeps the RFC's wait, and the
fast-recovery invariants fire on a broken world."""

from __future__ import annotations

import pytest

from gen.motor.v1 import node_manager_pb2
from motor.simulation.runner import run
from motor.simulation.schedule import Event
from motor.simulation.world import World

TRANSIENT = [Event(10.0, "unhealthy", rank=2)]


def _violations(result) -> list[str]:
    return [f"{v.invariant}: {v.message}" for v in result.violations] + (result.trace if result.violations else [])


def _phases(result) -> list[str]:
    """The phases the instance entered, in order: the trace writes a line at every change of phase or
    of publication, so a phase whose publication changed inside it is one entry, not two."""
    lines = [line.split("phase=")[1].split()[0] for line in result.trace if " phase=" in line and "end:" not in line]
    return [phase for i, phase in enumerate(lines) if i == 0 or lines[i - 1] != phase]


@pytest.mark.parametrize("dialect", ["vllm", "rfc", "vllm-0.33"])
def test_a_transient_fault_is_retried_in_place_without_a_relaunch(dialect: str) -> None:
    result = run(3, dialect, events=TRANSIENT, fast_recovery=True)
    assert _violations(result) == []
    assert _phases(result) == ["FAST_RECOVERING", "NORMAL"], result.trace
    assert not any("start_engines" in line for line in result.trace), result.trace


def test_with_fast_recovery_off_the_transient_fault_is_reconfigured() -> None:
    result = run(3, "vllm", events=TRANSIENT, fast_recovery=False)
    assert _violations(result) == []
    assert "FAST_RECOVERING" not in _phases(result) and "RECONFIGURING" in _phases(result), result.trace


@pytest.mark.parametrize("dialect", ["vllm", "vllm-0.33"])
def test_a_failed_retry_vote_goes_to_a_reconfiguration(dialect: str) -> None:
    # The members stay unhealthy with ft_error (vLLM: a failed retry is not fatal), then the fallback.
    result = run(5, dialect, events=[Event(5.0, "fail_vote"), *TRANSIENT], fast_recovery=True)
    assert _violations(result) == []
    assert "RECONFIGURING" in _phases(result) and "SCALING_DOWN" not in _phases(result), result.trace


@pytest.mark.parametrize(("dialect", "events"), [
    # A death inside the retry: no scale-down, the whole instance is reconfigured.
    ("vllm", [*TRANSIENT, Event(0.3, "executor_death", rank=1, after="FAST_RECOVERING")]),
    ("rfc", [*TRANSIENT, Event(0.8, "kill_process", rank=0, after="FAST_RECOVERING")]),
    # A NodeManager crash or a Controller restart in the middle of it.
    ("vllm", [*TRANSIENT, Event(0.5, "nm_crash", pod=1, duration_sec=4.0, after="FAST_RECOVERING")]),
    ("rfc", [*TRANSIENT, Event(0.2, "controller_restart", duration_sec=3.0, after="FAST_RECOVERING")]),
    ("vllm", [*TRANSIENT, Event(0.4, "leader_crash", duration_sec=2.0, after="FAST_RECOVERING")]),
    ("vllm", [*TRANSIENT, Event(0.1, "hang_status", rank=3, duration_sec=6.0, after="FAST_RECOVERING")]),
])
def test_a_fault_inside_the_retry_ends_in_a_reconfiguration_or_a_recovery(dialect: str, events: list[Event]) -> None:
    result = run(5, dialect, events=events, fast_recovery=True)
    assert _violations(result) == []
    assert any("(at FAST_RECOVERING+" in line for line in result.trace), result.trace  # it landed inside
    phases = _phases(result)
    assert "SCALING_DOWN" not in phases and "SCALED_DOWN_RUNNING" not in phases, result.trace


def test_repeated_transient_faults_are_retried_at_most_max_attempts_times() -> None:
    events = [Event(10.0 + 8.0 * i, "unhealthy", rank=i % 4) for i in range(4)]
    result = run(7, "vllm", events=events, fast_recovery=True, steps=160)
    assert _violations(result) == []
    phases = _phases(result)
    assert phases.count("FAST_RECOVERING") == 2 and "RECONFIGURING" in phases, result.trace


def test_the_gate_invariant_fires_when_a_retry_is_sent_with_fast_recovery_off() -> None:
    def retry_anyway(world: World) -> None:
        core = world.core
        real = core.deps.nodemanagers.get

        def get(address):
            client = real(address)
            apply = client.apply

            async def as_retry(*args, **_scale_down_only):  # a retry names no round's ranks
                return await apply(*args[:7], node_manager_pb2.INSTRUCTION_RETRY)
            client.apply = as_retry
            return client
        core.deps.nodemanagers.get = get

    events = [Event(10.0, "executor_death", rank=1), Event(10.5, "traffic")]
    result = run(3, "vllm", events=events, fast_recovery=False, tamper=retry_anyway)
    assert "fast_recovery_gated" in {v.invariant for v in result.violations}, result.trace


def _checker(fast_recovery: bool = True):
    from motor.simulation.invariants import SafetyChecker
    from motor.simulation.world import controller_config

    from .test_simulation_invariants import _World
    w = _World()
    w.config = controller_config(fast_recovery=fast_recovery)
    return w, SafetyChecker(w)  # type: ignore[arg-type]


RETRY = node_manager_pb2.INSTRUCTION_RETRY
SCALE_DOWN = node_manager_pb2.INSTRUCTION_SCALE_DOWN


def _fired(checker, at: float = 1.0) -> list[str]:
    return [v.invariant for v in checker.check(at)]


def test_retry_removes_nothing_fires_on_a_commit_that_retires_ranks() -> None:
    w, checker = _checker()
    w.call("finalize", 7, "fr-7-a", True, [])
    assert _fired(checker) == []
    w.call("finalize", 7, "fr-7-a", True, [1])
    assert _fired(checker) == ["retry_removes_nothing"]


def test_a_scale_down_after_a_failed_retry_needs_a_relaunch_first() -> None:
    w, checker = _checker()
    w.call("apply", 7, "fr-7-a", (), "10.0.0.1", 0, (0, 1), 0, RETRY)
    w.call("finalize", 7, "fr-7-a", False, [])
    w.call("start_engines", 7, "reconf-7-b")
    w.call("apply", 7, "sd-7-c", (1,), "10.0.0.1", 0, (0,), 29601, SCALE_DOWN)
    assert _fired(checker) == []
    w.call("finalize", 7, "fr-7-d", False, [])
    w.call("apply", 7, "sd-7-e", (1,), "10.0.0.1", 0, (0,), 29601, SCALE_DOWN)
    assert _fired(checker) == ["fast_recovery_escalates_to_reconfiguration"]


def test_fast_recovery_bounded_counts_one_life_within_the_window() -> None:
    w, checker = _checker()
    cfg = w.config.fault_tolerance_config.fast_recovery_config
    for i in range(cfg.max_attempts):
        w.clock.now = float(i)
        w.call("guard", 7, f"fr-7-{i}", 85.0)
    assert _fired(checker) == []
    w.incarnation += 1  # a new Controller life counts anew
    w.call("guard", 7, "fr-7-new-life", 85.0)
    assert _fired(checker) == []
    w.incarnation -= 1
    w.clock.now = cfg.attempt_window_sec  # the first left the window
    w.call("guard", 7, "fr-7-late", 85.0)
    assert _fired(checker) == []
    w.call("guard", 7, "fr-7-one-too-many", 85.0)
    assert _fired(checker) == ["fast_recovery_bounded"]
