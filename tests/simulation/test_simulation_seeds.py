"""The CI seed range: fixed seeds of every dialect run on every commit and keep every invariant.

Sized to take about a minute on a 2-core machine. A seed that fails prints its violations and the
trace; replay it with `python -m motor.simulation --seeds 1 --seed S --dialect D` (which shrinks it).
"""

from __future__ import annotations

import pytest

from motor.simulation.runner import run

RANGES = {"vllm": range(0, 180), "rfc": range(0, 60), "vllm-0.33": range(0, 35), "sglang": range(0, 30)}



def _cases():
    for dialect, seeds in RANGES.items():
        for seed in seeds:
            yield pytest.param(dialect, seed, id=f"{dialect}-{seed}")


@pytest.mark.parametrize(("dialect", "seed"), list(_cases()))
def test_seed_keeps_every_invariant(dialect: str, seed: int) -> None:
    result = run(seed, dialect)
    assert not result.violations, "\n".join(
        [f"seed={seed} dialect={dialect}"] + [f"{v.invariant} at t={v.at_sec:.3f}: {v.message}"
                                              for v in result.violations] + result.trace)
