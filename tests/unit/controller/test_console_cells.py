"""The console's fleet rows: each rank's state from the runtime and the evidence held (first match
wins: retired, dead, restarting, unhealthy, diagnosing, healthy), and the page's assets as package
data."""

from __future__ import annotations

import tomllib
from fnmatch import fnmatch
from pathlib import Path

from gen.motor.v1 import common_pb2
from motor.controller.console.app import ASSETS
from motor.controller.console.cells import STATE_LETTERS, fleet_row, rank_cells
from motor.controller.fault_tolerance.evidence import EvidenceKind, Health, RankEvidence
from motor.controller.model.runtime import FtPhase, FtRuntimeStore

REPO = Path(__file__).resolve().parents[3]


def _runtimes(ranks: int = 6) -> FtRuntimeStore:
    store = FtRuntimeStore(scale_down_enabled=True)
    store.create(7, list(range(ranks)), "instance_reconfiguration")
    return store


def _evidence(rank: int, health: Health) -> RankEvidence:
    kind = {Health.DEAD: EvidenceKind.DEAD, Health.UNHEALTHY: EvidenceKind.UNHEALTHY}[health]
    return RankEvidence(rank, health, kind, "", observed_at_sec=1.0)


def test_a_round_in_flight_and_its_commit() -> None:
    store = _runtimes()
    store.set_phase(7, FtPhase.DECIDING)
    store.begin_round(7, "sd-1", [1])
    store.record_engine_status(7, 0, common_pb2.EngineFtStatus(id=0, status=common_pb2.ENGINE_HEALTH_UNHEALTHY))
    store.record_engine_status(7, 2, common_pb2.EngineFtStatus(id=2, status=common_pb2.ENGINE_HEALTH_DIAGNOSING))
    store.record_engine_status(7, 3, common_pb2.EngineFtStatus(id=3, status=common_pb2.ENGINE_HEALTH_HEALTHY,
                                                               ft_state=common_pb2.FT_STATE_RECOVERING))
    rt = store.get(7)
    assert rank_cells(rt, {4: _evidence(4, Health.DEAD), 5: _evidence(5, Health.UNHEALTHY)}) == "udgsdu"
    store.set_phase(7, FtPhase.SCALING_DOWN)
    store.set_phase(7, FtPhase.POST_SCALE_CLEANUP)
    store.commit_round(7, [1])
    store.set_phase(7, FtPhase.SCALED_DOWN_RUNNING)
    store.begin_round(7, "", [])  # the round's statuses are cleared with the next round
    row = fleet_row(store.get(7), {}, "")
    assert row["cells"] == "hrhhhh" and row["alive"] == 5 and row["original"] == 6
    assert row["phase"] == "SCALED_DOWN_RUNNING" and row["ranks"] == [0, 1, 2, 3, 4, 5]


def test_a_reconfiguration_restarts_every_rank_but_the_retired() -> None:
    store = _runtimes(4)
    store.set_phase(7, FtPhase.DECIDING)
    store.set_phase(7, FtPhase.SCALING_DOWN)
    store.set_phase(7, FtPhase.POST_SCALE_CLEANUP)
    store.commit_round(7, [3])
    store.set_phase(7, FtPhase.SCALED_DOWN_RUNNING)
    store.set_phase(7, FtPhase.RECONFIGURING)
    row = fleet_row(store.get(7), {0: _evidence(0, Health.UNHEALTHY)}, "instance_reconfiguration")
    assert row["cells"] == "sssr" and row["strategy"] == "instance_reconfiguration" and not row["can_serve"]


def test_every_state_has_its_own_letter() -> None:
    assert len(set(STATE_LETTERS.values())) == len(STATE_LETTERS)
    fleet_js = (REPO / "motor/controller/console/static/fleet.js").read_text(encoding="utf-8")
    for name, letter in STATE_LETTERS.items():
        assert f'["{letter}", "{name}",' in fleet_js, name  # the page's legend reads the same table


def test_the_page_and_its_assets_are_package_data() -> None:
    static = REPO / "motor/controller/console/static"
    patterns = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    shipped = patterns["motor.controller.console"]
    for name in ["index.html", *ASSETS]:
        assert (static / name).is_file(), name
        assert any(fnmatch(f"static/{name}", p) for p in shipped), name
    index = (static / "index.html").read_text(encoding="utf-8")
    assert "http:" not in index and "https:" not in index  # nothing fetched from elsewhere
    for name in ASSETS:
        if name.endswith(".js") or name.endswith(".css"):
            assert f"/ui/static/{name}" in index, name
