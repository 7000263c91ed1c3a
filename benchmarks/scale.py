"""Scale benchmark: the Controller with hundreds of ranks and thousands of endpoints.

    .venv/bin/python -m benchmarks.scale [--dps 16,64,256] [--rounds 10] [--fleet-instances 16]
                                         [--fleet-dp 256] [--window-sec 60] [--watchers 4] [--json out.json]

Real Controller, Coordinator and NodeManager processes over the light fake engines
(`motor.testing.fake_engine --group`: every rank of an instance in one helper process, the
reference engine's vLLM-dialect FT protocol with its `diagnosing` phase; `motor.launch.engines.LightEngines`).

1. Scale-down rounds on one instance of DP = 16, 64, 256 (8 ranks per NodeManager: 2, 8, 32 real
   NodeManager processes), --rounds rounds each, the same victims in every DP (ranks 1, 2, 3, ...;
   executor death: status `dead`, API up, seen by the NodeManager's 1 s poll). Per round, from the
   Controller's timeline and the fake engines' journal (both wall clocks of this machine):
   fault→published, first detection (fault → first evidence at a NodeManager), the engines'
   diagnosing (fault → last survivor `unhealthy`), their rebuild (last check-in → last survivor
   `healthy`), and the **Controller-added time**: fault→published minus max(first detection,
   diagnosing) minus rebuild — i.e. snapshot completion (engines ready → decision), the round up to
   the last apply (guard, status, drain, apply), and after the rebuild (poll, finalize, publish).
   Median and p95 per DP, and the growth from the smallest to the largest DP. Beside it, what is
   not the Controller's though it counts here: the slowest engine answer to an apply (one fake-engine
   process answers all 256 ranks), the CPU per round of each process group (32 NodeManagers and
   the engines share this machine's 2 cores; a fleet spreads them over its hosts), and the
   Controller's own time: decision → published with no remote call outstanding (Controller-added is
   the snapshot wait + the calls' critical path − the rebuild + this).
2. A fleet of --fleet-instances × --fleet-dp endpoints (8 per pod; NodeManagers hosted
   --pods-per-host per process by motor.testing.nodemanager_host, because 512 NodeManager processes
   do not fit this machine) heartbeating at 1 Hz, no faults: Controller CPU (% of one core) and RSS
   over --window-sec, heartbeat latency (probe Heartbeats a pod would send, 5 per second, measured
   by the caller), status API latency (the JSON page of every instance, of one instance, gRPC
   GetFaultToleranceStatus, and a WatchFaultToleranceStatus opened anew each second until its
   snapshot of every instance arrived, beside two that stay open), Controller log growth. The
   NodeManagers poll their engines every --fleet-poll-sec (default 8 s: 4,096 polls a second would
   starve a 2-core machine, and the Controller never sees them).
3. Every fleet instance faulting at once (kill_process on rank 1 of each: placeholder process and
   fake API gone, so every NodeManager's process watch reports within milliseconds): all must
   recover by scale-down; per instance fault→published and Controller-added, the total time (first
   fault to last publication) and how many rounds ran at the same time (no global lock: a
   serialised Controller would show 1). --watchers WatchFaultToleranceStatus streams of every
   instance stay open meanwhile: how late each change reaches them, and whether each ends on every
   instance's last state.

Targets are printed beside the numbers, never asserted. Runs in about 10 minutes here; --json
writes every number.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import signal
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psutil

from benchmarks.plots import PlotError, RunInfo, plot_scale, require_matplotlib
from benchmarks.round_cost import RoundCost, diff
from benchmarks.round_model import DEFAULT_RTT_MS, call_bursts
from benchmarks.round_report import cost_summary, render_costs
from benchmarks.status_probes import Probes
from benchmarks.timing import calls, cpu_sec, critical_path_sec, distribution, end, fanout_walls, median, pct
from motor.launch.cluster import LocalCluster
from motor.launch.engines import LightEngines
from motor.launch.shutdown import exit_on_sigterm
from motor.common.profiling import PROFILE_DIR_ENV
from motor.launch.spec import ClusterSpec
from motor.testing.waits import wait_for

log = logging.getLogger("benchmarks.scale")

TARGET_ADDED_P95_MS = 150.0
TARGET_GROWTH = 2.0
TARGET_CPU_PCT = 25.0
TARGET_SIMULTANEOUS_RATIO = 3.0


# ---- 1. one instance, growing DP ---------------------------------------------------------------

def analyse_round(txn: dict[str, Any], fault_sec: float, events: list[dict[str, Any]], victims: set[int]) -> dict[str, Any]:
    """Times of one successful round, absolute (unix seconds) and as durations (seconds)."""
    evidence = [e for e in txn["events"] if e["event_kind"] == "EVIDENCE"]
    decision = next(e["at_unix_sec"] for e in txn["events"] if e["event_kind"] == "DECISION")
    published = end(calls(txn, "publish")[-1])
    first_evidence = min(e["observed_at_unix_sec"] for e in evidence)
    unhealthy = [e["at_unix_sec"] for e in events if e["event"] == "unhealthy" and e["rank"] not in victims]
    checked_in = [e["at_unix_sec"] for e in events if e["event"] == "all_checked_in"]
    healthy = [e["at_unix_sec"] for e in events if e["event"] == "healthy"]
    diagnosed = max(unhealthy) if unhealthy else fault_sec
    engines_ready = max(first_evidence, diagnosed)
    rebuild = (max(healthy) - checked_in[-1]) if healthy and checked_in else float("nan")
    critical_path = critical_path_sec(txn)
    out = {
        "fault_to_published_sec": published - fault_sec,
        "first_detection_sec": first_evidence - fault_sec,
        "engine_diagnosing_sec": diagnosed - fault_sec,
        "engine_rebuild_sec": rebuild,
        "snapshot_to_decision_sec": decision - engines_ready,
        "decision_to_last_checkin_sec": (checked_in[-1] - decision) if checked_in else float("nan"),
        "healthy_to_published_sec": (published - max(healthy)) if healthy else float("nan"),
        "controller_added_sec": published - fault_sec - (engines_ready - fault_sec) - rebuild,
        "controller_call_critical_path_sec": critical_path,
        # Decision to publication with no remote call outstanding: the Controller's own sequential work
        # (judging, phases, persistence). Controller-added = snapshot_to_decision + (critical path −
        # rebuild) + this, so what is not this was spent waiting on the NodeManagers and the engines.
        "controller_own_sec": published - decision - critical_path,
        # The slowest engine answer to an apply, as its NodeManager timed the HTTP round trip: at DP=256
        # one fake-engine process answers every rank, so this is mostly that process's queue.
        "apply_engine_http_sec": max((r["elapsed_sec"] for e in calls(txn, "apply") for r in e["apply_results"]),
                                     default=float("nan")),
        "fanout_wall_sec": fanout_walls(txn),
        "evidence_events": len(evidence),
        "status_calls": len(calls(txn, "status")),
        "call_bursts": call_bursts(txn),
    }
    return out


def fleet_spec(*, engine_poll_interval_sec: float = 1.0, **kwargs: Any) -> ClusterSpec:
    """A fleet as this benchmark runs it: 8 ranks per pod on per-instance addresses, 1 s heartbeats,
    the services' own defaults for every other timing (a production-like Controller load)."""
    return ClusterSpec(address_plan="per_instance", ranks_per_pod=8, num_redundant_experts=16,
                       heartbeat_timeout_sec=None, publish_interval_sec=None, reconfiguration_timeout_sec=None,
                       engine_poll_interval_sec=engine_poll_interval_sec, log_level="INFO", **kwargs)


