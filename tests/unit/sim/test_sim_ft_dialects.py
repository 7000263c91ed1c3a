"""The engine's FT state machine in vLLM's dialect (diagnosing, no ft_state, entry replaced on every
change, type-name fault_info) next to the RFC-era one, and PR #46370's scale_down rules."""

from __future__ import annotations

from typing import Any

import pytest

from motor.sim.apply_body import ApplyRequest, Instruction
from motor.sim.apply_rules import GroupContext, decide_apply
from motor.sim.config import DEFAULT_DIAGNOSING_SEC, DEFAULT_FT_DIALECT, parse_config
from motor.sim.ft_state import RECOVERY_FAILED_INFO, VLLM_FAULT_INFO, EngineStatus, FtDialect, FtState, FtStatus
from motor.sim.placement import initial_placement, replace_after_scale_down

pytestmark = pytest.mark.timeout(30)

PLACEMENT = initial_placement(4, 4, 4)
CTX = GroupContext(rank=2, dp_size=4, members=(0, 1, 2, 3), removed=(), master_ip="127.0.0.1", master_port=5000)
# After a first round removed rank 0: rank 1, the lowest alive rank, serves the store.
AFTER_0 = GroupContext(rank=2, dp_size=4, members=(1, 2, 3), removed=(0,), master_ip="127.0.0.2", master_port=5001)


def vllm(rank: int = 2) -> FtStatus:
    return FtStatus(rank=rank, dialect=FtDialect.VLLM)


def faulted(status: FtStatus, mask: list[int] | None = None) -> FtStatus:
    assert status.mark_diagnosing()
    assert status.mark_fault(VLLM_FAULT_INFO, mask)
    return status


def scale_down(removed: Any, rid: str = "r1", **master: Any) -> ApplyRequest:
    return ApplyRequest(Instruction.SCALE_DOWN, rid, {"removed_dp_ranks": removed, **master})


# -- status machine --------------------------------------------------------------------------
def test_vllm_fault_goes_through_diagnosing_and_carries_no_ft_state() -> None:
    s = vllm()
    assert s.mark_diagnosing()
    assert s.to_entry() == {"id": 2, "status": "diagnosing"}
    assert not s.serving and not s.mark_diagnosing()
    assert s.mark_fault(VLLM_FAULT_INFO, [3, 1])
    assert s.to_entry() == {"id": 2, "status": "unhealthy", "fault_info": "RuntimeError", "mask": [1, 3]}


def test_vllm_entry_is_replaced_wholesale_so_request_fields_vanish() -> None:
    s = vllm()
    s.reject("early", "rank 2 is healthy; scale_down is only accepted while the engine is unhealthy")
    assert s.to_entry()["last_ft_request_id"] == "early" and "ft_state" not in s.to_entry()
    faulted(s, [3])
    assert s.to_entry() == {"id": 2, "status": "unhealthy", "fault_info": "RuntimeError", "mask": [3]}
    s.begin_recovery("r1")
    assert s.to_entry() == {"id": 2, "status": "unhealthy", "fault_info": "RuntimeError", "mask": [3]}
    assert not s.serving
    s.finish_recovery("r1")
    assert s.to_entry() == {"id": 2, "status": "healthy"}
    assert s.serving


def test_vllm_failed_scale_down_is_fatal_failed_retry_is_not() -> None:
    retry = faulted(vllm())
    retry.begin_recovery("t1")
    retry.fail_recovery("t1", "retry failed: dp ranks [3] did not join", fatal=False)
    assert retry.to_entry() == {"id": 2, "status": "unhealthy", "fault_info": "RuntimeError",
                                "last_ft_request_id": "t1", "ft_error": "retry failed: dp ranks [3] did not join"}
    down = faulted(vllm())
    down.begin_recovery("r1")
    error = "scale_down failed: recovery vote of round r1 failed"
    down.fail_recovery("r1", error, fatal=True)
    assert down.to_entry() == {"id": 2, "status": "dead", "fault_info": RECOVERY_FAILED_INFO,
                               "last_ft_request_id": "r1", "ft_error": error}
    assert RECOVERY_FAILED_INFO == "Recovery failed; full restart required"


def test_rfc_dialect_keeps_ft_state_even_with_a_diagnosing_phase() -> None:
    s = FtStatus(rank=2, dialect=FtDialect.RFC)
    assert s.mark_diagnosing() and s.mark_fault("collective all_reduce failed", [3])
    s.begin_recovery("r1")
    assert s.to_entry()["ft_state"] == "recovering" and s.to_entry()["last_ft_request_id"] == "r1"
    s.fail_recovery("r1", "peers did not join", fatal=True)  # fatal only matters to vllm
    assert (s.status, s.ft_state) == (EngineStatus.UNHEALTHY, FtState.FAILED)
    assert s.to_entry()["fault_info"] == "collective all_reduce failed"


# -- commands only while unhealthy -----------------------------------------------------------
@pytest.mark.parametrize("state", ["healthy", "diagnosing", "dead"])
def test_commands_are_refused_unless_unhealthy(state: str) -> None:
    s = vllm()
    if state == "diagnosing":
        s.mark_diagnosing()
    elif state == "dead":
        s.mark_dead("EngineDeadError")
    d = decide_apply(s, scale_down([1], dp_master_ip="127.0.0.9", dp_store_port=6000), CTX, PLACEMENT)
    assert d.plan is None and d.not_ready
    assert f"rank 2 is {state}" in (d.rejection or "")


