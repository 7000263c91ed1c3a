"""The light fake engine's simulated DP group follows the reference engine's protocol (vLLM dialect):
diagnosing → unhealthy on a peer's death, scale_down rules, check-in, rebuild, failed vote → dead.
Event-driven waits only (no wall-clock bounds)."""

from __future__ import annotations

import asyncio

import pytest

from motor.testing.fake_group import RECOVERY_FAILED_INFO, ApplyRejected, FakeDpGroup
from motor.testing.waits import async_wait_for


def _body(request_id: str, removed: list[int], **params) -> dict:
    return {"instruction": "scale_down", "request_id": request_id, "params": {"removed_dp_ranks": removed, **params}}


async def test_peer_death_diagnosing_then_unhealthy_with_mask() -> None:
    group = FakeDpGroup([0, 1, 2, 3], diagnosing_sec=0.05, rebuild_sec=0.01)
    group.inject(1, "executor_death")
    assert group.ranks[1].entry() == {"id": 1, "status": "dead", "fault_info": "EngineDeadError"}
    await async_wait_for(lambda: group.ranks[0].status == "diagnosing", 10.0, "diagnosing", interval_sec=0.005)
    with pytest.raises(ApplyRejected, match="diagnosing"):
        group.apply(0, _body("r1", [1]))
    await async_wait_for(lambda: all(group.ranks[r].status == "unhealthy" for r in (0, 2, 3)), 10.0, "unhealthy",
                         interval_sec=0.005)
    assert group.ranks[2].entry() == {"id": 2, "status": "unhealthy", "fault_info": "RuntimeError", "mask": [1]}
    events = [(e["rank"], e["event"]) for e in group.journal]
    assert (1, "dead") in events and (0, "diagnosing") in events and (0, "unhealthy") in events


async def test_scale_down_round_commits_after_every_survivor_checked_in() -> None:
    group = FakeDpGroup([0, 1, 2, 3], diagnosing_sec=0, rebuild_sec=0.01)
    group.inject(0, "executor_death")
    await async_wait_for(lambda: all(group.ranks[r].status == "unhealthy" for r in (1, 2, 3)), 10.0, "unhealthy",
                         interval_sec=0.005)
    with pytest.raises(ApplyRejected, match="required"):
        group.apply(1, _body("r1", [0]))  # the master (rank 0) is removed: a new address is needed
    with pytest.raises(ApplyRejected, match="own rank"):
        group.apply(1, _body("r1", [0, 1], dp_master_ip="127.0.0.2", dp_store_port=20001))
    for r in (1, 2):
        assert group.apply(r, _body("r1", [0], dp_master_ip="127.0.0.2", dp_store_port=20001)) == "r1"
    await asyncio.sleep(0.03)
    assert not group.serving(1), "no commit before the last survivor checked in"
    group.apply(3, _body("r1", [0], dp_master_ip="127.0.0.2", dp_store_port=20001))
    await async_wait_for(lambda: all(group.serving(r) for r in (1, 2, 3)), 10.0, "healthy", interval_sec=0.005)
    assert group.describe()["members"] == [1, 2, 3] and group.describe()["removed"] == [0]
    assert group.ranks[1].entry() == {"id": 1, "status": "healthy"}
    # The next fault: the removed rank stays removed; an apply naming no new rank is refused.
    group.inject(3, "executor_death")
    await async_wait_for(lambda: group.ranks[1].status == "unhealthy", 10.0, "second fault", interval_sec=0.005)
    with pytest.raises(ApplyRejected, match="no newly removed"):
        group.apply(1, _body("r2", [0]))
    group.apply(1, _body("r2", [0, 3]))
    group.apply(2, _body("r2", [3]))
    await async_wait_for(lambda: group.serving(1) and group.serving(2), 10.0, "second round", interval_sec=0.005)
    assert group.describe()["members"] == [1, 2]


async def test_missing_check_in_makes_the_checked_in_survivors_dead() -> None:
    group = FakeDpGroup([0, 1, 2], diagnosing_sec=0, checkin_sec=0.05)
    group.inject(2, "kill_process")
    assert group.ranks[2].killed
    await async_wait_for(lambda: group.ranks[0].status == "unhealthy" and group.ranks[1].status == "unhealthy", 10.0,
                         "unhealthy", interval_sec=0.005)
    group.apply(0, _body("r1", [2]))
    await async_wait_for(lambda: group.ranks[0].status == "dead", 10.0, "failed vote", interval_sec=0.005)
    assert group.ranks[0].fault_info == RECOVERY_FAILED_INFO
    assert group.ranks[1].status == "unhealthy"


async def test_commands_other_than_scale_down_are_refused() -> None:
    group = FakeDpGroup([0, 1])
    with pytest.raises(ApplyRejected, match="Invalid instruction"):
        group.apply(0, {"instruction": "retry", "request_id": "x"})
    with pytest.raises(ApplyRejected, match="non-empty"):
        group.apply(0, {"instruction": "scale_down", "request_id": ""})
    with pytest.raises(ValueError, match="every rank"):
        FakeDpGroup([1, 2])
