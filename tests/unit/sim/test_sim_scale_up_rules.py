"""The engine's scale_up rules (pure): who may be re-admitted, every refusal an HTTP 400 naming the
value with the status untouched, the grown group and its placement computed alike by survivors and
joiners, and the statuses a round goes through in both dialects."""

from __future__ import annotations

import json
from typing import Any

import pytest

from motor.sim.apply_body import ApplyRequest, Instruction, parse_apply_body
from motor.sim.apply_rules import GroupContext, decide_apply
from motor.sim.config import parse_config
from motor.sim.ft_state import RECOVERY_FAILED_INFO, VLLM_FAULT_INFO, EngineStatus, FtDialect, FtState, FtStatus
from motor.sim.instance_ft_state import ApplyRefused, parse_apply
from motor.sim.placement import initial_placement, replace_after_scale_down, replace_after_scale_up

pytestmark = pytest.mark.timeout(30)

# 4 logical experts in 8 slots, 2 per rank; ranks 1 and then 0 were removed.
FULL = initial_placement(4, 4, 4)
AFTER_1 = replace_after_scale_down(FULL, (0, 2, 3))
AFTER_0_1 = replace_after_scale_down(AFTER_1, (2, 3))
SURVIVOR = GroupContext(rank=2, dp_size=4, members=(0, 2, 3), removed=(1,), master_ip="127.0.0.150", master_port=5001)
SURVIVOR_0_1 = GroupContext(rank=3, dp_size=4, members=(2, 3), removed=(0, 1), master_ip="127.0.0.152",
                            master_port=5002)
JOINER = GroupContext(rank=1, dp_size=4, members=(), removed=(), master_ip="", master_port=0)


def healthy(rank: int, dialect: FtDialect = FtDialect.VLLM) -> FtStatus:
    return FtStatus(rank=rank, dialect=dialect)


def joiner_status(rank: int = 1, dialect: FtDialect = FtDialect.VLLM) -> FtStatus:
    return FtStatus(rank=rank, dialect=dialect, standby=True)


def scale_up(added: Any = (1,), removed: Any = (), ip: Any = "127.0.0.150", port: Any = 6000, rid: str = "up-1",
             **extra: Any) -> ApplyRequest:
    params: dict[str, Any] = {**extra}
    for key, value in (("added_dp_ranks", added), ("removed_dp_ranks", removed)):
        if value is not None:
            params[key] = list(value) if isinstance(value, tuple) else value
    if ip is not None:
        params["dp_master_ip"] = ip
    if port is not None:
        params["dp_store_port"] = port
    return ApplyRequest(Instruction.SCALE_UP, rid, params)


# -- accepted -----------------------------------------------------------------------------------
def test_survivor_and_joiner_compute_the_same_grown_group_and_placement() -> None:
    s = decide_apply(healthy(2), scale_up(), SURVIVOR, AFTER_1)
    j = decide_apply(joiner_status(), scale_up(), JOINER, FULL)
    assert s.plan is not None and j.plan is not None, (s, j)
    for plan in (s.plan, j.plan):
        assert (plan.members, plan.removed, plan.added, plan.newly_removed) == ((0, 1, 2, 3), (), (1,), ())
        assert (plan.master_ip, plan.master_port, plan.master_rank, plan.new_store) == ("127.0.0.150", 6000, 0, True)
    assert s.plan.placement == j.plan.placement == FULL  # the added rank gets its replicas back
    assert s.plan.pause_group and not j.plan.pause_group  # only a survivor has a live group to leave


def test_two_removed_ranks_come_back_together_and_the_lowest_grown_rank_is_master() -> None:
    req = scale_up(added=[1, 0], ip="127.0.0.150", port=6100)
    plans = [decide_apply(healthy(3), req, SURVIVOR_0_1, AFTER_0_1).plan,
             decide_apply(joiner_status(0), req, GroupContext(0, 4, (), (), "", 0), FULL).plan]
    for plan in plans:
        assert plan is not None
        assert (plan.members, plan.added, plan.master_rank) == ((0, 1, 2, 3), (0, 1), 0)
        assert plan.placement == FULL


def test_a_partial_scale_up_keeps_the_others_removed_and_experts_cover_the_grown_group() -> None:
    plan = decide_apply(healthy(3), scale_up(added=[1], removed=[0]), SURVIVOR_0_1, AFTER_0_1).plan
    assert plan is not None and (plan.members, plan.removed) == ((1, 2, 3), (0,))
    assert sorted(plan.placement.by_rank) == [1, 2, 3] and plan.placement.by_rank[1]
    assert all(plan.placement.replicas()[e] for e in range(4))


