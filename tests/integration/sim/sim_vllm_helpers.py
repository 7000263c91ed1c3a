"""Shared by the vLLM-dialect engine tests: a 4-rank group on 127.0.0.1..4 and status watching."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from motor.sim.client import SimClient
from motor.sim.cluster import SimCluster
from motor.testing.waits import wait_for

HOSTS = ["127.0.0.1", "127.0.0.2", "127.0.0.3", "127.0.0.4"]
REPO_ROOT = Path(__file__).resolve().parents[3]
WAIT_SEC = 20.0
# 2 logical experts in 8 slots: every rank holds both, so any set of survivors stays feasible.
BASE_ARGS = [
    "--enable-fault-tolerance", "--enable-fault-injection", "--ft-dialect", "vllm",
    "--num-experts", "2", "--num-redundant-experts", "6",
    "--per-token-latency-sec", "0.005", "--collective-timeout-sec", "3", "--engine-recovery-timeout-sec", "20",
]

Entry = dict[str, Any]


def start_group(run_dir: Path, extra_args: Sequence[str]) -> SimCluster:
    return SimCluster.start(run_dir, len(HOSTS), hosts=HOSTS, cwd=REPO_ROOT, ready_timeout_sec=90,
                            extra_args=[*BASE_ARGS, *extra_args])


def watch_ranks(clients: Sequence[SimClient], ranks: Sequence[int], pred: Callable[[Entry], bool],
                what: str) -> tuple[dict[int, Entry], dict[int, list[str]]]:
    """Polls every rank's entry together until ``pred`` holds for all; returns the last entries and,
    per rank, the statuses seen on the way (consecutive repeats folded)."""
    last: dict[int, Entry] = {}
    seen: dict[int, list[str]] = {r: [] for r in ranks}

    def check() -> bool:
        for r in ranks:
            last[r] = clients[r].entry()
            if not seen[r] or seen[r][-1] != last[r]["status"]:
                seen[r].append(last[r]["status"])
        return all(pred(last[r]) for r in ranks)

    try:
        wait_for(check, WAIT_SEC, what, ignoring=Exception)  # a rank mid-rebuild may not answer yet
    except AssertionError as exc:
        raise AssertionError(f"{exc}; last status: {last}") from None
    return last, seen


def watch(client: SimClient, pred: Callable[[Entry], bool], what: str) -> Entry:
    return watch_ranks([client], [0], pred, what)[0][0]


def status_is(status: str) -> Callable[[Entry], bool]:
    return lambda e: e["status"] == status
