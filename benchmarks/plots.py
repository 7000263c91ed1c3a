"""Charts of the benchmarks' numbers: `--plot DIR` on `benchmarks.scale` and `benchmarks.router`,
or afterwards from their `--json` output:

    python -m benchmarks.plots scale.json [router.json ...] --out DIR

- `scale`: a round's stages as a waterfall per DP (medians), the Controller-added time against DP
  (measured and modelled, with the targets), and each component's CPU per round against DP.
- `router`: the distribution of request latency through each target (a CDF per stream count).

Every chart names the run it shows (date, commit, machine) in its footer. matplotlib comes with the
`bench` extra (`pip install -e '.[bench]'`); it draws off-screen (Agg), no display needed.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.round_report import TARGET_CONTROLLER_CPU_MS, TARGET_MODEL_ADDED_P95_MS, TARGET_NM_CPU_MS

ROOT = Path(__file__).resolve().parents[1]
TARGET_MEASURED_ADDED_P95_MS = 150.0

# A round's stages in the order they happen (fault at 0): the engines' diagnosis, then the
# Controller's and the engines' work until the publication. Keys of the scale summary.
STAGES = (
    ("engine_diagnosing_sec", "engines diagnosing"),
    ("snapshot_to_decision_sec", "snapshot → decision"),
    ("decision_to_last_checkin_sec", "decision → last check-in"),
    ("engine_rebuild_sec", "engines rebuild"),
    ("healthy_to_published_sec", "healthy → published"),
)


class PlotError(ValueError):
    """The document does not hold what a chart needs (names the missing key)."""


@dataclass(frozen=True)
class RunInfo:
    """What a chart's footer says about the run it shows."""

    date: str
    commit: str
    machine: str

    @classmethod
    def here(cls, load_average: float | None = None) -> RunInfo:
        load = f", load average {load_average:.1f}" if load_average is not None else ""
        return cls(date=datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"), commit=_commit(),
                   machine=f"{platform.machine()}, {os.cpu_count()} CPUs, python {platform.python_version()}{load}")

    def footer(self) -> str:
        return f"{self.date} · commit {self.commit} · {self.machine}"

    def as_dict(self) -> dict[str, str]:
        return {"date": self.date, "commit": self.commit, "machine": self.machine}

    @classmethod
    def of(cls, doc: dict[str, Any], fallback: RunInfo) -> RunInfo:
        """The run a benchmark document recorded (its "run" key), else `fallback`."""
        run = doc.get("run")
        if isinstance(run, dict) and all(isinstance(run.get(k), str) for k in ("date", "commit", "machine")):
            return cls(date=run["date"], commit=run["commit"], machine=run["machine"])
        return fallback


def _commit() -> str:
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True, timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return head + ("-dirty" if dirty else "")


def _pyplot():
    try:
        import matplotlib
    except ImportError as exc:
        raise PlotError("charts need matplotlib: pip install -e '.[bench]'") from exc
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def require_matplotlib() -> None:
    """Raises PlotError now rather than after a long benchmark run."""
    _pyplot()


def _get(doc: dict[str, Any], *path: str) -> Any:
    node: Any = doc
    for i, key in enumerate(path):
        if not isinstance(node, dict) or key not in node:
            raise PlotError(f"the benchmark document has no {'.'.join(path[:i + 1])!r}")
        node = node[key]
    return node


def _save(plt, fig, out_dir: Path, name: str, info: RunInfo, bottom: float = 0.03) -> Path:
    fig.text(0.01, 0.01, info.footer(), fontsize=7, color="0.4")
    fig.tight_layout(rect=(0, bottom, 1, 1))
    path = out_dir / name
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def plot_scale(doc: dict[str, Any], out_dir: Path, info: RunInfo) -> list[Path]:
    """The `benchmarks.scale --json` document's charts: waterfall, Controller-added and CPU against DP."""
    dp_times = _get(doc, "summary", "dp")
    if not dp_times:
        raise PlotError("the benchmark document has no DP rounds (summary.dp is empty): run with --dps")
    dps = sorted(dp_times, key=int)
    costs = _get(doc, "summary", "cost")
    plt = _pyplot()
    out_dir.mkdir(parents=True, exist_ok=True)
    return [_scale_waterfall(plt, dp_times, dps, out_dir, info),
            _scale_added(plt, dp_times, costs, dps, out_dir, info),
            _scale_cpu(plt, costs, dps, out_dir, info)]