def _toggle_profiles(fleet: LocalCluster) -> None:
    """SIGUSR1 to the Controller and every NodeManager: cProfile on, or off and written
    (motor.common.profiling; only when the benchmark runs with --profile)."""
    for pid in [fleet.controller.proc.pid, *(p.pid for p in fleet.nodemanager_processes())]:  # type: ignore[union-attr]
        os.kill(pid, signal.SIGUSR1)


def run_dp_rounds(dp: int, rounds: int, work: Path, diagnosing_sec: float, profile: bool = False) -> dict[str, Any]:
    spec = fleet_spec(dp_size=dp)
    fleet = LocalCluster(spec, work / f"dp{dp}", engines=LightEngines(diagnosing_sec=diagnosing_sec))
    out: list[dict[str, Any]] = []
    started = time.monotonic()
    fleet.start(300)
    startup = time.monotonic() - started
    cost = RoundCost(fleet)
    try:
        time.sleep(2.0)  # every NodeManager polled once and heartbeated
        alive = list(range(dp))
        removed: set[int] = set()
        for n in range(rounds):
            victim = n + 1
            before = len(fleet.timeline())
            mark = fleet.journal_length()
            idle = cost.idle_rates(1.0)
            sample0 = cost.take(first=True)
            if profile:
                _toggle_profiles(fleet)
            fault_sec = time.time()
            fleet.inject(victim, "executor_death")
            alive.remove(victim)
            removed.add(victim)
            fleet.wait_instances_serving([1], 90, alive={1: list(alive)}, poll_sec=0.5)
            if profile:
                _toggle_profiles(fleet)
            # Before the timeline is fetched: rendering it is the benchmark's load, not the round's.
            round_cost = diff(sample0, cost.take(first=False), idle)
            cpu = {k: v["sum_ms"] for k, v in round_cost["cpu"].items() if k != "wall_ms"}
            txns, txn = fleet.finished_round(before)
            if len(txns) <= before or txn["strategy"] != "dp_scale_down" or txn["outcome"] != "succeeded":
                raise RuntimeError(f"DP={dp} round on rank {victim} did not scale down: {txn['strategy']} "
                                   f"{txn['outcome']}")
            _, events = fleet.journal(mark)
            r = {"victim": victim, **analyse_round(txn, fault_sec, events, removed), "cpu_ms": cpu,
                 "cost": round_cost}
            out.append(r)
            print(f"  DP={dp:<4} round {n + 1:>2}/{rounds} rank {victim:>2}: fault→published "
                  f"{1000 * r['fault_to_published_sec']:7.1f} ms, Controller-added {1000 * r['controller_added_sec']:6.1f} ms "
                  f"(snapshot {1000 * r['snapshot_to_decision_sec']:5.1f}, to check-in "
                  f"{1000 * r['decision_to_last_checkin_sec']:5.1f}, after rebuild {1000 * r['healthy_to_published_sec']:5.1f}); "
                  f"CPU: Controller {cpu['controller']:.0f}, NodeManager median "
                  f"{round_cost['cpu']['nodemanagers']['median_ms']:.1f} ms "
                  f"({round_cost['cpu']['nodemanagers']['net_median_ms']:.1f} above idle)", flush=True)
            time.sleep(0.5)
    finally:
        cost.close()
        logs = fleet.log_bytes()
        fleet.stop()
    return {"dp": dp, "nodemanagers": spec.pods_per_instance, "startup_sec": startup, "rounds": out, "log_bytes": logs}


