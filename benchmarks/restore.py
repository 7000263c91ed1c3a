"""Capacity-restoration benchmark: the whole fault → full-capacity cycle, path against path.

    .venv/bin/python -m benchmarks.restore [--rounds 1] [--concurrency 4] [--engines reference|light]
                                           [--json out.json]

One fault on a fresh DP=4 instance of one rank per pod (pods 127.0.0.114-117), under steady load:
executor death of rank 1, whose pod is then empty. Paths, side by side:

- planned restoration: DP scale-down to [0, 2, 3] (enable_dp_scale_up: the emptied pod is told to
  stop), the pod's NodeManager restarted in place (its replacement: the stop record keeps rank 1
  retired), then `motorctl restore 1` (capacity_restore.mode manual) back to DP=4;
- plain reconfiguration: the same fault with scale-down off, the whole instance rebuilt at once;
- elastic scale-up: the same, with every pod declaring ft_capability.supports_scale_up, so the
  restoration starts rank 1 as a joiner and the running survivors re-admit it (`scale_up`); the
  reference engine only (the light engines do not take scale_up).

Per path: time to full capacity (from the fault, and from the replacement pod's registration for
the restoration), requests sent / failed in the cycle, and the capacity lost in rank·s over the
cycle: every rank while the instance serves nothing (the survivors answer 503 from the fault until
the scale-down publishes them; every rank from the restoration's pause until DP=4 is published),
one rank per second while it serves degraded. The time the replacement pod takes to come back is
the cluster's, not Motor's: it is printed beside the totals. Numbers are measured, never asserted.
"""

from __future__ import annotations

import argparse
import io
import json
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from motor.cli.motorctl import run as motorctl
from motor.launch.cluster import LocalCluster
from motor.launch.engines import LightEngines
from motor.launch.load import LoadGenerator, RequestResult
from motor.launch.spec import ClusterSpec

DP, VICTIM, FIRST_POD_IP = 4, 1, 114
VICTIM_POD = f"127.0.0.{FIRST_POD_IP + VICTIM}"


def _published_at(txn: dict[str, Any]) -> float:
    publish = [e for e in txn["events"] if e["event_kind"] == "CALL" and e["name"] == "publish"]
    return publish[-1]["at_unix_sec"] + publish[-1]["duration_sec"]


def _event_at(txn: dict[str, Any], name: str) -> float:
    return next(e["at_unix_sec"] for e in txn["events"] if e["name"] == name)


def _requests(results: list[RequestResult], since_sec: float) -> dict[str, int]:
    window = [r for r in results if r.started_sec >= since_sec - 0.5]
    return {"sent": len(window), "succeeded": sum(r.ok for r in window), "failed": sum(not r.ok for r in window)}


def _cluster(work: Path, name: str, engines: str, model_load_sec: float, **spec: Any) -> LocalCluster:
    backend = LightEngines(restartable=True) if engines == "light" else None
    return LocalCluster(ClusterSpec(ranks_per_pod=1, first_pod_ip=FIRST_POD_IP, model_load_sec=model_load_sec,
                                    **spec), work / name, engines=backend)


def run_restoration(work: Path, n: int, concurrency: int, engines: str, model_load_sec: float,
                    elastic: bool = False) -> dict[str, Any]:
    """`elastic`: the pods declare scale_up, so the restoration is a scale-up round."""
    cluster = _cluster(work, f"{'scale-up' if elastic else 'restore'}-{n}", engines, model_load_sec,
                       enable_dp_scale_up=True, controller_overrides={"capacity_restore.mode": "manual"},
                       nodemanager_overrides={"ft_capability.supports_scale_up": elastic})
    cluster.start()
    cluster.nodemanagers[VICTIM_POD].expected_exit = True
    try:
        load = LoadGenerator(cluster.coordinator_http, concurrency=concurrency, max_tokens=8,
                             max_duration_sec=600).start()
        time.sleep(1.0)
        fault_sec = time.time()
        cluster.inject(VICTIM, "executor_death")
        cluster.wait_serving(90.0, alive=[r for r in range(DP) if r != VICTIM])
        cluster.nodemanagers[VICTIM_POD].proc.wait_exit(30)
        cluster.restart_nodemanager(VICTIM_POD)
        back_sec = time.time()
        out = io.StringIO()
        code = motorctl(["--controller", cluster.controller_address, "restore", "1", "--when-ready",
                         "--deadline", "300"], out=out)
        if code != 0:
            raise RuntimeError(f"motorctl restore failed: {out.getvalue()}")
        cluster.wait_serving(60.0, alive=list(range(DP)))
        time.sleep(1.0)
        load.stop()
        timeline = cluster.timeline()
    finally:
        cluster.stop()
    down = next(t for t in timeline if t["strategy"] == "dp_scale_down")
    # The planned restoration stops serving at its pause, a scale-up round at its drain.
    strategy, stop_serving = ("scale_up", "drain") if elastic else ("capacity_restore", "pause")
    restore = next(t for t in timeline if t["strategy"] == strategy)
    if restore["outcome"] != "succeeded":
        raise RuntimeError(f"the {strategy} transaction ended {restore['outcome']}: {restore}")
    scaled_down_sec, pause_sec, full_sec = (_published_at(down), _event_at(restore, stop_serving),
                                            _published_at(restore))
    lost = DP * (scaled_down_sec - fault_sec) + 1 * (pause_sec - scaled_down_sec) + DP * (full_sec - pause_sec)
    return {"fault_to_full_sec": full_sec - fault_sec, "replacement_to_full_sec": full_sec - back_sec,
            "fault_to_degraded_sec": scaled_down_sec - fault_sec, "restoration_sec": full_sec - pause_sec,
            "replacement_wait_sec": back_sec - scaled_down_sec, "requests": _requests(load.snapshot(), fault_sec),
            "capacity_lost_rank_sec": lost}


