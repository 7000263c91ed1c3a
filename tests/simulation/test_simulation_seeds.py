"""The CI seed range: fixed seeds of every dialect run on every commit and keep every invariant.

Sized to take about a minute on a 2-core machine. A seed that fails prints its violations and the
trace; replay it with `python -m motor.simulation --seeds 1 --seed S --dialect D` (which shrinks it).
"""

from __future__ import annotations

import pytest

from motor.simulation.runner import run

RANGES = {"vllm": range(0, 200), "rfc": range(0, 50), "vllm-0.33": range(0, 30)}

# Seeds that fail today, each with the known fault it finds; they run as expected failures until
# the fix is merged, then this is emptied (every seed must keep every invariant). A change of the
# schedule generator renumbers every seed: re-run the range and list what fails then.
KNOWN_FAILING: dict[tuple[str, int], str] = {
    # Rank 2 turns unhealthy (every rank with it) and the Controller restarts inside the collection
    # window: the NodeManagers count the UNHEALTHY reports as delivered, nothing re-arms them, and
    # the restarted Controller keeps the instance NORMAL and published with every rank unhealthy.
    ("vllm", 131): "defect 4: lost reports are never sent again (unhealthy, then a Controller restart)",
    # A pod's NodeManager crashes during a reconfiguration's StartEngines: that call fails, and
    # asyncio.gather raises without cancelling the other pod's StartEngines, which stays in flight
    # into the next attempt (its StopEngines overlaps it).
    ("vllm", 45): "found: a failed reconfiguration's sibling StartEngines stays in flight into the next attempt",
    ("rfc", 45): "found: a failed reconfiguration's sibling StartEngines stays in flight into the next attempt",
}


def _cases():
    for dialect, seeds in RANGES.items():
        for seed in seeds:
            reason = KNOWN_FAILING.get((dialect, seed))
            marks = [pytest.mark.xfail(reason=reason, strict=False)] if reason else []
            yield pytest.param(dialect, seed, marks=marks, id=f"{dialect}-{seed}")


@pytest.mark.parametrize(("dialect", "seed"), list(_cases()))
def test_seed_keeps_every_invariant(dialect: str, seed: int) -> None:
    result = run(seed, dialect)
    assert not result.violations, "\n".join(
        [f"seed={seed} dialect={dialect}"] + [f"{v.invariant} at t={v.at_sec:.3f}: {v.message}"
                                              for v in result.violations] + result.trace)