# ---- 2. the fleet at steady state ---------------------------------------------------------------

def _process_groups(fleet: LocalCluster) -> dict[str, list[int]]:
    return {"controller": [fleet.controller.proc.pid], "nodemanagers": [p.pid for p in fleet.nodemanager_processes()],  # type: ignore[union-attr]
            "fake engines": [p.pid for p in fleet.engine_processes.values()], "coordinator": [fleet.coordinator.proc.pid]}  # type: ignore[union-attr]


def measure_steady(fleet: LocalCluster, window_sec: float, warmup_sec: float) -> dict[str, Any]:
    time.sleep(warmup_sec)
    pid = fleet.controller.proc.pid  # type: ignore[union-attr]
    proc = psutil.Process(pid)
    others = {k: v for k, v in _process_groups(fleet).items() if k != "controller"}
    cpu0, others0, logs0, t0 = cpu_sec(pid), {k: sum(cpu_sec(p) for p in v) for k, v in others.items()}, \
        fleet.log_bytes(), time.monotonic()
    probes = Probes(fleet.controller_address, fleet.controller_http, fleet.spec).start()
    time.sleep(window_sec)
    probes.stop()
    wall = time.monotonic() - t0
    cpu1, logs1 = cpu_sec(pid), fleet.log_bytes()
    endpoints = fleet.spec.instances * fleet.spec.dp_size
    out = {
        "endpoints": endpoints, "pods": fleet.spec.instances * fleet.spec.pods_per_instance,
        "window_sec": wall,
        "controller_cpu_pct": 100 * (cpu1 - cpu0) / wall,
        "controller_rss_mb": proc.memory_info().rss / 1e6,
        "other_cpu_pct": {k: 100 * (sum(cpu_sec(p) for p in v) - others0[k]) / wall for k, v in others.items()},
        "log_bytes_per_sec": {k: (logs1[k] - logs0[k]) / wall for k in logs1},
        **probes.summary(),
    }
    return out