def test_placement_after_scale_up_gives_every_added_rank_slots() -> None:
    grown = replace_after_scale_up(AFTER_0_1, (0, 1, 2, 3))
    assert grown == FULL and all(len(grown.by_rank[r]) == 2 for r in range(4))


# -- refused (HTTP 400, status untouched) ---------------------------------------------------------
REFUSED = [
    (SURVIVOR, scale_up(added=[]), "params.added_dp_ranks is empty"),
    (SURVIVOR, scale_up(added=None), "params.added_dp_ranks is required"),
    (SURVIVOR, scale_up(removed=None), "params.removed_dp_ranks is required"),
    (SURVIVOR, scale_up(added=[4]), "params.added_dp_ranks has invalid ranks [4] (original dp ranks are 0..3)"),
    (SURVIVOR, scale_up(added=["1"]), "params.added_dp_ranks has invalid ranks ['1']"),
    (SURVIVOR, scale_up(added=1), "params.added_dp_ranks must be a list of ranks, got 1"),
    (SURVIVOR, scale_up(added=[1], removed=[-1]), "params.removed_dp_ranks has invalid ranks [-1]"),
    (SURVIVOR, scale_up(added=[1, 1]), "params.added_dp_ranks [1, 1] repeats ranks [1]"),
    (SURVIVOR, scale_up(added=[1], removed=[1]), "params.added_dp_ranks [1] and params.removed_dp_ranks [1] both "
                                                 "name ranks [1]"),
    (SURVIVOR, scale_up(ip=None), "params.dp_master_ip is required"),
    (SURVIVOR, scale_up(port=None), "params.dp_store_port is required"),
    (SURVIVOR, scale_up(ip="host"), "params.dp_master_ip 'host' is not an IP address"),
    (SURVIVOR, scale_up(port=0), "params.dp_store_port must be an integer in [1, 65535], got 0"),
    (SURVIVOR, scale_up(added=[2, 1]), "params.added_dp_ranks [2, 1] names this engine's own rank 2"),
    (SURVIVOR, scale_up(added=[0, 1]), "params.added_dp_ranks [0, 1] names ranks [0] that are in the DP group now "
                                       "(members [0, 2, 3])"),
    (SURVIVOR, scale_up(added=[1], removed=[2]), "params.removed_dp_ranks [2] names this engine's own rank 2"),
    (SURVIVOR, scale_up(added=[1], removed=[3]), "params.removed_dp_ranks [3] names ranks [3] of the DP group"),
    (SURVIVOR_0_1, scale_up(added=[1]), "params.removed_dp_ranks [] omits ranks [0], which are removed and not in "
                                        "params.added_dp_ranks [1]"),
    (SURVIVOR, scale_up(port=5001), "127.0.0.150:5001 is the current group's DP store"),
    (JOINER, scale_up(added=[0]), "params.added_dp_ranks [0] does not name this engine's own rank 1"),
]


@pytest.mark.parametrize("ctx, req, named", REFUSED)
def test_refusals_name_the_value_and_leave_the_status_alone(ctx: GroupContext, req: ApplyRequest, named: str) -> None:
    status = healthy(ctx.rank) if ctx.in_group else joiner_status(ctx.rank)
    before = status.to_entry()
    d = decide_apply(status, req, ctx, AFTER_1 if ctx is SURVIVOR else FULL)
    assert d.plan is None and d.rejection is None and d.http_refusal is not None, d
    assert named in d.http_refusal, d.http_refusal
    assert status.to_entry() == before and status.handled_id is None  # a corrected round may follow


@pytest.mark.parametrize("status", ["diagnosing", "unhealthy", "dead"])
def test_only_a_healthy_rank_takes_a_scale_up(status: str) -> None:
    s = healthy(2)
    s.status = EngineStatus(status)
    d = decide_apply(s, scale_up(), SURVIVOR, AFTER_1)
    assert d.http_refusal == f"rank 2 is {status}; scale_up is only accepted while the engine is healthy"


def test_dp_size_1_refuses_scale_up() -> None:
    ctx = GroupContext(rank=0, dp_size=1, members=(0,), removed=(), master_ip="127.0.0.1", master_port=1)
    d = decide_apply(healthy(0), scale_up(added=[0]), ctx, initial_placement(2, 0, 1))
    assert d.http_refusal == "scale_up needs data parallelism; this engine runs with dp_size 1"


def test_duplicates_are_ignored_while_running_and_after_the_end() -> None:
    s = healthy(2)
    s.begin_scale_up("up-1")
    assert "duplicate apply for running recovery up-1" in (decide_apply(s, scale_up(), SURVIVOR, AFTER_1).ignored or "")
    assert "already running" in (decide_apply(s, scale_up(rid="up-2"), SURVIVOR, AFTER_1).ignored or "")
    s.finish_recovery("up-1")
    assert "already ended" in (decide_apply(s, scale_up(), SURVIVOR, AFTER_1).ignored or "")


