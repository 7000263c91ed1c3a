"""Fixtures shared by every test package."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from motor.launch.etcd import EtcdNotFoundError, start_etcd


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