# ---- 3. every instance faulting at once ---------------------------------------------------------

def _watchers_end_on(probes: Probes, alive: dict[int, list[int]], bound_sec: float) -> bool:
    """Waits (bounded) until every watcher last saw each instance serving on its survivors."""
    try:
        return wait_for(lambda: probes.watchers_see(alive), bound_sec, "every watcher on every instance's last state")
    except AssertionError:
        return False


def run_simultaneous(fleet: LocalCluster, trials: int, watchers: int = 4) -> list[dict[str, Any]]:
    """`watchers` Watch streams of every instance are open through each trial."""
    spec = fleet.spec
    iids = spec.instance_ids()
    out = []
    alive = {i: list(range(spec.dp_size)) for i in iids}
    for trial in range(trials):
        victim = trial + 1
        pids = {i: fleet.engine_pid(victim, i) for i in iids}
        before = {i: len(fleet.timeline(instance_id=i)) for i in iids}
        marks = {i: fleet.journal_length(instance_id=i) for i in iids}
        groups = _process_groups(fleet)
        cpu0, wall0 = {k: sum(cpu_sec(p) for p in v) for k, v in groups.items()}, time.monotonic()
        probes = Probes(fleet.controller_address, fleet.controller_http, spec, heartbeat_hz=0, status=False,
                        watchers=watchers, watch_snapshots=False).start()
        faults: dict[int, float] = {}
        for i in iids:
            faults[i] = time.time()
            fleet.inject(victim, "kill_process", instance_id=i, engine_pid=pids[i])
            alive[i].remove(victim)
        fleet.wait_instances_serving(iids, 180, alive={i: list(alive[i]) for i in iids}, poll_sec=0.25)
        wall = time.monotonic() - wall0
        cpu_pct = {k: 100 * (sum(cpu_sec(p) for p in v) - cpu0[k]) / wall for k, v in groups.items()}
        watched = _watchers_end_on(probes, alive, 30.0)
        probes.stop()
        watch = {**probes.summary()["watch"], "every_watcher_ended_on_the_last_state": watched}
        per: dict[int, dict[str, Any]] = {}
        intervals = []
        for i in iids:
            txns, txn = fleet.finished_round(before[i], instance_id=i)
            if len(txns) <= before[i] or txn["strategy"] != "dp_scale_down" or txn["outcome"] != "succeeded":
                raise RuntimeError(f"instance {i} did not scale down: {txn['strategy']} {txn['outcome']}")
            _, events = fleet.journal(marks[i], instance_id=i)
            per[i] = analyse_round(txn, faults[i], events, set(range(1, victim + 1)))
            intervals.append((txn["started_at_unix_sec"], end(calls(txn, "publish")[-1])))
        points = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals])
        concurrent = peak = 0
        for _, step in points:
            concurrent += step
            peak = max(peak, concurrent)
        first_fault = min(faults.values())
        total = max(e for _, e in intervals) - first_fault
        round_sum = sum(e - s for s, e in intervals)
        makespan = max(e for _, e in intervals) - min(s for s, _ in intervals)
        r = {"victim": victim, "instances": len(iids), "dp": spec.dp_size, "nodemanagers": len(spec.all_pods()),
             "total_sec": total, "peak_concurrent_rounds": peak,
             "cpu_pct_while_recovering": cpu_pct,
             "round_sum_sec": round_sum, "round_makespan_sec": makespan,
             "per_instance": {str(i): v for i, v in per.items()}, "watch": watch}
        out.append(r)
        print(f"  trial {trial + 1}/{trials}: {len(iids)} instances recovered, total {r['total_sec']:.2f} s, peak "
              f"{peak} rounds at once, rounds' sum {round_sum:.2f} s in a makespan of {makespan:.2f} s; CPU meanwhile "
              + ", ".join(f"{k} {v:.0f} %" for k, v in cpu_pct.items()), flush=True)
        print("    " + _watch_line(watch), flush=True)
        time.sleep(2.0)
    return out


