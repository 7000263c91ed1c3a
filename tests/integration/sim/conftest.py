"""Fixtures of the engine-group tests: each module starts its own group as its `cluster` fixture
(through `stop_at_end`, so it is stopped when the module is done) and gets a client per rank."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from motor.sim.client import SimClient
from motor.sim.cluster import SimCluster


@pytest.fixture(scope="module")
def stop_at_end() -> Iterator[Callable[[SimCluster], SimCluster]]:
    """stop_at_end(group) → the group, stopped (by pid) once the module's tests are done."""
    started: list[SimCluster] = []

    def keep(group: SimCluster) -> SimCluster:
        started.append(group)
        return group

    try:
        yield keep
    finally:
        for group in started:
            group.stop(grace_sec=5)


@pytest.fixture(scope="module")
def clients(cluster: SimCluster) -> list[SimClient]:
    """A client per rank of the module's `cluster`."""
    return [cluster.client(r) for r in range(len(cluster.ranks))]