def test_a_rule_refusal_is_not_a_state_refusal() -> None:
    d = decide_apply(faulted(vllm()), scale_down([]), CTX, PLACEMENT)
    assert d.rejection == "params.removed_dp_ranks is empty" and not d.not_ready


def test_duplicates_are_recognised_after_the_visible_request_id_is_gone() -> None:
    s = faulted(vllm())
    s.begin_recovery("r1")
    s.finish_recovery("r1")
    assert "last_ft_request_id" not in s.to_entry()
    d = decide_apply(s, scale_down([1], rid="r1"), CTX, PLACEMENT)
    assert d.ignored and "duplicate" in d.ignored and d.rejection is None


# -- scale_down rules (vllm) -----------------------------------------------------------------
def test_master_is_the_lowest_alive_rank_not_rank_0() -> None:
    s = faulted(vllm())
    roomy = replace_after_scale_down(initial_placement(2, 6, 4), [1, 2, 3])  # every rank holds every expert
    kept = decide_apply(s, scale_down([3]), AFTER_0, roomy)
    assert kept.plan is not None, kept
    assert (kept.plan.master_ip, kept.plan.master_port) == ("127.0.0.2", 5001)  # rank 1's store, reused
    assert kept.plan.members == (1, 2) and kept.plan.removed == (0, 3)  # earlier rounds need not be repeated
    moved = decide_apply(s, scale_down([0, 1]), AFTER_0, roomy)
    assert moved.rejection == ("params.dp_master_ip is required (dp master rank 1, the lowest alive rank, "
                               "is removed)")
    given = decide_apply(s, scale_down([1], dp_master_ip="127.0.0.3", dp_store_port=5002), AFTER_0, roomy)
    assert given.plan is not None and given.plan.master_rank == 2 and given.plan.master_port == 5002


def test_rfc_still_needs_the_cumulative_list_and_an_address() -> None:
    s = FtStatus(rank=2)
    s.mark_fault("x")
    placement = replace_after_scale_down(PLACEMENT, [1, 2, 3])
    assert "not cumulative" in (decide_apply(s, scale_down([3]), AFTER_0, placement).rejection or "")
    assert decide_apply(s, scale_down([0, 3]), AFTER_0, placement).rejection == "params.dp_master_ip is required"


@pytest.mark.parametrize(
    "ctx, req, named",
    [
        (GroupContext(0, 1, (0,), (), "127.0.0.1", 5000), scale_down([0]), "dp_size 1"),
        (CTX, scale_down([]), "is empty"),
        (CTX, scale_down([4]), "invalid ranks [4]"),
        (CTX, scale_down([2]), "own rank 2"),
        (AFTER_0, scale_down([0]), "names no newly removed rank"),
        (AFTER_0, scale_down([1, 3], dp_master_ip="127.0.0.2", dp_store_port=5001), "is the old one"),
    ],
)
def test_scale_down_refusals(ctx: GroupContext, req: ApplyRequest, named: str) -> None:
    placement = initial_placement(4, 4, 4) if ctx.dp_size == 4 else initial_placement(4, 0, 1)
    d = decide_apply(faulted(vllm(ctx.rank)), req, ctx, replace_after_scale_down(placement, ctx.members))
    assert d.plan is None and named in (d.rejection or ""), d


# -- flags -----------------------------------------------------------------------------------
def test_dialect_flags_and_defaults() -> None:
    cfg = parse_config([])
    # vLLM's behaviour by default (PR #46370): its dialect and a diagnosing phase.
    assert (cfg.ft_dialect, cfg.diagnosing_sec) == (DEFAULT_FT_DIALECT, DEFAULT_DIAGNOSING_SEC) == (FtDialect.VLLM, 1.5)
    assert (cfg.scale_down_checkin_sec, cfg.idle_step_interval_sec) == (10.0, 0.02)
    cfg = parse_config(["--ft-dialect", "vllm", "--diagnosing-sec", "1.5", "--scale-down-checkin-sec", "2",
                        "--idle-step-interval-sec", "0.05"])
    assert (cfg.ft_dialect, cfg.diagnosing_sec, cfg.scale_down_checkin_sec, cfg.idle_step_interval_sec) == (
        FtDialect.VLLM, 1.5, 2.0, 0.05)


@pytest.mark.parametrize(
    "args, named",
    [
        (["--ft-dialect", "ascend"], "argument --ft-dialect: 'ascend' is not one of: vllm, rfc"),
        (["--diagnosing-sec", "-1"], "argument --diagnosing-sec: '-1' is not a finite number of seconds >= 0"),
        (["--scale-down-checkin-sec", "0"], "argument --scale-down-checkin-sec: '0'"),
        (["--idle-step-interval-sec", "inf"], "argument --idle-step-interval-sec: 'inf'"),
    ],
)
def test_bad_dialect_flags(args: list[str], named: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse_config(args)
    assert named in capsys.readouterr().err