# ---- report ------------------------------------------------------------------------------------

def _watch_line(w: dict[str, Any]) -> str:
    lag = w["lag"]
    ended = "every watcher ended on every instance's last state" if w["every_watcher_ended_on_the_last_state"] \
        else "NOT every watcher ended on every instance's last state"
    return (f"Watch: {w['watchers']} watchers of every instance got {w['messages'] / max(1, w['watchers']):.0f} "
            f"changes each ({w['bytes'] / max(1, w['messages']) / 1024:.1f} KiB each), {w['errors']} errors; change → "
            f"arrival p50/p95/max {lag['p50_ms']:.1f}/{lag['p95_ms']:.1f}/{lag['max_ms']:.1f} ms; {ended}")


def summarize(dps: list[dict[str, Any]], steady: dict[str, Any] | None, simultaneous: list[dict[str, Any]] | None,
              diagnosing_sec: float, rtt_ms: float = DEFAULT_RTT_MS) -> dict[str, Any]:
    s: dict[str, Any] = {"dp": {}, "cost": {str(d["dp"]): cost_summary(d, rtt_ms) for d in dps}}
    for d in dps:
        values = {k: [1000 * r[k] for r in d["rounds"]] for k in d["rounds"][0] if k.endswith("_sec") and k != "fanout_wall_sec"}
        s["dp"][str(d["dp"])] = {k: {"median_ms": median(values[k]), "p95_ms": pct(values[k], 0.95)} for k in (
            "fault_to_published_sec", "first_detection_sec", "engine_diagnosing_sec", "engine_rebuild_sec",
            "controller_added_sec", "snapshot_to_decision_sec", "decision_to_last_checkin_sec",
            "healthy_to_published_sec", "controller_call_critical_path_sec", "controller_own_sec",
            "apply_engine_http_sec")}
    if len(dps) >= 2:
        lo, hi = str(dps[0]["dp"]), str(dps[-1]["dp"])
        s["growth_p95"] = s["dp"][hi]["controller_added_sec"]["p95_ms"] / s["dp"][lo]["controller_added_sec"]["p95_ms"]
        s["growth_median"] = (s["dp"][hi]["controller_added_sec"]["median_ms"]
                              / s["dp"][lo]["controller_added_sec"]["median_ms"])
        s["own_growth_p95"] = s["dp"][hi]["controller_own_sec"]["p95_ms"] / s["dp"][lo]["controller_own_sec"]["p95_ms"]
    if simultaneous:
        added = [1000 * v["controller_added_sec"] for t in simultaneous for v in t["per_instance"].values()]
        f2p = [1000 * v["fault_to_published_sec"] for t in simultaneous for v in t["per_instance"].values()]
        s["simultaneous"] = {"controller_added_median_ms": median(added), "controller_added_p95_ms": pct(added, 0.95),
                             "fault_to_published_median_ms": median(f2p), "fault_to_published_p95_ms": pct(f2p, 0.95),
                             "total_sec_median": median(t["total_sec"] for t in simultaneous),
                             "peak_concurrent_rounds_min": min(t["peak_concurrent_rounds"] for t in simultaneous)}
        alone = s["dp"].get(str(simultaneous[0]["dp"]))
        if alone is not None:
            # One round alone at the same DP (part 1): the target is the total within 3 of those.
            one_ms = alone["fault_to_published_sec"]["median_ms"]
            s["simultaneous"].update(one_round_alone_ms=one_ms,
                                     total_over_one_round=1000 * s["simultaneous"]["total_sec_median"] / one_ms)
    s["diagnosing_sec"] = diagnosing_sec
    return s


def _cell(row: dict[str, Any], fmt: str):
    def cell(key: str, width: int) -> str:
        return f"{fmt.format(row[key]['median_ms'])} / {fmt.format(row[key]['p95_ms'])}".rjust(width)
    return cell


