"""`python -m motor.simulation --seeds N [--seed S] [--steps K] [--dialect vllm|rfc|vllm-0.33]`

Runs N schedules from seed S, prints every violation with its seed and its shrunk trace, the
violations by invariant, and ends with `N seeds, M schedules/s, K violations` (exit status 1 when
K > 0). Python's str hashing is randomised per process and changes set iteration orders, so the
command re-executes itself with PYTHONHASHSEED=0 when that is not set: a seed replays exactly.
"""

from __future__ import annotations

import argparse
import collections
import logging
import os
import sys
import time

from motor.simulation.engines import DIALECTS
from motor.simulation.invariants import INVARIANTS
from motor.simulation.runner import RunResult, run, shrink


def _parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m motor.simulation", description=__doc__.splitlines()[2])
    p.add_argument("--seeds", type=int, default=100, help="how many seeds to run (default 100)")
    p.add_argument("--seed", type=int, default=0, help="the first seed (default 0)")
    p.add_argument("--steps", type=int, default=120, help="steps of 0.5 virtual seconds per schedule (default 120)")
    p.add_argument("--dialect", choices=DIALECTS, default="vllm", help="the engines' FT dialect (default vllm)")
    p.add_argument("--no-shrink", action="store_true", help="print a violation's full trace, not the shrunk one")
    p.add_argument("--verbose", action="store_true", help="log the code under test (WARNING and above)")
    return p.parse_args(argv)


def report(result: RunResult) -> str:
    lines = [f"VIOLATION seed={result.seed} dialect={result.dialect}"]
    lines += [f"  {v.invariant} at t={v.at_sec:.3f}: {v.message}" for v in result.violations]
    lines.append("  schedule: " + "; ".join(e.describe() if e.after else f"t+{e.at_sec:.3f} {e.describe()}"
                                            for e in result.events))
    lines.append(f"  replay: python -m motor.simulation --seeds 1 --seed {result.seed} --dialect {result.dialect}")
    lines += [f"    {line}" for line in result.trace]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = _parse(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.WARNING if args.verbose else logging.CRITICAL + 1)
    by_invariant: collections.Counter[str] = collections.Counter()
    started = time.monotonic()
    for seed in range(args.seed, args.seed + args.seeds):
        result = run(seed, args.dialect, args.steps)
        if result.failed:
            by_invariant.update(v.invariant for v in result.violations)
            shown = result if args.no_shrink else shrink(result, args.steps)
            print(report(shown), flush=True)
    elapsed = max(time.monotonic() - started, 1e-9)
    total = sum(by_invariant.values())
    print(f"seeds {args.seed}..{args.seed + args.seeds - 1} ({args.dialect}, {args.steps} steps)")
    for name in INVARIANTS:
        print(f"  {name}: {by_invariant.get(name, 0)}")
    print(f"{args.seeds} seeds, {args.seeds / elapsed:.1f} schedules/s, {total} violations")
    return 1 if total else 0


if __name__ == "__main__":
    if os.environ.get("PYTHONHASHSEED") != "0":
        os.execve(sys.executable, [sys.executable, "-m", "motor.simulation", *sys.argv[1:]],
                  {**os.environ, "PYTHONHASHSEED": "0"})
    sys.exit(main())
