"""The CI seed range: fixed seeds of every dialect run on every commit and keep every invariant.

Sized to take about a minute on a 2-core machine. A seed that fails prints its violations and the
trace; replay it with `python -m motor.simulation --seeds 1 --seed S --dialect D` (which shrinks it).
"""

from __future__ import annotations

import pytest

from motor.simulation.runner import run

RANGES = {"vllm": range(0, 180), "rfc": range(0, 60), "vllm-0.33": range(0, 35), "sglang": range(0, 30)}
# Engines that declare scale_up: every schedule also restores the instance by an elastic scale-up
# once it serves scaled down, with faults around that round (`--scale-up`).
SCALE_UP_RANGES = {"vllm": range(0, 30), "rfc": range(0, 15)}


def _cases():
    for scale_up, ranges in ((False, RANGES), (True, SCALE_UP_RANGES)):
        for dialect, seeds in ranges.items():
            for seed in seeds:
                yield pytest.param(dialect, seed, scale_up, id=f"{dialect}-{seed}{'-scale-up' if scale_up else ''}")


@pytest.mark.parametrize(("dialect", "seed", "scale_up"), list(_cases()))
def test_seed_keeps_every_invariant(dialect: str, seed: int, scale_up: bool) -> None:
    result = run(seed, dialect, scale_up=scale_up)
    assert not result.violations, "\n".join(
        [f"seed={seed} dialect={dialect} scale_up={scale_up}"] + [f"{v.invariant} at t={v.at_sec:.3f}: {v.message}"
                                                                  for v in result.violations] + result.trace)
