"""Takeover benchmark: two Controller replicas on a local etcd, the leader SIGKILLed.

    .venv/bin/python -m benchmarks.takeover [--trials 10] [--ttl 5] [--json out.json]

1. Takeover: leader SIGKILL → the standby leads and acts (its status page says is_leader, which it
   does only once it has restored the store and started the FaultManager). Polled every 20 ms from
   outside; the replica's own share (term won → acting, `motor_controller_takeover_seconds`) is read
   from its /metrics.
2. Fault → published with a leader kill in the middle: rank 1's executor dies, the round is held
   in SCALING_DOWN by slow rebuilds (--rebuild-delay-sec), the leader is SIGKILLed there; the new
   leader restores the round as interrupted (RFC §5) and reconfigures the whole instance. Measured
   from the injection to the end of the new leader's publication (its own timeline), split into
   fault → kill, kill → acting, acting → published.

One cluster (DP=4, two pods of two ranks) for every trial: each kill is followed by a restart of the
killed replica, which comes back as the standby. Median and p95 over --trials; numbers print as a
table and never assert (the target is takeover ≤ TTL + 1 s median); --json writes everything.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import tempfile
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from motor.launch.cluster import LocalCluster
from motor.launch.load import trigger_traffic
from motor.launch.processes import ServiceProc
from motor.launch.shutdown import exit_on_sigterm
from motor.launch.spec import ClusterSpec

_POLL_SEC = 0.02
MID_ROUND = ("DECIDING", "WAITING_ENGINE_FAULT", "SCALING_DOWN", "POST_SCALE_CLEANUP")


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def _acting(cluster: LocalCluster, svc: ServiceProc) -> bool:
    doc = cluster.controller_status(svc, timeout_sec=1.0)
    return bool(doc and (doc.get("leadership") or {}).get("is_leader"))


def _wait_acting(cluster: LocalCluster, svc: ServiceProc, timeout_sec: float) -> float:
    """Wall time at which `svc` was first seen acting as the leader."""
    deadline = time.monotonic() + timeout_sec
    while time.monotonic() < deadline:
        if _acting(cluster, svc):
            return time.time()
        time.sleep(_POLL_SEC)
    raise RuntimeError(f"{svc.name} did not take over within {timeout_sec:g}s")


def _standby(cluster: LocalCluster) -> ServiceProc:
    leader = cluster.leader()
    return next(s for s in cluster.controllers if s is not leader)


def _own_takeover_sec(cluster: LocalCluster, svc: ServiceProc) -> float | None:
    """The replica's own last term won → acting (the histogram's sum minus what it had before)."""
    url = f"{'https' if cluster.pki else 'http'}://127.0.0.1:{svc.info['http_port']}/metrics"
    with urllib.request.urlopen(url, timeout=5, context=cluster.http_context()) as resp:
        text = resp.read().decode()
    found = re.search(r"^motor_controller_takeover_seconds_sum (\S+)$", text, re.MULTILINE)
    return float(found.group(1)) if found else None


def run_takeovers(cluster: LocalCluster, trials: int) -> list[dict[str, Any]]:
    out = []
    for n in range(trials):
        leader, standby = cluster.leader(), _standby(cluster)
        before = _own_takeover_sec(cluster, standby) or 0.0
        killed = time.time()
        cluster.kill_controller(leader)
        acting = _wait_acting(cluster, standby, 60.0)
        own = (_own_takeover_sec(cluster, standby) or 0.0) - before
        out.append({"takeover_sec": acting - killed, "won_to_acting_sec": own})
        print(f"  takeover {n + 1}/{trials}: {leader.name} killed, {standby.name} acting after "
              f"{acting - killed:.3f}s (won → acting {own * 1000:.1f} ms)", flush=True)
        cluster.restart_controller(svc=leader)
    return out


def _publish_end(txn: dict[str, Any]) -> float | None:
    ends = [e["at_unix_sec"] + e["duration_sec"] for e in txn["events"] if e["name"] == "publish" and e["outcome"] == "ok"]
    return max(ends) if ends else None


def run_killed_rounds(cluster: LocalCluster, trials: int, rebuild_delay_sec: float, timeout_sec: float) -> list[dict[str, Any]]:
    out = []
    for n in range(trials):
        leader, standby = cluster.leader(), _standby(cluster)
        for rank in (0, 2, 3):
            cluster.inject(rank, "slow_rebuild", delay_sec=rebuild_delay_sec)
        fault = time.time()
        cluster.inject(1, "executor_death")
        trigger_traffic(cluster)
        rt = cluster.wait_until(lambda rt: rt["phase"] in MID_ROUND, timeout_sec, "the round in flight")
        phase_at_kill = rt["phase"]
        killed = time.time()
        cluster.kill_controller(leader)
        acting = _wait_acting(cluster, standby, timeout_sec)
        rt = cluster.wait_until(lambda rt: rt["can_serve"] and rt["phase"] in ("NORMAL", "SCALED_DOWN_RUNNING"),
                                timeout_sec * 3, "recovery under the new leader")
        txns = [t for t in cluster.timeline() if t["started_at_unix_sec"] >= killed]
        published = max((p for t in txns if (p := _publish_end(t)) is not None), default=time.time())
        out.append({"phase_at_kill": phase_at_kill,
                    "fault_to_kill_sec": killed - fault, "kill_to_acting_sec": acting - killed,
                    "acting_to_published_sec": published - acting, "fault_to_published_sec": published - fault,
                    "strategies": [t["strategy"] for t in txns], "final_phase": rt["phase"]})
        print(f"  killed round {n + 1}/{trials}: fault → published {published - fault:.2f}s "
              f"(kill after {killed - fault:.2f}s, acting {acting - killed:.2f}s later, then "
              f"{[t['strategy'] for t in txns]} published {published - acting:.2f}s later)", flush=True)
        cluster.restart_controller(svc=leader)
    return out


def summarize(takeovers: list[dict[str, Any]], rounds: list[dict[str, Any]], ttl: int) -> str:
    lines = [f"Controller takeover (2 replicas, lease ttl {ttl}s; target: median ≤ ttl + 1 s = {ttl + 1}s)",
             f"  {'measure':<48} {'median':>9} {'p95':>9} {'trials':>7}"]

    def row(label: str, values: list[float], unit: str = "s") -> None:
        scale = 1000.0 if unit == "ms" else 1.0
        lines.append(f"  {label + ' (' + unit + ')':<48} {statistics.median(values) * scale:>9.3f} "
                     f"{_pct(values, 0.95) * scale:>9.3f} {len(values):>7}")

    if takeovers:
        row("leader SIGKILL → new leader acting", [t["takeover_sec"] for t in takeovers])
        row("  of which term won → acting (restore, start)", [t["won_to_acting_sec"] for t in takeovers], "ms")
    if rounds:
        row("fault → published, leader killed mid-round", [r["fault_to_published_sec"] for r in rounds])
        row("  fault → leader killed", [r["fault_to_kill_sec"] for r in rounds])
        row("  killed → new leader acting", [r["kill_to_acting_sec"] for r in rounds])
        row("  acting → published (fallback)", [r["acting_to_published_sec"] for r in rounds])
        phases: dict[str, int] = {}
        for r in rounds:
            phases[r["phase_at_kill"]] = phases.get(r["phase_at_kill"], 0) + 1
        outcomes: dict[str, int] = {}
        for r in rounds:
            key = "+".join(r["strategies"]) or "none"
            outcomes[key] = outcomes.get(key, 0) + 1
        lines.append(f"  killed in: {phases}; new leader ran: {outcomes}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="benchmarks.takeover", description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--ttl", type=int, default=5, help="leader_election.lease_ttl_sec (the Controller's default)")
    parser.add_argument("--rebuild-delay-sec", type=float, default=2.0)
    parser.add_argument("--round-timeout-sec", type=float, default=60.0)
    parser.add_argument("--skip-rounds", action="store_true", help="takeover trials only")
    parser.add_argument("--work-dir", type=Path, default=None)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="motor-takeover-"))
    print(f"takeover benchmark: {args.trials} trials each, lease ttl {args.ttl}s (logs in {work})", flush=True)
    with exit_on_sigterm():
        cluster = LocalCluster(ClusterSpec(start_etcd=True, controller_replicas=2, leader_lease_ttl_sec=args.ttl),
                               work / "cluster")
        cluster.start()
        try:
            takeovers = run_takeovers(cluster, args.trials)
            rounds = [] if args.skip_rounds else run_killed_rounds(cluster, args.trials, args.rebuild_delay_sec,
                                                                   args.round_timeout_sec)
        finally:
            cluster.stop()
    print()
    print(summarize(takeovers, rounds, args.ttl))
    if args.json is not None:
        args.json.write_text(json.dumps({"ttl_sec": args.ttl, "takeovers": takeovers, "killed_rounds": rounds},
                                        indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