def _scale_waterfall(plt, dp_times: dict[str, Any], dps: list[str], out_dir: Path, info: RunInfo) -> Path:
    """Left: the whole round from the fault. Right: from the end of the engines' diagnosis on, where
    Motor's own work is (the diagnosis is the engines' and dwarfs it)."""
    fig, (whole, zoom) = plt.subplots(1, 2, figsize=(12, 1.6 + 0.6 * len(dps)), sharey=True)
    colours = plt.get_cmap("tab10").colors
    for row, dp in enumerate(dps):
        widths = [_get(dp_times, dp, key, "median_ms") for key, _ in STAGES]
        for ax, origin in ((whole, 0.0), (zoom, widths[0])):
            start = 0.0
            for i, ((_, label), width) in enumerate(zip(STAGES, widths)):
                if ax is whole or i > 0:
                    ax.barh(row, width, left=start - origin, color=colours[i],
                            label=label if row == 0 and (ax is whole) else None)
                start += width
            ax.text(start - origin, row, f"  {start - origin:.0f} ms", va="center", fontsize=8)
        whole.plot(_get(dp_times, dp, "first_detection_sec", "median_ms"), row, marker="v", color="black",
                   label="first report reaches the Controller" if row == 0 else None)
    whole.set_yticks(range(len(dps)), [f"DP={dp}" for dp in dps])
    whole.invert_yaxis()
    whole.set_xlabel("ms after the fault")
    zoom.set_xlabel("ms after the engines' diagnosis")
    whole.set_title("the whole round", fontsize=9)
    zoom.set_title("Motor's part: from the diagnosed snapshot to the publication", fontsize=9)
    fig.suptitle("A scale-down round, stage by stage (medians over the rounds)")
    fig.legend(fontsize=7, ncol=6, loc="lower center", bbox_to_anchor=(0.5, 0.04))
    return _save(plt, fig, out_dir, "scale-round-waterfall.png", info, bottom=0.12)


def _scale_added(plt, dp_times: dict[str, Any], costs: dict[str, Any], dps: list[str], out_dir: Path,
                 info: RunInfo) -> Path:
    x = [int(dp) for dp in dps]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    ax.plot(x, [_get(dp_times, dp, "controller_added_sec", "median_ms") for dp in dps], "o-", label="measured median")
    ax.plot(x, [_get(dp_times, dp, "controller_added_sec", "p95_ms") for dp in dps], "o--", label="measured p95")
    ax.plot(x, [_get(costs, dp, "model", "modelled_added_ms") for dp in dps], "s-", label="modelled median")
    ax.plot(x, [_get(costs, dp, "model", "modelled_added_p95_ms") for dp in dps], "s--", label="modelled p95")
    ax.axhline(TARGET_MEASURED_ADDED_P95_MS, color="tab:red", lw=0.8, ls=":",
               label=f"target p95 here ≤ {TARGET_MEASURED_ADDED_P95_MS:g}")
    ax.axhline(TARGET_MODEL_ADDED_P95_MS, color="tab:purple", lw=0.8, ls=":",
               label=f"target p95 modelled ≤ {TARGET_MODEL_ADDED_P95_MS:g}")
    _dp_axis(ax, x)
    ax.set_ylabel("Controller-added time per round (ms)")
    ax.set_title("Controller-added time against DP size")
    ax.legend(fontsize=8)
    return _save(plt, fig, out_dir, "scale-controller-added.png", info)


def _scale_cpu(plt, costs: dict[str, Any], dps: list[str], out_dir: Path, info: RunInfo) -> Path:
    x = [int(dp) for dp in dps]
    series = (("Controller", "controller", "net_sum_ms"), ("NodeManager, median (each)", "nodemanagers", "net_median_ms"),
              ("NodeManager, max (each)", "nodemanagers", "net_max_ms"), ("engines (all)", "engines", "net_sum_ms"),
              ("Coordinator", "coordinator", "net_sum_ms"))
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for label, part, key in series:
        ax.plot(x, [_get(costs, dp, "cpu", part, key) for dp in dps], "o-", label=label)
    ax.axhline(TARGET_CONTROLLER_CPU_MS, color="tab:red", lw=0.8, ls=":",
               label=f"target Controller ≤ {TARGET_CONTROLLER_CPU_MS:g} at DP=256")
    ax.axhline(TARGET_NM_CPU_MS, color="tab:purple", lw=0.8, ls=":",
               label=f"target NodeManager median ≤ {TARGET_NM_CPU_MS:g}")
    _dp_axis(ax, x)
    ax.set_yscale("log")
    from matplotlib.ticker import FuncFormatter, NullFormatter
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.set_ylabel("CPU per round above the idle rate (ms)")
    ax.set_title("CPU per round by component")
    ax.legend(fontsize=8)
    return _save(plt, fig, out_dir, "scale-cpu-per-round.png", info)