def test_a_joiner_that_faulted_takes_no_retry_or_scale_down() -> None:
    s = joiner_status()
    assert s.mark_fault(VLLM_FAULT_INFO)
    for req in (ApplyRequest(Instruction.RETRY, "t", {}),
                ApplyRequest(Instruction.SCALE_DOWN, "d", {"removed_dp_ranks": [3]})):
        d = decide_apply(s, req, JOINER, FULL)
        assert d.rejection is not None and "rank 1 is in no DP group" in d.rejection, d


# -- statuses ---------------------------------------------------------------------------------------
def test_vllm_round_leaves_healthy_at_once_and_a_failed_vote_is_fatal_only_when_asked() -> None:
    s = healthy(2)
    s.reject("old", "rank 2 is healthy; scale_down is only accepted while the engine is unhealthy")
    s.begin_scale_up("up-1")
    assert s.to_entry() == {"id": 2, "status": "unhealthy"} and not s.serving  # replaced whole
    s.finish_recovery("up-1")
    assert s.to_entry() == {"id": 2, "status": "healthy"} and s.serving
    s.begin_scale_up("up-2")
    s.fail_recovery("up-2", "scale_up failed: dp ranks [1] did not join", fatal=False)
    assert s.to_entry() == {"id": 2, "status": "unhealthy", "last_ft_request_id": "up-2",
                            "ft_error": "scale_up failed: dp ranks [1] did not join"}
    v = healthy(3)
    v.begin_scale_up("up-3")
    v.fail_recovery("up-3", "scale_up failed: recovery vote failed", fatal=True)
    assert v.to_entry()["status"] == "dead" and v.to_entry()["fault_info"] == RECOVERY_FAILED_INFO


def test_rfc_round_reads_recovering_then_healthy_or_failed() -> None:
    s = healthy(2, FtDialect.RFC)
    s.begin_scale_up("up-1")
    assert s.to_entry() == {"id": 2, "status": "unhealthy", "ft_state": "recovering", "last_ft_request_id": "up-1"}
    s.finish_recovery("up-1")
    assert s.to_entry() == {"id": 2, "status": "healthy", "last_ft_request_id": "up-1"}
    s.begin_scale_up("up-2")
    s.fail_recovery("up-2", "injected failure: boom")
    assert (s.status, s.ft_state, s.ft_error) == (EngineStatus.UNHEALTHY, FtState.FAILED, "injected failure: boom")


def test_a_joiner_reads_healthy_but_serves_only_once_its_round_commits() -> None:
    s = joiner_status()
    assert s.to_entry() == {"id": 1, "status": "healthy"} and not s.serving
    s.begin_scale_up("up-1")
    s.finish_recovery("up-1")
    assert s.serving and not s.standby


# -- the body, the flag, SGLang's manager -------------------------------------------------------------
def test_scale_up_is_a_known_instruction() -> None:
    raw = json.dumps({"instruction": "scale_up", "request_id": "up-1",
                      "params": {"added_dp_ranks": [1], "removed_dp_ranks": [], "dp_master_ip": "127.0.0.1",
                                 "dp_store_port": 9, "other": 1}})
    req = parse_apply_body(raw)
    assert req.instruction is Instruction.SCALE_UP and req.unknown_params() == ["other"]


def test_join_flag() -> None:
    cfg = parse_config(["--dp-size", "4", "--dp-rank", "1", "--enable-fault-tolerance", "--join",
                        "--dp-master-port", "0"])
    assert cfg.join and cfg.dp_size == 4
    assert not parse_config([]).join


@pytest.mark.parametrize("args, named", [
    (["--dp-size", "1", "--enable-fault-tolerance", "--join"],
     "--join needs --dp-size >= 2 (the original DP size), got 1"),
    (["--dp-size", "2", "--join"], "--join needs --enable-fault-tolerance"),
    (["--dp-size", "2", "--enable-fault-tolerance", "--join", "--ft-dialect", "sglang",
      "--ft-manager-address", "127.0.0.1:1"], "--join is refused with --ft-dialect sglang"),
])
def test_bad_join_flags_exit_2_with_one_line(args: list[str], named: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        parse_config(args)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and named in err, err


def test_sglang_instance_manager_refuses_scale_up() -> None:
    raw = json.dumps({"instruction": "scale_up", "request_id": "up-1",
                      "params": {"added_dp_ranks": [1], "removed_dp_ranks": []}}).encode()
    with pytest.raises(ApplyRefused, match="Invalid instruction: 'scale_up'."):
        parse_apply(raw, 4)
