"""LeaderElection's campaign against an etcd that fails at first (a fake connection, no etcd): each
failure waits the fixed backoff and the campaign goes on until it wins; the outage is logged once."""

from __future__ import annotations

import asyncio
import logging
from types import SimpleNamespace
from typing import Any

import pytest

from motor.controller.election import LeaderElection, ReplicaIdentity
from motor.controller.fencing import Leadership
from motor.controller.persistence.errors import StoreError

TERM = 41
LEASE = 0x5A


class FlakyConnection:
    """Answers the election's calls by name; the first `failures` reads of the leader key fail."""

    timeout_sec = 1.0

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.calls: list[str] = []
        self.won = False

    async def call(self, what: str, key: str, op: Any, *, write: bool) -> Any:
        self.calls.append(what)
        if what == "read leader key":
            if self.failures:
                self.failures -= 1
                raise StoreError("etcd unreachable")
            return SimpleNamespace(create_revision=TERM, lease=LEASE, mod_revision=TERM) if self.won else None
        if what == "grant leader lease":
            return SimpleNamespace(id=LEASE, ttl=1)
        if what == "campaign":
            self.won = True
            return True, [None, [(None, SimpleNamespace(create_revision=TERM))]]
        if what == "keep the leader lease alive":
            return SimpleNamespace(TTL=1)
        return None  # revoke

    async def watch_once(self, what: str, key: bytes, *, start_revision: int, wait_sec: float) -> None:
        return None


async def test_the_campaign_waits_the_backoff_after_each_failure_and_wins_once_etcd_answers(
        caplog: pytest.LogCaptureFixture) -> None:
    conn = FlakyConnection(failures=2)
    leadership = Leadership(election_enabled=True, replica_id="c-1", address="c-1:1")
    elected = []

    async def deposed(reason: str) -> None:
        pass

    election = LeaderElection(conn, "/p/leader", 1, ReplicaIdentity("c-1", "c-1:1"),  # type: ignore[arg-type]
                              leadership, elected.append, deposed)
    loop = asyncio.get_running_loop()
    with caplog.at_level(logging.INFO, logger="motor.controller.election"):
        started = loop.time()
        await election.start()
        try:
            assert [fence.term for fence in elected] == [TERM] and leadership.leading
            assert conn.calls[:3] == ["read leader key"] * 3
            # Two failures, each followed by the backoff (a quarter of the 1 s TTL).
            assert loop.time() - started >= 2 * 0.25
        finally:
            await election.close(resign=True)
    failures = [r for r in caplog.records if "campaign failed (logged once per outage)" in r.getMessage()]
    assert len(failures) == 1 and "etcd unreachable" in failures[0].getMessage()
    assert any("etcd answers again" in r.getMessage() for r in caplog.records)
