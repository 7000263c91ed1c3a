"""Fixtures of the Coordinator integration tests: real motor-engine-sim DP groups on loopback
(started once per session, in parallel, stopped by pid) and in-process Coordinators on port 0.
See coordinator_helpers.py for the engine layout.
"""

from __future__ import annotations

import os
import signal
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import aiohttp
import grpc
import pytest
from .coordinator_helpers import (
    MODEL_A,
    MODEL_B,
    SIM_ARGS,
    CoordinatorFactory,
    CoordinatorHandle,
    Engines,
)

from motor.common.config.loader import build_config
from motor.coordinator.config import CoordinatorConfig
from motor.coordinator.main import CoordinatorService
from motor.sim.cluster import SimCluster

REPO_ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="session")
def engines(tmp_path_factory: pytest.TempPathFactory, executor_zygote: str) -> Iterator[Engines]:
    base = tmp_path_factory.mktemp("coordinator-engines")
    specs = {
        "group_a": (2, ["127.0.0.1", "127.0.0.2"], MODEL_A),
        "group_b": (1, ["127.0.0.3"], MODEL_B),
    }
    started: dict[str, SimCluster] = {}

    def start(name: str) -> SimCluster:
        dp_size, hosts, model = specs[name]
        cluster = SimCluster.start(base / name, dp_size, hosts=hosts, cwd=REPO_ROOT, ready_timeout_sec=90,
                                   extra_args=[*SIM_ARGS, "--model", model], zygote=executor_zygote)
        started[name] = cluster
        return cluster

    try:
        with ThreadPoolExecutor(len(specs)) as pool:
            futures = {name: pool.submit(start, name) for name in specs}
            clusters = {name: f.result() for name, f in futures.items()}
        yield Engines(**clusters)
    finally:
        for cluster in started.values():
            cluster.stop(grace_sec=5)


@pytest.fixture
async def start_coordinator() -> AsyncIterator[CoordinatorFactory]:
    """Starts in-process Coordinators (gRPC and HTTP on 127.0.0.1, port 0); all stopped at teardown."""
    handles: list[CoordinatorHandle] = []

    async def start(**overrides: Any) -> CoordinatorHandle:
        config = build_config(CoordinatorConfig, {
            "server": {"host": "127.0.0.1", "port": 0, "shutdown_grace_sec": 1.0},
            "http": {"host": "127.0.0.1", "port": 0},
            "upstream_timeout_sec": 30.0,
            # Most cases check the immediate answer; holding has its own test.
            "hold_when_unavailable_sec": 0.0,
            **overrides,
        })
        service = CoordinatorService(config)
        try:
            await service.start()
        except BaseException:
            await service.stop()
            raise
        handle = CoordinatorHandle(service, grpc.aio.insecure_channel(f"127.0.0.1:{service.grpc_port}"),
                                   config.management_key)
        handles.append(handle)
        return handle

    try:
        yield start
    finally:
        for handle in handles:
            await handle.channel.close()
            await handle.service.stop()


@pytest.fixture
async def coordinator(start_coordinator: CoordinatorFactory) -> CoordinatorHandle:
    return await start_coordinator()


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
        yield session


@pytest.fixture
def victim(tmp_path: Path, executor_zygote: str) -> Iterator[SimCluster]:
    """A fresh 1-rank group serving MODEL_A on 127.0.0.4 (instance 3 in the tests), for one test to
    break; resumed (a test may have SIGSTOPped it) and stopped by pid after it."""
    cluster = SimCluster.start(tmp_path / "victim", 1, hosts=["127.0.0.4"], cwd=REPO_ROOT, ready_timeout_sec=90,
                               extra_args=[*SIM_ARGS, "--model", MODEL_A], zygote=executor_zygote)
    try:
        yield cluster
    finally:
        try:
            os.kill(cluster.ranks[0].proc.pid, signal.SIGCONT)
        except ProcessLookupError:
            pass
        cluster.stop(grace_sec=5)
