from __future__ import annotations

from typing import Any

import pytest

from motor.sim.apply_body import ApplyRequest, Instruction
from motor.sim.apply_rules import GroupContext, decide_apply
from motor.sim.ft_state import EngineStatus, FtState, FtStatus
from motor.sim.placement import initial_placement, replace_after_scale_down

pytestmark = pytest.mark.timeout(30)  # per test, module fixtures included

PLACEMENT = initial_placement(4, 4, 4)  # {0: (0, 2), 1: (0, 2), 2: (1, 3), 3: (1, 3)}
CTX = GroupContext(rank=2, dp_size=4, members=(0, 1, 2, 3), removed=(), master_ip="127.0.0.1", master_port=5000)


def unhealthy(rank: int = 2) -> FtStatus:
    s = FtStatus(rank=rank)
    assert s.mark_fault("collective failed", [1])
    return s


def scale_down(removed: Any, ip: Any = "127.0.0.9", port: Any = 6000, rid: str = "r1", **extra: Any) -> ApplyRequest:
    params: dict[str, Any] = {"removed_dp_ranks": removed, **extra}
    if ip is not None:
        params["dp_master_ip"] = ip
    if port is not None:
        params["dp_store_port"] = port
    return ApplyRequest(Instruction.SCALE_DOWN, rid, params)


# -- status transitions ---------------------------------------------------------------------
def test_status_entry_omits_absent_keys() -> None:
    s = FtStatus(rank=3)
    assert s.to_entry() == {"id": 3, "status": "healthy"}
    assert s.serving
    s.mark_fault("boom", [1, 0])
    assert s.to_entry() == {"id": 3, "status": "unhealthy", "fault_info": "boom", "mask": [0, 1]}
    assert not s.serving


def test_recovery_cycle() -> None:
    s = unhealthy()
    s.begin_recovery("r1")
    assert s.to_entry() == {"id": 2, "status": "unhealthy", "fault_info": "collective failed", "mask": [1],
                            "ft_state": "recovering", "last_ft_request_id": "r1"}
    assert not s.mark_fault("late fault")  # a recovery owns the status
    s.finish_recovery("r1")
    assert s.to_entry() == {"id": 2, "status": "healthy", "last_ft_request_id": "r1"}
    assert s.serving


def test_failed_recovery_then_new_fault_clears_stale_failure() -> None:
    s = unhealthy()
    s.begin_recovery("r1")
    s.fail_recovery("r1", "peers did not join")
    assert (s.status, s.ft_state, s.ft_error) == (EngineStatus.UNHEALTHY, FtState.FAILED, "peers did not join")
    healthy = FtStatus(rank=1)
    healthy.reject("probe", "rank 1 is healthy")
    assert healthy.to_entry()["ft_state"] == "failed" and healthy.serving
    assert healthy.mark_fault("new fault")
    assert healthy.to_entry() == {"id": 1, "status": "unhealthy", "fault_info": "new fault", "last_ft_request_id": "probe"}


def test_dead_is_terminal_and_fails_a_running_recovery() -> None:
    s = unhealthy()
    s.begin_recovery("r1")
    s.mark_dead("executor killed")
    assert s.status is EngineStatus.DEAD and s.ft_state is FtState.FAILED
    assert "executor died during recovery r1" in (s.ft_error or "")
    assert not s.mark_fault("x")
    s.fail_recovery("r1", "late")
    assert s.status is EngineStatus.DEAD


def test_mask_update_only_while_unhealthy() -> None:
    s = FtStatus(rank=0)
    assert not s.set_mask([1])
    s.mark_fault("x")
    assert s.set_mask([3, 1]) and s.mask == [1, 3]


# -- apply decisions ------------------------------------------------------------------------
def test_accepts_a_valid_scale_down() -> None:
    d = decide_apply(unhealthy(), scale_down([1]), CTX, PLACEMENT)
    assert d.rejection is None and d.ignored is None and d.plan is not None
    plan = d.plan
    assert plan.members == (0, 2, 3) and plan.removed == (1,) and plan.newly_removed == (1,)
    assert (plan.master_ip, plan.master_port) == ("127.0.0.9", 6000)
    assert plan.placement == replace_after_scale_down(PLACEMENT, [0, 2, 3])


def test_healthy_rank_is_rejected() -> None:
    d = decide_apply(FtStatus(rank=2), scale_down([1]), CTX, PLACEMENT)
    assert d.plan is None and "rank 2 is healthy" in (d.rejection or "")


def test_dead_rank_is_rejected() -> None:
    s = FtStatus(rank=2)
    s.mark_dead("gone")
    assert "rank 2 is dead" in (decide_apply(s, scale_down([1]), CTX, PLACEMENT).rejection or "")


