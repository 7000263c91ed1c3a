"""Chaos fixtures: a highly available LocalCluster per test (two Controller replicas on the
cluster's own etcd, a 2 s leader lease) and an artifact folder per test.

Artifacts go to $MOTOR_E2E_OUT (default runs/chaos-<date>) / <test name>/: every process log and
artifacts.json with what each step did (kills, freezes, restarts), what the engines were sent
(their apply journals), what etcd held and what the Coordinator routed to.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from motor.launch.cluster import LocalCluster
from motor.launch.spec import ClusterSpec

REPO = Path(__file__).resolve().parents[2]
OUT = Path(os.environ.get("MOTOR_E2E_OUT", REPO / "runs" / time.strftime("chaos-%Y%m%d-%H%M%S")))
# Short, so takeovers are quick; etcd's own floor is about 2 s.
LEASE_TTL_SEC = 2


class Artifacts:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.data: dict[str, Any] = {"steps": []}

    def step(self, what: str, **facts: Any) -> None:
        self.data["steps"].append({"at_unix_sec": time.time(), "what": what, **facts})

    def record(self, key: str, value: Any) -> None:
        self.data[key] = value

    def save(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        (self.folder / "artifacts.json").write_text(json.dumps(self.data, indent=2, default=str))


@pytest.fixture
def run_dir(request: pytest.FixtureRequest) -> Path:
    folder = OUT / re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.name)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture
def artifacts(run_dir: Path) -> Iterator[Artifacts]:
    arts = Artifacts(run_dir)
    try:
        yield arts
    finally:
        arts.save()


@pytest.fixture
def ha_cluster(run_dir: Path, artifacts: Artifacts):
    """start(**ClusterSpec overrides) → a started HA cluster, torn down by pid at the end."""
    started: list[LocalCluster] = []

    def start(**spec_kwargs: Any) -> LocalCluster:
        spec_kwargs.setdefault("start_etcd", True)
        spec_kwargs.setdefault("controller_replicas", 2)
        spec_kwargs.setdefault("leader_lease_ttl_sec", LEASE_TTL_SEC)
        cluster = LocalCluster(ClusterSpec(**spec_kwargs), run_dir)
        started.append(cluster)
        return cluster.start()

    try:
        yield start
    finally:
        for cluster in started:
            try:
                artifacts.record("final_engine_applies", {r: cluster.engine_applies(r)
                                                          for r in range(cluster.spec.dp_size)})
                artifacts.record("final_etcd", cluster.etcd_view())
            except Exception as exc:  # noqa: BLE001 - artifacts must not mask the test's own failure
                artifacts.record("collect_error", repr(exc))
            cluster.stop()
