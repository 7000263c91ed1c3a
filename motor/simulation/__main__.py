"""`python -m motor.simulation --seeds N [--seed S] [--steps K] [--dialect vllm|rfc|vllm-0.33] [--jobs J] [--scale-up]`

Runs N schedules from seed S, prints every violation with its seed and its shrunk trace, the
violations by invariant, and ends with `N seeds, M schedules/s, K violations` (exit status 1 when
K > 0). Python's str hashing is randomised per process and changes set iteration orders, so the
command re-executes itself with PYTHONHASHSEED=0 when that is not set: a seed replays exactly.
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import logging
import os
import sys
import time
from collections.abc import Iterator

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
    p.add_argument("--scale-up", action="store_true",
                   help="the engines declare scale_up: each schedule also asks for a restoration once the instance "
                        "serves scaled down (an elastic scale-up), with faults around its round")
    p.add_argument("--jobs", type=int, default=1,
                   help="worker processes, each running its share of the seeds (default 1)")
    args = p.parse_args(argv)
    if args.jobs < 1:
        p.error(f"--jobs {args.jobs} must be at least 1")
    return args


def report(result: RunResult) -> str:
    lines = [f"VIOLATION seed={result.seed} dialect={result.dialect}"]
    lines += [f"  {v.invariant} at t={v.at_sec:.3f}: {v.message}" for v in result.violations]
    lines.append("  schedule: " + "; ".join(e.describe() if e.after else f"t+{e.at_sec:.3f} {e.describe()}"
                                            for e in result.events))
    lines.append(f"  replay: python -m motor.simulation --seeds 1 --seed {result.seed} --dialect {result.dialect}"
                 + (" --scale-up" if result.scale_up else ""))
    lines += [f"    {line}" for line in result.trace]
    return "\n".join(lines)


# Seeds per task of a worker: small enough that the workers end together, large enough that
# handing out tasks costs nothing next to running them.
CHUNK_SEEDS = 50


def _run_seeds(first: int, count: int, dialect: str, steps: int, no_shrink: bool,
               verbose: bool, scale_up: bool = False) -> list[tuple[list[str], str]]:
    """Runs seeds first..first+count-1; returns (violated invariants, report) per failed seed."""
    logging.basicConfig(level=logging.WARNING if verbose else logging.CRITICAL + 1)
    out = []
    for seed in range(first, first + count):
        result = run(seed, dialect, steps, scale_up=scale_up)
        if result.failed:
            shown = result if no_shrink else shrink(result, steps)
            out.append(([v.invariant for v in result.violations], report(shown)))
    return out


def _chunks(first: int, count: int) -> Iterator[tuple[int, int]]:
    for start in range(first, first + count, CHUNK_SEEDS):
        yield start, min(CHUNK_SEEDS, first + count - start)


def main(argv: list[str] | None = None) -> int:
    args = _parse(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.WARNING if args.verbose else logging.CRITICAL + 1)
    by_invariant: collections.Counter[str] = collections.Counter()
    started = time.monotonic()
    work = [(start, n, args.dialect, args.steps, args.no_shrink, args.verbose, args.scale_up)
            for start, n in _chunks(args.seed, args.seeds)]
    if args.jobs == 1:
        outcomes: Iterator[list[tuple[list[str], str]]] = (_run_seeds(*w) for w in work)
    else:
        pool = concurrent.futures.ProcessPoolExecutor(max_workers=args.jobs)
        outcomes = pool.map(_run_seeds, *zip(*work))  # in seed order, as each chunk is done
    for failed in outcomes:
        for invariants, text in failed:
            by_invariant.update(invariants)
            print(text, flush=True)
    if args.jobs > 1:
        pool.shutdown()
    elapsed = max(time.monotonic() - started, 1e-9)
    total = sum(by_invariant.values())
    print(f"seeds {args.seed}..{args.seed + args.seeds - 1} ({args.dialect}, {args.steps} steps"
          f"{', scale-up' if args.scale_up else ''})")
    for name in INVARIANTS:
        print(f"  {name}: {by_invariant.get(name, 0)}")
    print(f"{args.seeds} seeds, {args.seeds / elapsed:.1f} schedules/s, {total} violations")
    return 1 if total else 0


if __name__ == "__main__":
    if os.environ.get("PYTHONHASHSEED") != "0":
        os.execve(sys.executable, [sys.executable, "-m", "motor.simulation", *sys.argv[1:]],
                  {**os.environ, "PYTHONHASHSEED": "0"})
    sys.exit(main())
