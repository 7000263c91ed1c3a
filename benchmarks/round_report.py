"""The cost-per-round table and the round-time model of `benchmarks.scale`, with their targets."""

from __future__ import annotations

from typing import Any

from benchmarks.round_cost import summarize_costs
from benchmarks.round_model import model
from benchmarks.timing import median, pct

TARGET_NM_CPU_MS = 5.0  # median per NodeManager per round, 8 ranks per pod
TARGET_CONTROLLER_CPU_MS = 50.0  # at DP=256
TARGET_MODEL_ADDED_P95_MS = 50.0


def cost_summary(d: dict[str, Any], rtt_ms: float) -> dict[str, Any]:
    """Medians of one DP's rounds, and the model computed from them (and from each round for a p95)."""
    rounds = d["rounds"]
    s = summarize_costs([r["cost"] for r in rounds])
    per_round = [model(controller_own_ms=1000 * r["controller_own_sec"],
                       slowest_nm_cpu_ms=r["cost"]["cpu"]["nodemanagers"]["net_max_ms"],
                       engine_cpu_ms=r["cost"]["cpu"]["engines"]["net_sum_ms"], nodemanagers=d["nodemanagers"],
                       rebuild_ms=1000 * r["engine_rebuild_sec"], bursts=r["call_bursts"], rtt_ms=rtt_ms)
                 for r in rounds]
    parts = {k: median(m[k] for m in per_round) for k in per_round[0]}
    s["model"] = {**parts, "modelled_added_p95_ms": pct((m["modelled_added_ms"] for m in per_round), 0.95),
                  "measured_added_median_ms": median(1000 * r["controller_added_sec"] for r in rounds),
                  "measured_added_p95_ms": pct((1000 * r["controller_added_sec"] for r in rounds), 0.95)}
    return s


def render_costs(dps: list[dict[str, Any]], costs: dict[str, dict[str, Any]]) -> list[str]:
    if not dps:
        return []
    keys = [str(d["dp"]) for d in dps]
    head = "".join(f"{'DP=' + k:>16}" for k in keys)
    lines = ["", "  Cost per round (fault → published, median over the rounds):",
             f"  {'CPU ms':<44}{head}  target"]

    def row(label: str, values: list[str], target: str = "") -> None:
        lines.append(f"  {label:<44}" + "".join(f"{v:>16}" for v in values) + (f"  {target}" if target else ""))

    cpu = {k: costs[k]["cpu"] for k in keys}
    row("round's wall time (fault → published)", [f"{cpu[k]['wall_ms']:.0f}" for k in keys])
    row("Controller", [f"{cpu[k]['controller']['sum_ms']:.1f}" for k in keys],
        f"≤ {TARGET_CONTROLLER_CPU_MS:g} at DP=256")
    row("NodeManager, median / max (each)", [f"{cpu[k]['nodemanagers']['median_ms']:.1f} / "
                                             f"{cpu[k]['nodemanagers']['max_ms']:.1f}" for k in keys])
    row("  above its idle rate, median / max", [f"{cpu[k]['nodemanagers']['net_median_ms']:.1f} / "
                                                f"{cpu[k]['nodemanagers']['net_max_ms']:.1f}" for k in keys],
        f"median ≤ {TARGET_NM_CPU_MS:g}")
    row("NodeManagers, all (processes)", [f"{cpu[k]['nodemanagers']['sum_ms']:.0f} "
                                          f"({cpu[k]['nodemanagers']['processes']})" for k in keys])
    row("engines (light, one process per instance)", [f"{cpu[k]['engines']['sum_ms']:.1f}" for k in keys])
    row("Coordinator", [f"{cpu[k]['coordinator']['sum_ms']:.1f}" for k in keys])
    lines.append("  (idle rate: each process's CPU per second in the second before the fault: heartbeats and the "
                 "1 Hz polls, which run with or without a round)")
    lines.append(f"  {'calls per round':<44}")
    for kind in costs[keys[0]]["calls"]:
        row(kind, [f"{costs[k]['calls'][kind]:.0f}" for k in keys])
    lines.append(f"  {'gRPC bytes per round, received / sent':<44}")
    methods = sorted({m for k in keys for m in costs[k]["grpc_bytes"]})
    for m in methods:
        row(m, [f"{costs[k]['grpc_bytes'].get(m, {}).get('received', 0):.0f} / "
                f"{costs[k]['grpc_bytes'].get(m, {}).get('sent', 0):.0f}" for k in keys])
    lines.append(f"  {'engine HTTP body bytes per round':<44}")
    for label in costs[keys[0]]["engine_body_bytes"]:
        row(label, [f"{costs[k]['engine_body_bytes'][label]:.0f}" for k in keys])
    m0 = costs[keys[0]]["model"]
    lines += ["", f"  Round-time model, every NodeManager on its own node (RTT {m0['rtt_ms']:g} ms per call burst; "
              "ms, median over the rounds):"]
    for label, key in (("Controller own", "controller_own_ms"),
                       ("slowest NodeManager's CPU above idle", "slowest_nodemanager_cpu_ms"),
                       ("engines' CPU per node", "engines_per_node_cpu_ms"), ("long poll's cadence", "settle_wait_ms"),
                       ("network round trips", "network_ms"), ("call bursts", "bursts")):
        row(label, [f"{costs[k]['model'][key]:.1f}" for k in keys])
    row("modelled Controller-added, median / p95", [f"{costs[k]['model']['modelled_added_ms']:.0f} / "
                                                    f"{costs[k]['model']['modelled_added_p95_ms']:.0f}" for k in keys],
        f"p95 ≤ {TARGET_MODEL_ADDED_P95_MS:g}")
    row("measured Controller-added, median / p95", [f"{costs[k]['model']['measured_added_median_ms']:.0f} / "
                                                    f"{costs[k]['model']['measured_added_p95_ms']:.0f}" for k in keys],
        "p95 ≤ 150 on this machine")
    return lines
