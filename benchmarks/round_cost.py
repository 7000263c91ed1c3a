"""What one scale-down round costs each component: CPU per process, calls by kind, bytes on the wire.

`RoundCost.take()` before the fault and after the publication reads every process's CPU time (by
pid: the Controller, each NodeManager, the light-engine processes, the Coordinator) and every
service's Prometheus counters (the gRPC calls and bytes each server answered,
`motor.common.grpc_traffic`; the NodeManagers' engine reads and reports); `diff` turns two samples
into the round's cost. The scrapes happen outside the CPU window (before the first CPU read, after
the last), so they are not charged to the round.
"""

from __future__ import annotations

import concurrent.futures
import time
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from benchmarks.timing import cpu_sec_precise, median

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]

# Calls per round, by kind: (label, service scraped, metric, label filter).
CALL_KINDS: list[tuple[str, str, str, dict[str, str]]] = [
    ("guard", "nodemanagers", "motor_grpc_server_calls_total", {"method": "Guard"}),
    ("status RPCs", "nodemanagers", "motor_grpc_server_calls_total", {"method": "Status"}),
    ("  engine reads: first", "nodemanagers", "motor_nodemanager_status_rpc_engine_reads_total", {"read": "first"}),
    ("  engine reads: long-poll re-reads", "nodemanagers", "motor_nodemanager_status_rpc_engine_reads_total",
     {"read": "reread"}),
    ("poller engine reads", "nodemanagers", "motor_nodemanager_status_polls_total", {}),
    ("apply RPCs", "nodemanagers", "motor_grpc_server_calls_total", {"method": "Apply"}),
    ("  engine applies", "nodemanagers", "motor_nodemanager_engine_requests_total", {"route": "apply"}),
    ("finalize", "nodemanagers", "motor_grpc_server_calls_total", {"method": "Finalize"}),
    ("fault reports (RPCs)", "controller", "motor_grpc_server_calls_total", {"method": "ReportSoftwareFault"}),
    ("fault reports (batched RPCs)", "controller", "motor_grpc_server_calls_total",
     {"method": "ReportSoftwareFaults"}),
    ("  reports sent by NodeManagers", "nodemanagers", "motor_nodemanager_fault_reports_sent_total", {}),
    ("  reads taken as evidence", "nodemanagers", "motor_nodemanager_fault_reports_taken_total", {}),
    ("heartbeats (unary calls)", "controller", "motor_grpc_server_calls_total", {"method": "Heartbeat"}),
    ("heartbeats (stream messages)", "controller", "motor_grpc_server_stream_messages_total",
     {"method": "HeartbeatStream", "direction": "received"}),
    ("Coordinator refreshes", "coordinator", "motor_grpc_server_calls_total", {"method": "Refresh"}),
]


def parse_samples(text: str) -> Samples:
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name.endswith("_created"):
                continue
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def total(samples: Samples, name: str, labels: dict[str, str] | None = None) -> float:
    want = set((labels or {}).items())
    return sum(v for (n, ls), v in samples.items() if n == name and want <= set(ls))


def by_label(samples: Samples, name: str, label: str) -> dict[str, float]:
    out: dict[str, float] = defaultdict(float)
    for (n, ls), v in samples.items():
        if n == name:
            out[dict(ls).get(label, "")] += v
    return dict(out)


@dataclass
class Sample:
    cpu_sec: dict[str, dict[int, float]]  # role → pid → CPU seconds
    metrics: dict[str, Samples]  # "controller" | "coordinator" | "nodemanagers" (summed) → samples
    at_sec: float = 0.0  # monotonic, when the CPU was read


