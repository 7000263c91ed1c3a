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


def test_the_reference_engines_fault_names_are_simulated() -> None:
    from motor.sim.injection import FAULTS as REFERENCE_FAULTS
    from motor.testing.fake_group import FAULTS

    assert FAULTS == REFERENCE_FAULTS
    group = FakeDpGroup([0, 1])
    with pytest.raises(ValueError, match="unknown fault 'explode'"):
        group.inject(0, "explode")
    with pytest.raises(ValueError, match="needs 'delay_sec'"):
        group.inject(0, "slow_rebuild")
    with pytest.raises(ValueError, match="duration_sec must be a number > 0"):
        group.inject(0, "hang_status", {"duration_sec": 0})
    with pytest.raises(ValueError, match="reason must be a non-blank string"):
        group.inject(0, "fail_vote", {"reason": " "})


async def _faulted(group: FakeDpGroup, victim: int) -> list[int]:
    group.inject(victim, "executor_death")
    survivors = sorted(set(group.ranks) - {victim})
    await async_wait_for(lambda: all(group.ranks[r].status == "unhealthy" for r in survivors), 10.0, "unhealthy", interval_sec=0.005)
    return survivors


async def test_failed_apply_is_accepted_then_the_round_fails_on_every_survivor() -> None:
    group = FakeDpGroup([0, 1, 2, 3], diagnosing_sec=0, checkin_sec=0.05)
    survivors = await _faulted(group, 3)
    group.inject(1, "fail_next_apply", {"reason": "disk full"})
    for r in survivors:
        assert group.apply(r, _body("r1", [3])) == "r1"  # every apply is accepted (202)
    assert group.ranks[1].entry() == {"id": 1, "status": "dead", "fault_info": RECOVERY_FAILED_INFO,
                                      "last_ft_request_id": "r1", "ft_error": "injected failure: disk full"}
    await async_wait_for(lambda: all(group.ranks[r].status == "dead" for r in survivors), 10.0, "round failed", interval_sec=0.005)
    assert group.ranks[0].fault_info == RECOVERY_FAILED_INFO and group.ranks[0].last_ft_request_id == "r1"
    assert "did not join DP group" in group.ranks[0].ft_error and "[1]" in group.ranks[0].ft_error
    assert group.describe()["members"] == [0, 1, 2, 3], "nothing committed"
    assert group.ranks[1].injections.fail_next_apply is None, "taken by the apply"


async def test_stalled_apply_is_accepted_and_never_recovers() -> None:
    group = FakeDpGroup([0, 1, 2], diagnosing_sec=0, checkin_sec=0.05)
    survivors = await _faulted(group, 2)
    group.inject(0, "stall_next_apply")
    for r in survivors:
        group.apply(r, _body("r1", [2]))
    await async_wait_for(lambda: group.ranks[1].status == "dead", 10.0, "the other survivor's round fails", interval_sec=0.005)
    assert group.ranks[0].entry() == {"id": 0, "status": "unhealthy", "fault_info": "RuntimeError", "mask": [2]}
    assert not group.serving(0) and group.ranks[0].stalled == "r1"
    assert group.apply(0, _body("r2", [2])) == "r2", "a later command is ignored, not refused"
    await asyncio.sleep(0.06)
    assert group.ranks[0].status == "unhealthy" and not group.serving(0)
    events = [(e["rank"], e["event"]) for e in group.journal]
    assert (0, "stalled") in events and (0, "ignored") in events