def _steady_lines(steady: dict[str, Any], title: str) -> list[str]:
    hb, sa, so, sg = steady["heartbeat"], steady["status_http_all"], steady["status_http_one"], steady["status_grpc_all"]
    lines = ["", f"2. {steady['endpoints']} endpoints ({steady['pods']} NodeManagers) heartbeating at 1 Hz, {title}, "
             f"{steady['window_sec']:.0f} s window",
             f"  Controller CPU {steady['controller_cpu_pct']:.1f} % of one core (target ≤ {TARGET_CPU_PCT:g} %), "
             f"RSS {steady['controller_rss_mb']:.0f} MB, log {steady['log_bytes_per_sec']['controller']:.0f} B/s",
             f"  {'latency (ms)':<44} {'p50':>8} {'p95':>8} {'p99':>8} {'max':>8} {'n':>6}"]
    for label, d in (("heartbeat (probe, as a pod sends it)", hb), (f"status page, all instances ({sa['bytes']} B)", sa),
                     ("status page, one instance", so), ("gRPC GetFaultToleranceStatus, all", sg),
                     (f"Watch opened, every instance ({steady['watch_snapshot']['bytes']} B)", steady["watch_snapshot"])):
        lines.append(f"  {label:<44} {d['p50_ms']:>8.1f} {d['p95_ms']:>8.1f} {d['p99_ms']:>8.1f} "
                     f"{d['max_ms']:>8.1f} {d['n']:>6}")
    other = ", ".join(f"{k} {v:.0f} %" for k, v in steady["other_cpu_pct"].items())
    w = steady["watch"]
    lines.append(f"  (the rest of the machine meanwhile: {other}; heartbeat probe errors {hb['errors']}; "
                 f"{w['watchers']} open watchers got {w['messages']} changes, {w['errors']} Watch errors)")
    return lines


