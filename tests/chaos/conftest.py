"""Chaos fixtures: a highly available LocalCluster per test (two Controller replicas on the
cluster's own etcd, a 2 s leader lease) and an artifact folder per test.

Artifacts go to $MOTOR_E2E_OUT (default runs/chaos-<date>) / <test name>/: every process log and
artifacts.json with what each step did (kills, freezes, restarts), what the engines were sent
(their apply journals), what etcd held and what the Coordinator routed to.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from motor.launch.cluster import LocalCluster
from motor.launch.engines import ReferenceEngines
from motor.launch.spec import ClusterSpec
from motor.testing.artifacts import Artifacts, artifacts_root, run_folder

from .chaos_checks import CHAOS_FIRST_POD_IP

OUT = artifacts_root(Path(__file__).resolve().parents[2] / "runs", "chaos")
# Short, so takeovers are quick; etcd's own floor is about 2 s.
LEASE_TTL_SEC = 2


@pytest.fixture
def run_dir(request: pytest.FixtureRequest) -> Path:
    return run_folder(OUT, request.node.name)


@pytest.fixture
def artifacts(run_dir: Path) -> Iterator[Artifacts]:
    arts = Artifacts(run_dir, steps=[])
    try:
        yield arts
    finally:
        arts.save()


@pytest.fixture
def ha_cluster(run_dir: Path, artifacts: Artifacts, executor_zygote: str):
    """start(**ClusterSpec overrides) → a started HA cluster, torn down by pid at the end."""
    started: list[LocalCluster] = []

    def start(**spec_kwargs: Any) -> LocalCluster:
        spec_kwargs.setdefault("start_etcd", True)
        spec_kwargs.setdefault("controller_replicas", 2)
        spec_kwargs.setdefault("leader_lease_ttl_sec", LEASE_TTL_SEC)
        spec_kwargs.setdefault("first_pod_ip", CHAOS_FIRST_POD_IP)
        cluster = LocalCluster(ClusterSpec(**spec_kwargs), run_dir, ReferenceEngines(zygote_address=executor_zygote))
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