async def test_failed_vote_makes_every_survivor_dead_after_all_checked_in() -> None:
    group = FakeDpGroup([0, 1, 2, 3], diagnosing_sec=0, rebuild_sec=0.01, checkin_sec=5.0)
    survivors = await _faulted(group, 0)
    group.inject(2, "fail_vote")
    for r in survivors:
        group.apply(r, _body("r1", [0], dp_master_ip="127.0.0.3", dp_store_port=20001))
    await async_wait_for(lambda: all(group.ranks[r].status == "dead" for r in survivors), 10.0, "vote failed", interval_sec=0.005)
    for r in survivors:
        entry = group.ranks[r].entry()
        assert entry["fault_info"] == RECOVERY_FAILED_INFO and entry["last_ft_request_id"] == "r1"
        assert entry["ft_error"] == "scale_down failed: the vote to commit failed (rank 2: injected vote failure)"
    assert group.describe()["members"] == [0, 1, 2, 3] and group.describe()["generation"] == 0
    assert any(e["event"] == "all_checked_in" for e in group.journal), "every survivor checked in first"


async def test_slow_rebuild_delays_the_commit_and_clear_disarms() -> None:
    group = FakeDpGroup([0, 1, 2], diagnosing_sec=0, rebuild_sec=0.0)
    survivors = await _faulted(group, 2)
    group.inject(0, "slow_rebuild", {"delay_sec": 0.2})
    group.inject(1, "fail_vote")
    group.inject(1, "clear")
    assert group.ranks[1].injections.fail_vote is None
    for r in survivors:
        group.apply(r, _body("r1", [2]))
    await asyncio.sleep(0.05)
    assert not group.serving(0), "still rebuilding"
    await async_wait_for(lambda: group.serving(0) and group.serving(1), 10.0, "committed after the delay", interval_sec=0.005)
    assert group.describe()["members"] == [0, 1]


async def test_hang_status_holds_the_status_read_until_cleared() -> None:
    group = FakeDpGroup([0, 1])
    group.inject(1, "hang_status")
    read = asyncio.create_task(group.ranks[1].injections.wait_status_released())
    await asyncio.sleep(0.02)
    assert not read.done()
    group.inject(1, "clear")
    await asyncio.wait_for(read, 1)
    group.inject(1, "hang_status", {"duration_sec": 0.01})
    await asyncio.wait_for(group.ranks[1].injections.wait_status_released(), 1)


async def test_a_late_apply_to_a_failed_round_fails_with_the_rounds_error() -> None:
    group = FakeDpGroup([0, 1, 2, 3], diagnosing_sec=0, rebuild_sec=0.01, checkin_sec=0.05)
    await _faulted(group, 1)
    group.apply(0, _body("r1", [1]))
    await async_wait_for(lambda: group.ranks[0].status == "dead", 10.0, "check-in timeout", interval_sec=0.005)
    assert "within the 0.05s check-in window" in group.ranks[0].ft_error
    group.apply(2, _body("r1", [1]))
    assert group.ranks[2].entry()["status"] == "dead" and group.ranks[2].ft_error == group.ranks[0].ft_error


async def test_a_stopped_rank_restarts_as_a_fresh_member_and_a_first_start_changes_nothing() -> None:
    group = FakeDpGroup([0, 1, 2, 3], diagnosing_sec=0, rebuild_sec=0.01)
    group.inject(2, "fail_vote", {"reason": "armed"})
    group.started(2)  # the placeholder's first start: the armed fault stays
    assert group.ranks[2].injections.fail_vote == "armed"
    reopened: list[int] = []
    group.on_start = reopened.append
    group.inject(1, "kill_process")
    await async_wait_for(lambda: all(group.ranks[r].status == "unhealthy" for r in (0, 2, 3)), 10.0, "unhealthy", interval_sec=0.005)
    group.apply(0, _body("r1", [1]))  # a round that the restart below ends
    for rank in range(4):
        group.stopped(rank)
    assert not group.serving(0) and group.ranks[0].entry()["status"] == "dead"
    for rank in range(4):
        group.started(rank)
    assert reopened == [1]  # the killed rank's listener opens again
    assert all(group.serving(r) for r in range(4)) and group.describe()["members"] == [0, 1, 2, 3]
    assert group.ranks[2].injections.fail_vote is None
    await asyncio.sleep(0.02)
    assert all(group.serving(r) for r in range(4)), "the ended round's timers changed nothing"