def test_running_recovery_is_not_disturbed() -> None:
    s = unhealthy()
    s.begin_recovery("r1")
    same = decide_apply(s, scale_down([1], rid="r1"), CTX, PLACEMENT)
    other = decide_apply(s, scale_down([1], rid="r2"), CTX, PLACEMENT)
    assert same.ignored and "duplicate" in same.ignored
    assert other.ignored and "r1 is already running" in other.ignored
    assert other.rejection is None and other.plan is None


def test_duplicate_of_a_finished_request_is_ignored() -> None:
    s = unhealthy()
    s.begin_recovery("r1")
    s.finish_recovery("r1")
    d = decide_apply(s, scale_down([1], rid="r1"), CTX, PLACEMENT)
    assert d.ignored and d.plan is None and d.rejection is None


@pytest.mark.parametrize(
    "req, named",
    [
        (ApplyRequest(Instruction.SCALE_DOWN, "r1", {}), "removed_dp_ranks is required"),
        (scale_down("1"), "must be a list of ranks, got '1'"),
        (scale_down([]), "removed_dp_ranks is empty"),
        (scale_down([4]), "invalid ranks [4]"),
        (scale_down([-1]), "invalid ranks [-1]"),
        (scale_down([True]), "invalid ranks [True]"),
        (scale_down([1.0]), "invalid ranks [1.0]"),
        (scale_down([1, 1]), "repeats ranks [1]"),
        (scale_down([0, 1, 2, 3]), "would remove every rank"),
        (scale_down([2]), "own rank 2"),
        (scale_down([1], ip=None), "dp_master_ip is required"),
        (scale_down([1], port=None), "dp_store_port is required"),
        (scale_down([1], ip="node-a"), "'node-a' is not an IP address"),
        (scale_down([1], ip=7), "must be a string IP address, got 7"),
        (scale_down([1], port=0), "[1, 65535], got 0"),
        (scale_down([1], port="6000"), "got '6000'"),
        (scale_down([1], port=True), "got True"),
        (scale_down([0], ip="127.0.0.1", port=5000), "current dp master rank 0 is removed"),
    ],
)
def test_scale_down_validation_names_the_problem(req: ApplyRequest, named: str) -> None:
    d = decide_apply(unhealthy(), req, CTX, PLACEMENT)
    assert d.plan is None and d.rejection is not None, d
    assert named in d.rejection


def test_removing_rank_0_with_a_new_master_is_accepted() -> None:
    d = decide_apply(unhealthy(), scale_down([0], ip="127.0.0.1", port=5001), CTX, PLACEMENT)
    assert d.plan is not None and d.plan.master_rank == 1


def test_cumulative_rounds() -> None:
    ctx = GroupContext(rank=2, dp_size=4, members=(0, 2, 3), removed=(1,), master_ip="127.0.0.1", master_port=5000)
    placement = replace_after_scale_down(PLACEMENT, [0, 2, 3])
    forgot = decide_apply(unhealthy(), scale_down([0], port=5001), ctx, placement)
    assert "not cumulative" in (forgot.rejection or "") and "[1]" in (forgot.rejection or "")
    nothing_new = decide_apply(unhealthy(), scale_down([1]), ctx, placement)
    assert "names no newly removed rank" in (nothing_new.rejection or "")
    ok = decide_apply(unhealthy(), scale_down([1, 0], ip="127.0.0.3", port=5001), ctx, placement)
    assert ok.plan is not None
    assert ok.plan.members == (2, 3) and ok.plan.removed == (0, 1) and ok.plan.newly_removed == (0,)


def test_insufficient_redundancy_is_a_rejection() -> None:
    d = decide_apply(unhealthy(), scale_down([0, 1], ip="127.0.0.3"), CTX, initial_placement(4, 0, 4))
    assert d.plan is None and "insufficient expert redundancy" in (d.rejection or "")


def test_retry_keeps_membership_and_master_unless_given() -> None:
    d = decide_apply(unhealthy(), ApplyRequest(Instruction.RETRY, "t1", {}), CTX, PLACEMENT)
    assert d.plan is not None
    assert d.plan.members == CTX.members and d.plan.removed == () and d.plan.placement == PLACEMENT
    assert (d.plan.master_ip, d.plan.master_port) == ("127.0.0.1", 5000)
    moved = decide_apply(unhealthy(), ApplyRequest(Instruction.RETRY, "t2", {"dp_master_ip": "127.0.0.1",
                                                                             "dp_store_port": 5005}), CTX, PLACEMENT)
    assert moved.plan is not None and moved.plan.master_port == 5005
    half = decide_apply(unhealthy(), ApplyRequest(Instruction.RETRY, "t3", {"dp_store_port": 5005}), CTX, PLACEMENT)
    assert "dp_master_ip is required" in (half.rejection or "")


def test_unknown_params_are_warnings() -> None:
    d = decide_apply(unhealthy(), scale_down([1], colour="blue"), CTX, PLACEMENT)
    assert d.plan is not None and d.warnings == ["ignoring unknown params ['colour']"]
