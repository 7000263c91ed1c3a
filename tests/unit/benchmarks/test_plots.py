"""benchmarks.plots: the charts drawn from the benchmarks' JSON documents (shapes as they write them)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.plots import PlotError, RunInfo, main, plot_document, plot_router, plot_scale

INFO = RunInfo(date="2026-12-02 10:00 UTC", commit="abc1234", machine="x86_64, 2 CPUs")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
STAGE_KEYS = ("first_detection_sec", "engine_diagnosing_sec", "snapshot_to_decision_sec",
              "decision_to_last_checkin_sec", "engine_rebuild_sec", "healthy_to_published_sec", "controller_added_sec")


def _cpu(ms: float) -> dict[str, float]:
    return {"sum_ms": ms, "median_ms": ms, "max_ms": ms, "net_sum_ms": ms / 2, "net_median_ms": ms / 2,
            "net_max_ms": ms / 2 + 1, "processes": 1}


def scale_doc(dps: tuple[int, ...] = (16, 64, 256)) -> dict:
    times = {str(dp): {k: {"median_ms": 10.0 + i + dp / 16, "p95_ms": 12.0 + i + dp / 16}
                       for i, k in enumerate(STAGE_KEYS)} for dp in dps}
    costs = {str(dp): {"cpu": {p: _cpu(dp / 4 + 1) for p in ("controller", "nodemanagers", "engines", "coordinator")},
                       "model": {"modelled_added_ms": 40.0 + dp / 32, "modelled_added_p95_ms": 45.0 + dp / 32}}
             for dp in dps}
    return {"summary": {"dp": times, "cost": costs}, "dp_rounds": [{"dp": dp} for dp in dps],
            "run": INFO.as_dict()}


def router_doc() -> dict:
    raw = {t: {c: [{"requests": 3, "latency_ms": [1.0 + k, 2.5 + k, 4.0 + k]}] for c in ("1", "16")}
           for k, t in enumerate(("direct", "motor-coordinator", "vllm-router"))}
    return {"workloads": {"default": {"summary": {}, "raw": raw}}, "run": INFO.as_dict()}


def assert_pngs(paths: list[Path], names: list[str]) -> None:
    assert sorted(p.name for p in paths) == sorted(names)
    for p in paths:
        assert p.read_bytes()[:8] == PNG_MAGIC
        assert p.stat().st_size > 10_000, p  # a drawn chart, not an empty canvas


def test_scale_charts_are_drawn_for_every_dp(tmp_path: Path) -> None:
    paths = plot_scale(scale_doc(), tmp_path / "charts", INFO)
    assert_pngs(paths, ["scale-round-waterfall.png", "scale-controller-added.png", "scale-cpu-per-round.png"])


def test_router_cdf_per_workload(tmp_path: Path) -> None:
    assert_pngs(plot_router(router_doc(), tmp_path, INFO), ["router-latency-default.png"])


def test_a_missing_number_names_its_key(tmp_path: Path) -> None:
    doc = scale_doc()
    del doc["summary"]["cost"]["64"]["model"]["modelled_added_p95_ms"]
    with pytest.raises(PlotError, match=r"'64\.model\.modelled_added_p95_ms'"):
        plot_scale(doc, tmp_path, INFO)


def test_a_router_document_without_samples_says_to_run_it_again(tmp_path: Path) -> None:
    doc = router_doc()
    del doc["workloads"]["default"]["raw"]["vllm-router"]["16"][0]["latency_ms"]
    with pytest.raises(PlotError, match=r"'vllm-router' at 16 streams has no 'latency_ms'"):
        plot_router(doc, tmp_path, INFO)


def test_the_document_says_which_benchmark_and_run_it_is(tmp_path: Path) -> None:
    assert len(plot_document(scale_doc((16,)), tmp_path, INFO)) == 3
    with pytest.raises(PlotError, match=r"not a benchmarks.scale or benchmarks.router document \(keys \['x'\]\)"):
        plot_document({"x": 1}, tmp_path, INFO)
    assert RunInfo.of(scale_doc(), RunInfo("d", "c", "m")) == INFO
    assert RunInfo.of({"run": {"date": 1}}, INFO) == INFO


def test_the_command_redraws_from_json_and_refuses_a_bad_file(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    good, bad = tmp_path / "scale.json", tmp_path / "bad.json"
    good.write_text(json.dumps(scale_doc()))
    bad.write_text("[1, 2]")
    assert main([str(good), "--out", str(tmp_path / "out")]) == 0
    assert (tmp_path / "out" / "scale-cpu-per-round.png").is_file()
    assert main([str(bad), "--out", str(tmp_path / "out")]) == 2
    assert f"plots: {bad}: expected a JSON object, got list" in capsys.readouterr().err
