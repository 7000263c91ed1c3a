"""Fixtures of the Controller integration tests."""

from __future__ import annotations

import uuid

import pytest


@pytest.fixture
def prefix() -> str:
    """A key prefix of the test's own in the session's shared etcd."""
    return f"/motor-test/{uuid.uuid4().hex}"