class RoundCost:
    def __init__(self, fleet: Any) -> None:
        self.fleet = fleet
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=8)

    def close(self) -> None:
        self._pool.shutdown(wait=False)

    def _pids(self) -> dict[str, list[int]]:
        f = self.fleet
        return {"controller": [f.controller.proc.pid], "nodemanagers": [p.pid for p in f.nodemanager_processes()],
                "engines": [p.pid for p in f.engine_processes.values()], "coordinator": [f.coordinator.proc.pid]}

    def _scrape_all(self) -> dict[str, Samples]:
        names = list(self.fleet.metrics_urls())
        texts = dict(zip(names, self._pool.map(self.fleet.scrape, names), strict=True))
        summed: Samples = defaultdict(float)
        for name, text in texts.items():
            if name in ("controller", "coordinator"):
                continue
            for key, value in parse_samples(text).items():
                summed[key] += value
        return {"controller": parse_samples(texts["controller"]), "coordinator": parse_samples(texts["coordinator"]),
                "nodemanagers": dict(summed)}

    def take(self, *, first: bool) -> Sample:
        """Before a round (`first`: scrape, then CPU) or after it (CPU, then scrape)."""
        metrics = self._scrape_all() if first else {}
        at = time.monotonic()
        cpu = {role: {pid: cpu_sec_precise(pid) for pid in pids} for role, pids in self._pids().items()}
        if not first:
            metrics = self._scrape_all()
        return Sample(cpu, metrics, at)

    def idle_rates(self, window_sec: float) -> dict[str, dict[int, float]]:
        """Each process's CPU ms per second with no round running (heartbeats, the 1 Hz polls)."""
        t0 = time.monotonic()
        cpu0 = {role: {pid: cpu_sec_precise(pid) for pid in pids} for role, pids in self._pids().items()}
        time.sleep(window_sec)
        wall = time.monotonic() - t0
        return {role: {pid: 1000 * (cpu_sec_precise(pid) - cpu0[role].get(pid, 0.0)) / wall for pid in pids}
                for role, pids in self._pids().items()}


def diff(before: Sample, after: Sample, idle: dict[str, dict[int, float]] | None = None) -> dict[str, Any]:
    """The round's cost: CPU ms per component (gross, and above the `idle` rates: the round's own
    work), calls by kind, gRPC bytes by method."""
    cpu: dict[str, Any] = {}
    wall = after.at_sec - before.at_sec
    for role, pids in after.cpu_sec.items():
        per = [1000 * (after.cpu_sec[role][p] - before.cpu_sec[role].get(p, after.cpu_sec[role][p])) for p in pids]
        rates = (idle or {}).get(role, {})
        net = [v - rates.get(p, 0.0) * wall for v, p in zip(per, pids, strict=True)]
        cpu[role] = {"sum_ms": sum(per), "median_ms": median(per), "max_ms": max(per, default=float("nan")),
                     "net_sum_ms": sum(net), "net_median_ms": median(net), "net_max_ms": max(net, default=float("nan")),
                     "processes": len(per)}
    cpu["wall_ms"] = 1000 * wall
    calls = {}
    for label, service, metric, labels in CALL_KINDS:
        calls[label] = total(after.metrics[service], metric, labels) - total(before.metrics[service], metric, labels)
    grpc_bytes: dict[str, dict[str, float]] = {}
    for service in ("controller", "nodemanagers", "coordinator"):
        for direction in ("received", "sent"):
            name = f"motor_grpc_server_{direction}_bytes_total"
            b, a = by_label(before.metrics[service], name, "method"), by_label(after.metrics[service], name, "method")
            for method, value in a.items():
                d = value - b.get(method, 0.0)
                if d:
                    grpc_bytes.setdefault(method, {"received": 0.0, "sent": 0.0})[direction] += d
    engine_bytes = {}
    for route in ("status", "apply"):
        for direction in ("sent", "received"):
            labels = {"route": route, "direction": direction}
            m = "motor_nodemanager_engine_body_bytes_total"
            engine_bytes[f"{route} {direction}"] = (total(after.metrics["nodemanagers"], m, labels)
                                                    - total(before.metrics["nodemanagers"], m, labels))
    return {"cpu": cpu, "calls": calls, "grpc_bytes": grpc_bytes, "engine_body_bytes": engine_bytes}


def summarize_costs(costs: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over the rounds of one DP."""
    out: dict[str, Any] = {"cpu": {}, "calls": {}, "grpc_bytes": {}, "engine_body_bytes": {}}
    for role in costs[0]["cpu"]:
        if role == "wall_ms":
            out["cpu"][role] = median(c["cpu"][role] for c in costs)
            continue
        out["cpu"][role] = {k: median(c["cpu"][role][k] for c in costs) for k in
                            ("sum_ms", "median_ms", "max_ms", "net_sum_ms", "net_median_ms", "net_max_ms")}
        out["cpu"][role]["processes"] = costs[0]["cpu"][role]["processes"]
    for kind in costs[0]["calls"]:
        out["calls"][kind] = median(c["calls"][kind] for c in costs)
    methods = sorted({m for c in costs for m in c["grpc_bytes"]})
    for m in methods:
        out["grpc_bytes"][m] = {d: median(c["grpc_bytes"].get(m, {}).get(d, 0.0) for c in costs)
                                for d in ("received", "sent")}
    for k in costs[0]["engine_body_bytes"]:
        out["engine_body_bytes"][k] = median(c["engine_body_bytes"][k] for c in costs)
    return out
