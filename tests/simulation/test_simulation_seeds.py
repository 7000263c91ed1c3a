"""The CI seed range: fixed seeds of every dialect run on every commit and keep every invariant.

Sized to take about a minute on a 2-core machine. A seed that fails prints its violations and the
trace; replay it with `python -m motor.simulation --seeds 1 --seed S --dialect D` (which shrinks it).
"""

from __future__ import annotations

import pytest

from motor.simulation.runner import run

RANGES = {"vllm": range(0, 160), "rfc": range(0, 40), "vllm-0.33": range(0, 30)}

# Seeds that fail today, each with the known fault it finds; they run as expected failures until
# the fix is merged, then this is emptied (every seed must keep every invariant).
KNOWN_FAILING: dict[tuple[str, int], str] = {
    # A report sent while the Controller is down is dropped after its attempts and never re-armed:
    # the restarted Controller holds no evidence and every rank stays unhealthy under NORMAL.
    ("vllm", 137): "defect 4: lost reports are never sent again (unhealthy during a Controller restart)",
    ("vllm", 138): "defect 4: lost reports are never sent again (unhealthy during a Controller restart)",
    # A failed reconfiguration attempt leaves its sibling StartEngines call running (asyncio.gather
    # without cancelling the others on the first PeerCallError); the next attempt's StopEngines
    # overlaps it.
    ("vllm", 130): "new: a failed reconfiguration's sibling calls stay in flight into the next attempt",
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