def _dp_axis(ax, x: list[int]) -> None:
    ax.set_xscale("log", base=2)
    ax.set_xticks(x, [str(v) for v in x])
    ax.set_xlabel("DP size")
    ax.grid(True, which="major", alpha=0.3)


def plot_router(doc: dict[str, Any], out_dir: Path, info: RunInfo) -> list[Path]:
    """The `benchmarks.router --json` document's charts: one latency CDF figure per workload."""
    workloads = _get(doc, "workloads")
    if not workloads:
        raise PlotError("the benchmark document has no workloads")
    plt = _pyplot()
    out_dir.mkdir(parents=True, exist_ok=True)
    return [_router_cdf(plt, name, _get(workloads, name, "raw"), out_dir, info) for name in workloads]


def _router_cdf(plt, workload: str, raw: dict[str, Any], out_dir: Path, info: RunInfo) -> Path:
    concurrencies = sorted({c for per_target in raw.values() for c in per_target}, key=int)
    fig, axes = plt.subplots(1, len(concurrencies), figsize=(4.5 * len(concurrencies), 4), squeeze=False)
    for ax, c in zip(axes[0], concurrencies):
        for target, per_c in raw.items():
            samples = sorted(v for run in per_c.get(c, ()) for v in _samples(run, target, c))
            if samples:
                ax.plot(samples, [(i + 1) / len(samples) for i in range(len(samples))], label=target, lw=1)
        ax.set_title(f"{c} stream{'s' if c != '1' else ''}")
        ax.set_xlabel("request latency (ms)")
        ax.grid(True, alpha=0.3)
    axes[0][0].set_ylabel("fraction of requests")
    axes[0][-1].legend(fontsize=7, loc="lower right")
    fig.suptitle(f"Latency through each router, workload {workload!r}")
    return _save(plt, fig, out_dir, f"router-latency-{workload}.png", info)


def _samples(run: dict[str, Any], target: str, concurrency: str) -> list[float]:
    if "latency_ms" not in run:
        raise PlotError(f"the router document's run of {target!r} at {concurrency} streams has no 'latency_ms' "
                        "samples (written by benchmarks.router since charts exist: run it again)")
    return run["latency_ms"]


def plot_document(doc: dict[str, Any], out_dir: Path, info: RunInfo) -> list[Path]:
    """Whichever benchmark wrote `doc`."""
    if "workloads" in doc:
        return plot_router(doc, out_dir, info)
    if "dp_rounds" in doc:
        return plot_scale(doc, out_dir, info)
    raise PlotError(f"not a benchmarks.scale or benchmarks.router document (keys {sorted(doc)})")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("documents", nargs="+", type=Path, help="--json output of benchmarks.scale / benchmarks.router")
    parser.add_argument("--out", type=Path, required=True, help="folder for the PNG charts")
    args = parser.parse_args(argv)
    for path in args.documents:
        try:
            doc = json.loads(path.read_text())
            if not isinstance(doc, dict):
                raise PlotError(f"expected a JSON object, got {type(doc).__name__}")
            unknown = RunInfo(date=_file_date(path), commit="unknown", machine="unknown machine")
            written = plot_document(doc, args.out, RunInfo.of(doc, unknown))
        except (OSError, json.JSONDecodeError, PlotError) as exc:
            print(f"plots: {path}: {exc}", file=sys.stderr)
            return 2
        for p in written:
            print(f"wrote {p}")
    return 0


def _file_date(path: Path) -> str:
    try:
        mtime = path.stat().st_mtime
    except OSError:
        return "unknown date"
    return datetime.datetime.fromtimestamp(mtime, datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")


if __name__ == "__main__":
    sys.exit(main())
