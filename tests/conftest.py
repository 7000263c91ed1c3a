"""Fixtures shared by every test package."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from motor.launch.etcd import EtcdNotFoundError, start_etcd
from motor.sim.zygote import start_zygote


@pytest.fixture(scope="session")
def etcd_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """host:port of one real etcd server per test session, started on first use, stopped at the end.

    Tests share it, so each uses its own key prefix. A missing binary fails the test rather than
    skipping it: CI must really run what depends on etcd.
    """
    try:
        server = start_etcd(tmp_path_factory.mktemp("etcd"))
    except EtcdNotFoundError as exc:
        missing = str(exc)
    else:
        missing = None
    if missing is not None:
        pytest.fail(missing, pytrace=False)
    try:
        yield server.endpoint
    finally:
        server.stop()


@pytest.fixture(scope="session")
def executor_zygote(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The address of one executor zygote per test session (`motor.sim.zygote`), started on first
    use, stopped at the end. The cluster and group fixtures that take it give it to their reference
    engines, whose executors then fork from it: torch is imported once for all of them rather than
    once per cluster."""
    proc, address = start_zygote(tmp_path_factory.mktemp("executor-zygote"))
    try:
        yield address
    finally:
        proc.stop(grace_sec=5)


_FUZZ_LINES = pytest.StashKey[list[str]]()


@pytest.fixture
def fuzz_report(request: pytest.FixtureRequest) -> Callable[[str], None]:
    """Fuzz tests report how many cases ran (and how they ended); shown in the session summary."""
    lines = request.config.stash.setdefault(_FUZZ_LINES, [])
    return lambda line: lines.append(line)


def pytest_terminal_summary(terminalreporter, exitstatus, config: pytest.Config) -> None:
    lines = config.stash.get(_FUZZ_LINES, [])
    if lines:
        terminalreporter.section("fuzz cases run")
        for line in lines:
            terminalreporter.write_line(line)