def render(dps: list[dict[str, Any]], steady: dict[str, Any] | None, simultaneous: list[dict[str, Any]] | None,
           s: dict[str, Any], steady_after: dict[str, Any] | None = None) -> str:
    lines = ["", f"1. Scale-down rounds, one instance, 8 ranks per NodeManager (engine diagnosing "
             f"{s['diagnosing_sec']:g} s; ms, median / p95)",
             f"  {'DP':>4} {'NMs':>4} {'fault→published':>17} {'first detection':>17} {'engine diagnosing':>18} "
             f"{'engine rebuild':>15} {'Controller-added':>17}  target p95"]
    for d in dps:
        row = s["dp"][str(d["dp"])]
        cell = _cell(row, "{:.0f}")
        lines.append(f"  {d['dp']:>4} {d['nodemanagers']:>4} {cell('fault_to_published_sec', 17)} "
                     f"{cell('first_detection_sec', 17)} {cell('engine_diagnosing_sec', 18)} "
                     f"{cell('engine_rebuild_sec', 15)} {cell('controller_added_sec', 17)}  ≤ {TARGET_ADDED_P95_MS:.0f}")
    lines.append("  Controller-added, split (median / p95 ms):")
    lines.append(f"  {'DP':>4} {'engines ready→decision':>23} {'decision→last check-in':>23} "
                 f"{'healthy→published':>18} {'call critical path':>19} {'Controller own':>15} "
                 f"{'engines answering apply':>24}")
    for d in dps:
        row = s["dp"][str(d["dp"])]
        cell2 = _cell(row, "{:.1f}")
        lines.append(f"  {d['dp']:>4} {cell2('snapshot_to_decision_sec', 23)} {cell2('decision_to_last_checkin_sec', 23)} "
                     f"{cell2('healthy_to_published_sec', 18)} {cell2('controller_call_critical_path_sec', 19)} "
                     f"{cell2('controller_own_sec', 15)} {cell2('apply_engine_http_sec', 24)}")
    lines.append("  (Controller own: decision → published with no NodeManager or Coordinator call outstanding; "
                 "the rest of Controller-added is the snapshot pull and the calls, i.e. NodeManager and engine work)")
    lines.append("  CPU per round, fault to published (ms, median; the NodeManagers' and engines' share is what a real "
                 "fleet spreads over its hosts):")
    for d in dps:
        groups = list(d["rounds"][0]["cpu_ms"])
        lines.append(f"  {d['dp']:>4} " + ", ".join(f"{g} {median(r['cpu_ms'][g] for r in d['rounds']):.0f}" for g in groups))
    lines += render_costs(dps, s["cost"])
    if "growth_p95" in s:
        lines.append(f"  growth of Controller-added from DP={dps[0]['dp']} to DP={dps[-1]['dp']}: p95 "
                     f"{s['growth_p95']:.2f}x, median {s['growth_median']:.2f}x (target ≤ {TARGET_GROWTH:g}x); "
                     f"of the Controller's own time: p95 {s['own_growth_p95']:.2f}x")
    if steady is not None:
        lines += _steady_lines(steady, "before any fault")
    if simultaneous:
        sim = s["simultaneous"]
        lines += ["", f"3. {simultaneous[0]['instances']} instances faulting at once (kill_process on one rank each), "
                  f"{len(simultaneous)} trial(s); request_timeout_sec {s['fleet_request_timeout_sec']:g} "
                  f"({simultaneous[0]['nodemanagers']} NodeManagers share {os.cpu_count()} cores here)",
                  f"  every instance recovered by scale-down; total (first fault → last published) median "
                  f"{sim['total_sec_median']:.2f} s; peak concurrent rounds ≥ {sim['peak_concurrent_rounds_min']}",
                  (f"  total against one round alone at DP {simultaneous[0]['dp']} (part 1, "
                   f"{sim['one_round_alone_ms']:.0f} ms): {sim['total_over_one_round']:.2f}× (target ≤ "
                   f"{TARGET_SIMULTANEOUS_RATIO:g}×)" if "one_round_alone_ms" in sim else
                   f"  (run part 1 at DP {simultaneous[0]['dp']} too for the total against one round alone, "
                   f"target ≤ {TARGET_SIMULTANEOUS_RATIO:g}×)"),
                  f"  per instance: fault→published {sim['fault_to_published_median_ms']:.0f} / "
                  f"{sim['fault_to_published_p95_ms']:.0f} ms, Controller-added {sim['controller_added_median_ms']:.0f} / "
                  f"{sim['controller_added_p95_ms']:.0f} ms (median / p95)",
                  "  CPU while recovering (% of one core, median over trials): " + ", ".join(
                      f"{k} {median(t['cpu_pct_while_recovering'][k] for t in simultaneous):.0f}"
                      for k in simultaneous[0]["cpu_pct_while_recovering"])]
        lines += [f"  trial {n + 1}: " + _watch_line(t["watch"]) for n, t in enumerate(simultaneous)]
    if steady_after is not None:
        lines += _steady_lines(steady_after, "after the faults (every engine status recorded)")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dps", "--dp", default="16,64,256", help="DP sizes of part 1 (multiples of 8; empty: skip)")
    parser.add_argument("--rounds", type=int, default=10, help="scale-down rounds per DP")
    parser.add_argument("--diagnosing-sec", type=float, default=1.5, help="the fake engines' diagnosing phase")
    parser.add_argument("--fleet-instances", type=int, default=16, help="parts 2 and 3 (0: skip)")
    parser.add_argument("--fleet-dp", type=int, default=256)
    parser.add_argument("--pods-per-host", type=int, default=64)
    parser.add_argument("--fleet-poll-sec", type=float, default=8.0, help="NodeManager engine polls in the fleet")
    parser.add_argument("--window-sec", type=float, default=60.0)
    parser.add_argument("--warmup-sec", type=float, default=10.0)
    parser.add_argument("--simultaneous-trials", type=int, default=2)
    parser.add_argument("--watchers", type=int, default=4,
                        help="WatchFaultToleranceStatus streams of every instance open through part 3")
    parser.add_argument("--fleet-request-timeout-sec", type=float, default=15.0,
                        help="the fleet Controller's dp_scale_down_config.request_timeout_sec (default 5)")
    parser.add_argument("--rtt-ms", type=float, default=DEFAULT_RTT_MS,
                        help="the round-time model's network round trip per call burst")
    parser.add_argument("--profile", type=Path, metavar="DIR",
                        help="cProfile the Controller and the NodeManagers during each round (stats in DIR; the "
                             "CPU numbers then include the profiler's overhead)")
    parser.add_argument("--work-dir", type=Path)
    parser.add_argument("--json", type=Path, help="write every number here")
    parser.add_argument("--plot", type=Path, metavar="DIR", help="write the charts here (PNG; the bench extra)")
    args = parser.parse_args(argv)
    if args.watchers < 0:
        parser.error(f"--watchers must be 0 or more, got {args.watchers}")
    if args.plot:
        try:
            require_matplotlib()
        except PlotError as exc:
            parser.error(f"--plot {args.plot}: {exc}")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="motor-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    load0 = os.getloadavg()
    print(f"scale benchmark: python {platform.python_version()}, {os.cpu_count()} CPUs, load average {load0[0]:.1f}; "
          f"logs under {work}", flush=True)
    started = time.monotonic()
    dps = []
    if args.profile:
        os.environ[PROFILE_DIR_ENV] = str(args.profile.resolve())
    for dp in [int(x) for x in args.dps.split(",") if x.strip()]:
        dps.append(run_dp_rounds(dp, args.rounds, work, args.diagnosing_sec, profile=args.profile is not None))
    os.environ.pop(PROFILE_DIR_ENV, None)
    steady = simultaneous = steady_after = None
    if args.fleet_instances > 0:
        # 512 NodeManagers (16 × 256) share this machine's 2 cores: 16 rounds at once make each of them forward
        # 8 applies and several status reads while all the others do too, which a real NodeManager
        # (its own host) never waits for. The calls' deadline is raised so the rounds measure that
        # queueing instead of failing on it (printed with the results).
        spec = fleet_spec(instances=args.fleet_instances, dp_size=args.fleet_dp,
                          nodemanagers_per_process=args.pods_per_host, engine_poll_interval_sec=args.fleet_poll_sec,
                          controller_overrides={"fault_tolerance_config.dp_scale_down_config.request_timeout_sec":
                                                args.fleet_request_timeout_sec})
        fleet = LocalCluster(spec, work / "fleet", engines=LightEngines(diagnosing_sec=args.diagnosing_sec))
        t = time.monotonic()
        fleet.start(600)
        print(f"  fleet of {args.fleet_instances} x {args.fleet_dp} endpoints serving after {time.monotonic() - t:.0f} s",
              flush=True)
        try:
            steady = measure_steady(fleet, args.window_sec, args.warmup_sec)
            steady["startup_sec"] = time.monotonic() - t
            if args.simultaneous_trials > 0:
                simultaneous = run_simultaneous(fleet, args.simultaneous_trials, args.watchers)
                # Again with every instance's engine statuses recorded (the status pages are full now).
                steady_after = measure_steady(fleet, max(10.0, args.window_sec / 2), 3.0)
        finally:
            fleet.stop()
    summary = summarize(dps, steady, simultaneous, args.diagnosing_sec, args.rtt_ms)
    summary["fleet_request_timeout_sec"] = args.fleet_request_timeout_sec
    print(render(dps, steady, simultaneous, summary, steady_after))
    load = os.getloadavg()
    print(f"\n(total run time {time.monotonic() - started:.0f} s; load average at the start {load0[0]:.1f}, "
          f"at the end {load[0]:.1f} on {os.cpu_count()} CPUs: other work on the machine shows here)")
    doc = {"summary": summary, "dp_rounds": dps, "steady": steady, "steady_after_faults": steady_after,
           "simultaneous": simultaneous, "load_average": {"start": load0, "end": load}, "argv": sys.argv[1:],
           "run": RunInfo.here(load0[0]).as_dict()}
    if args.json:
        args.json.write_text(json.dumps(doc, indent=1))
        print(f"wrote {args.json}")
    if args.plot and not dps:
        print(f"--plot {args.plot}: no DP rounds ran (--dps is empty), so there is nothing to chart")
    elif args.plot:
        for path in plot_scale(doc, args.plot, RunInfo.of(doc, RunInfo.here())):
            print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    with exit_on_sigterm():
        sys.exit(main())
