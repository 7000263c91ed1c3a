"""Shared arithmetic of the benchmarks: percentiles, call intervals of a round's timeline, CPU time."""

from __future__ import annotations

import math
import os
import statistics
from collections.abc import Iterable
from typing import Any

import psutil


def pct(values: Iterable[float], q: float) -> float:
    """Nearest-rank percentile (q in [0, 1]) of the finite values; NaN when there are none."""
    ordered = sorted(v for v in values if v == v and math.isfinite(v))
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def distribution(values: list[float]) -> dict[str, float]:
    """Count, p50 / p95 / p99 and max of latencies in ms."""
    return {"n": len(values), "p50_ms": pct(values, 0.5), "p95_ms": pct(values, 0.95), "p99_ms": pct(values, 0.99),
            "max_ms": max(values) if values else float("nan")}


def median(values: Iterable[float]) -> float:
    finite = [v for v in values if v == v and math.isfinite(v)]
    return statistics.median(finite) if finite else float("nan")


def calls(txn: dict[str, Any], name: str | None = None) -> list[dict[str, Any]]:
    return [e for e in txn["events"] if e["event_kind"] == "CALL" and (name is None or e["name"] == name)]


def end(event: dict[str, Any]) -> float:
    return event["at_unix_sec"] + event["duration_sec"]


def union_sec(intervals: Iterable[tuple[float, float]]) -> float:
    """Wall time covered by at least one interval (concurrent calls count once)."""
    total, cur_start, cur_end = 0.0, None, None
    for start, stop in sorted(intervals):
        if cur_end is None or start > cur_end:
            if cur_end is not None:
                total += cur_end - cur_start  # type: ignore[operator]
            cur_start, cur_end = start, stop
        else:
            cur_end = max(cur_end, stop)
    if cur_end is not None:
        total += cur_end - cur_start  # type: ignore[operator]
    return total


def critical_path_sec(txn: dict[str, Any]) -> float:
    """The Controller's sequential critical path through its calls: the wall time during which at
    least one of its remote calls was outstanding (a fan-out of 32 concurrent calls counts as its
    slowest one, not as their sum)."""
    return union_sec((e["at_unix_sec"], end(e)) for e in calls(txn))


def fanout_walls(txn: dict[str, Any]) -> dict[str, float]:
    """Per call name, the wall time of its fan-outs (first start to last end of each burst of
    overlapping calls), summed over the bursts of the round."""
    out: dict[str, float] = {}
    for name in sorted({e["name"] for e in calls(txn)}):
        out[name] = union_sec((e["at_unix_sec"], end(e)) for e in calls(txn, name))
    return out


def cpu_sec_precise(pid: int) -> float:
    """CPU seconds of a process's live threads in nanoseconds' resolution (/proc/<pid>/task/*/schedstat:
    the scheduler's run time; psutil's clock ticks are 10 ms, as much as a round costs a NodeManager).
    A thread that ended meanwhile drops out: use it for windows over long-lived threads."""
    total = 0
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{task}/schedstat") as f:
                    total += int(f.read().split()[0])
            except (OSError, ValueError, IndexError):
                continue
    except OSError:
        return cpu_sec(pid)
    return total / 1e9


def cpu_sec(pid: int) -> float:
    try:
        times = psutil.Process(pid).cpu_times()
        return times.user + times.system
    except psutil.Error:
        return float("nan")
