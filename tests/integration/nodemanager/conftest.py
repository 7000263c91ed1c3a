"""Fixtures of the NodeManager integration tests: a recording Controller peer on a real gRPC server."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from motor.testing.fake_controller import FakeController


@pytest.fixture
def controller() -> Iterator[FakeController]:
    fc = FakeController(proxy_enabled=True, heartbeat_interval_sec=0.2)
    fc.start()
    try:
        yield fc
    finally:
        fc.stop()
