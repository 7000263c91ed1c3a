"""The CI seed range: fixed seeds of every dialect run on every commit and keep every invariant.

Sized to take about a minute on a 2-core machine. A seed that fails prints its violations and the
trace; replay it with `python -m motor.simulation --seeds 1 --seed S --dialect D` (which shrinks it).
"""

from __future__ import annotations

import pytest

from motor.simulation.runner import run

RANGES = {"vllm": range(0, 300), "rfc": range(0, 80), "vllm-0.33": range(0, 50)}

# Seeds that fail today, each with the known fault it finds; they run as expected failures until
# the fix is merged, then this is emptied (every seed must keep every invariant). A change of the
# schedule generator renumbers every seed: re-run the range and list what fails then.
KNOWN_FAILING: dict[tuple[str, int], str] = {
    # A fault just before or during a Controller restart: the NodeManagers' reports fail while it is
    # down, are dropped after their attempts (or were already counted as delivered) and nothing
    # re-arms them; the restarted Controller holds no evidence and keeps the instance published.
    ("vllm", 24): "defect 4: lost reports are never sent again (unhealthy rank, then a Controller restart)",
    ("rfc", 24): "defect 4: lost reports are never sent again (unhealthy rank, then a Controller restart)",
    ("vllm-0.33", 24): "defect 4: lost reports are never sent again (unhealthy rank, then a Controller restart)",
    ("vllm", 134): "defect 4: lost reports are never sent again (executor death, then a Controller restart)",
    ("vllm", 137): "defect 4: lost reports are never sent again (executor death while the Controller is down)",
    ("vllm", 182): "defect 4: lost reports are never sent again (executor death while the Controller is down)",
    ("vllm", 207): "defect 4: lost reports are never sent again (unhealthy rank, then a Controller restart)",
    ("vllm", 237): "defect 4: lost reports are never sent again (unhealthy rank, then a Controller restart)",
    ("vllm", 254): "defect 4: lost reports are never sent again (executor death, then a Controller restart)",
    ("vllm", 287): "defect 4: lost reports are never sent again (unhealthy rank while the Controller is down)",
    ("vllm", 289): "defect 4: lost reports are never sent again (unhealthy rank while the Controller is down)",
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