def run_reconfiguration(work: Path, n: int, concurrency: int, engines: str, model_load_sec: float) -> dict[str, Any]:
    cluster = _cluster(work, f"reconfiguration-{n}", engines, model_load_sec, enable_dp_scale_down=False)
    cluster.start()
    try:
        load = LoadGenerator(cluster.coordinator_http, concurrency=concurrency, max_tokens=8,
                             max_duration_sec=600).start()
        time.sleep(1.0)
        fault_sec = time.time()
        cluster.inject(VICTIM, "executor_death")
        cluster.wait_until(lambda rt: any(t["strategy"] == "instance_reconfiguration" and t["outcome"] == "succeeded"
                                          for t in cluster.timeline()) and rt["serving_published"], 300.0,
                           "reconfiguration")
        time.sleep(1.0)
        load.stop()
        txn = next(t for t in cluster.timeline() if t["strategy"] == "instance_reconfiguration")
    finally:
        cluster.stop()
    full_sec = _published_at(txn)
    return {"fault_to_full_sec": full_sec - fault_sec, "replacement_to_full_sec": float("nan"),
            "fault_to_degraded_sec": float("nan"), "restoration_sec": full_sec - _event_at(txn, "drain"),
            "replacement_wait_sec": 0.0, "requests": _requests(load.snapshot(), fault_sec),
            "capacity_lost_rank_sec": DP * (full_sec - fault_sec)}


def _median(rows: list[dict[str, Any]], key: str) -> float:
    values = sorted(r[key] for r in rows)
    return values[len(values) // 2] if values else float("nan")


def summarize(paths: dict[str, list[dict[str, Any]]]) -> str:
    cols = ("fault→full s", "replacement→full s", "fault→degraded s", "rebuild s", "replacement wait s",
            "sent", "failed", "lost rank·s")
    lines = [f"{'path':<24}" + "".join(f"{c:>20}" for c in cols)]
    for name, rows in paths.items():
        if not rows:
            lines.append(f"{name:<24}" + f"{'not run: the light engines do not take scale_up':>60}")
            continue
        values = [_median(rows, k) for k in ("fault_to_full_sec", "replacement_to_full_sec", "fault_to_degraded_sec",
                                             "restoration_sec", "replacement_wait_sec")]
        sent = sum(r["requests"]["sent"] for r in rows)
        failed = sum(r["requests"]["failed"] for r in rows)
        lines.append(f"{name:<24}" + "".join(f"{v:>20.3f}" for v in values) + f"{sent:>20}{failed:>20}"
                     + f"{_median(rows, 'capacity_lost_rank_sec'):>20.2f}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1, help="trials per path (a fresh cluster each)")
    parser.add_argument("--concurrency", type=int, default=4, help="steady load: requests in flight")
    parser.add_argument("--engines", choices=("reference", "light"), default="reference")
    parser.add_argument("--model-load-sec", type=float, default=0.0, help="engine start-up cost of every start")
    parser.add_argument("--work-dir", type=Path, default=None)
    parser.add_argument("--json", type=Path, default=None, help="write every number here")
    args = parser.parse_args(argv)
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="motor-bench-restore-"))
    paths: dict[str, list[dict[str, Any]]] = {"elastic scale-up": [], "planned restoration": [],
                                              "plain reconfiguration": []}
    for n in range(args.rounds):
        if args.engines == "reference":
            paths["elastic scale-up"].append(run_restoration(work, n, args.concurrency, args.engines,
                                                             args.model_load_sec, elastic=True))
            print(f"  scale-up trial {n + 1}: {paths['elastic scale-up'][-1]}", flush=True)
        paths["planned restoration"].append(run_restoration(work, n, args.concurrency, args.engines,
                                                              args.model_load_sec))
        print(f"  restoration trial {n + 1}: {paths['planned restoration'][-1]}", flush=True)
        paths["plain reconfiguration"].append(run_reconfiguration(work, n, args.concurrency, args.engines,
                                                                    args.model_load_sec))
        print(f"  reconfiguration trial {n + 1}: {paths['plain reconfiguration'][-1]}", flush=True)
    print(f"\nrank {VICTIM} of DP={DP} (one rank per pod, {args.engines} engines, model load {args.model_load_sec:g}s), "
          f"{args.rounds} trial(s) per path, medians:")
    print(summarize(paths))
    if args.json:
        args.json.write_text(json.dumps(paths, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
