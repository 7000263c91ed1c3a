"""A seed replays exactly: the same schedule, the same trace, the same verdicts."""

from __future__ import annotations

import os
import random
import subprocess
import sys

from motor.simulation.runner import run, schedule_for
from motor.simulation.schedule import Event


def test_the_same_seed_gives_the_same_trace_twice_in_one_process() -> None:
    for seed in (3, 11):
        first, second = run(seed), run(seed)
        assert first.events == second.events
        assert first.trace == second.trace
        assert first.violations == second.violations
        assert len(first.trace) > 2  # the schedule ran: the instance served, events fired


def test_a_run_reads_no_process_global_randomness() -> None:
    """The NodeManagers' reports are retried while the Controller is down, with jitter: it comes
    from the seed, not from the process's `random` (which differs between processes)."""
    events = [Event(25.062, "unhealthy", rank=0), Event(25.356, "controller_restart", duration_sec=7.11)]
    traces = []
    for process_seed in (1, 2):
        random.seed(process_seed)
        traces.append(run(24, "vllm", events=events).trace)
    assert any("phase=RECONFIGURING" in line for line in traces[0]), traces[0]
    assert traces[0] == traces[1]


def test_different_seeds_give_different_schedules() -> None:
    assert schedule_for(1, 120) != schedule_for(2, 120)


def test_the_command_replays_a_seed_and_ends_with_the_summary_line() -> None:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONHASHSEED"}  # the command sets it itself
    outs = [subprocess.run([sys.executable, "-m", "motor.simulation", "--seeds", "2", "--seed", "5"],
                           capture_output=True, text=True, env=env, timeout=120) for _ in range(2)]
    for out in outs:
        last = out.stdout.strip().splitlines()[-1]
        assert last.startswith("2 seeds, ") and last.endswith(" violations"), out.stdout + out.stderr
        assert out.returncode == (1 if not last.endswith(" 0 violations") else 0)
    strip = [[line for line in o.stdout.splitlines() if "schedules/s" not in line] for o in outs]
    assert strip[0] == strip[1]
