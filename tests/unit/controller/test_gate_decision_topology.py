"""FtGate reasons, the FaultManager's priority decision, and round grouping (all pure)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from motor.controller.fault_tolerance.decision import Action, decide, reconfiguration_retry_delay_sec
from motor.controller.fault_tolerance.evidence import Health
from motor.controller.fault_tolerance.gate import REASON_ORDER, evaluate_gate
from motor.controller.fault_tolerance.topology import TopologyError, plan_round, recyclable_pods
from motor.controller.model.capability import Capability
from motor.controller.model.placement import EndpointInfo, PodInfo

GOOD = Capability(True, True, True, False, True, 8)


def test_gate_allows_a_capable_instance() -> None:
    gate = evaluate_gate(enable_fault_tolerance=True, enable_dp_scale_down=True, capability=GOOD)
    assert gate.allowed and gate.reason_codes == ()


@pytest.mark.parametrize(
    ("kwargs", "cap", "reason"),
    [
        ({"enable_fault_tolerance": True, "enable_dp_scale_down": False}, GOOD, "FEATURE_DISABLED"),
        ({"enable_fault_tolerance": False, "enable_dp_scale_down": True}, GOOD, "FEATURE_DISABLED"),
        ({}, Capability(False, True, True, False, True, 8), "ENGINE_FT_REQUIRED"),
        ({}, Capability(True, True, False, False, True, 8), "EXTERNAL_LB_REQUIRED"),
        ({}, Capability(True, True, True, True, True, 8), "AUTO_RECOVERY_CONFLICT"),
        ({}, Capability(True, False, True, False, True, 8), "ENGINE_SCALE_DOWN_UNSUPPORTED"),
        ({}, Capability(True, True, True, False, False, 8), "EPLB_REQUIRED"),
        ({}, Capability(True, True, True, False, True, 0), "EXPERT_REDUNDANCY_REQUIRED"),
    ],
)
def test_each_gate_reason(kwargs: dict, cap: Capability, reason: str) -> None:
    args = {"enable_fault_tolerance": True, "enable_dp_scale_down": True, **kwargs}
    gate = evaluate_gate(capability=cap, **args)
    assert not gate.allowed and gate.reason_codes == (reason,)


def test_gate_records_every_failure_in_order_and_fails_closed_without_capability() -> None:
    gate = evaluate_gate(enable_fault_tolerance=False, enable_dp_scale_down=False, capability=None)
    assert gate.reason_codes == ("FEATURE_DISABLED", "ENGINE_FT_REQUIRED", "EXTERNAL_LB_REQUIRED",
                                 "ENGINE_SCALE_DOWN_UNSUPPORTED", "EPLB_REQUIRED", "EXPERT_REDUNDANCY_REQUIRED")
    assert list(gate.reason_codes) == [r for r in REASON_ORDER if r in gate.reason_codes]
    assert "MC2" not in " ".join(REASON_ORDER)


ACTIVE = frozenset({0, 1, 2, 3})
H, U, D, X = Health.HEALTHY, Health.UNHEALTHY, Health.DEAD, Health.PROTOCOL_ERROR


def _decide(health, *, started=0.0, now=1.0, timeout=60.0, enabled=True, fast=False, active=ACTIVE):
    return decide(
        active_ranks=active, health=health, window_started_at_sec=started, now_sec=now,
        collection_timeout_sec=timeout, scale_down_enabled=enabled, fast_recovery_applicable=lambda u: fast,
    )


def test_no_evidence_no_action() -> None:
    assert _decide({}, started=None).action is Action.NONE


def test_complete_unhealthy_plus_dead_scales_down() -> None:
    d = _decide({0: U, 1: D, 2: U, 3: U})
    assert d.action is Action.SCALE_DOWN and d.dead == {1} and d.unhealthy == {0, 2, 3}


def test_multiple_dead_scale_down_in_one_round() -> None:
    d = _decide({0: U, 1: D, 2: D, 3: U})
    assert d.action is Action.SCALE_DOWN and d.dead == {1, 2}


def test_all_unhealthy_fast_recovery_applicable() -> None:
    assert _decide({r: U for r in ACTIVE}, fast=True).action is Action.FAST_RECOVERY


def test_all_unhealthy_not_applicable_waits_then_reconfigures() -> None:
    waiting = _decide({r: U for r in ACTIVE}, now=59.0)
    assert waiting.action is Action.WAIT and waiting.wait_until_sec == 60.0
    assert _decide({r: U for r in ACTIVE}, now=60.0).action is Action.RECONFIGURE


def test_all_dead_reconfigures() -> None:
    assert _decide({r: D for r in ACTIVE}).action is Action.RECONFIGURE


def test_incomplete_waits_within_window_then_reconfigures() -> None:
    # The idle row: a dead rank, survivors still healthy (no evidence) → wait, then reconfigure.
    assert _decide({1: D}, now=10.0).action is Action.WAIT
    late = _decide({1: D}, now=61.0)
    assert late.action is Action.RECONFIGURE and "[0, 2, 3]" in late.reason


def test_healthy_reports_count_as_missing_evidence() -> None:
    assert _decide({0: H, 1: D, 2: U, 3: U}).action is Action.WAIT


def test_protocol_error_goes_to_fallback() -> None:
    assert _decide({0: X, 1: D, 2: U, 3: U}).action is Action.RECONFIGURE


def test_feature_off_dead_reconfigures_at_once() -> None:
    assert _decide({1: D}, enabled=False).action is Action.RECONFIGURE
    assert _decide({0: U, 1: D, 2: U, 3: U}, enabled=False).action is Action.RECONFIGURE


def test_only_active_ranks_count() -> None:
    # Rank 1 was committed earlier: evidence about it is ignored and {0,2,3} is the active set.
    d = _decide({1: D, 0: U, 2: D, 3: U}, active=frozenset({0, 2, 3}))
    assert d.action is Action.SCALE_DOWN and d.dead == {2}


@given(st.dictionaries(st.sampled_from(sorted(ACTIVE)), st.sampled_from([H, U, D, X])), st.floats(0, 200))
def test_decision_is_total_and_scale_down_only_on_complete_u_plus_d(health, now) -> None:
    d = _decide(health, now=now)
    if d.action is Action.SCALE_DOWN:
        assert d.dead and d.unhealthy and (d.dead | d.unhealthy) == ACTIVE
    if d.action is Action.WAIT:
        assert now < 60.0


EPS = {r: EndpointInfo(r, "127.0.0.2" if r < 2 else "127.0.0.3", headless=False) for r in range(4)}
PODS = [PodInfo("127.0.0.2", "127.0.0.2:1", (0, 1)), PodInfo("127.0.0.3", "127.0.0.3:1", (2, 3))]


def test_plan_groups_by_pod_and_picks_lowest_survivor_master() -> None:
    plan = plan_round(original_dp_ranks=range(4), dead_committed=[], removed_this_round=[1], endpoints=EPS, pods=PODS)
    assert plan.removed_cumulative == (1,) and plan.survivors == (0, 2, 3)
    assert (plan.dp_master_rank, plan.dp_master_ip) == (0, "127.0.0.2")
    assert plan.pod("127.0.0.2:1").status_targets == (0,) and plan.pod("127.0.0.2:1").retired == (1,)
    assert plan.pod("127.0.0.3:1").status_targets == (2, 3) and plan.pod("127.0.0.3:1").retired == ()


def test_rank0_round_chooses_new_master_and_keeps_ids() -> None:
    plan = plan_round(original_dp_ranks=range(4), dead_committed=[1], removed_this_round=[0], endpoints=EPS, pods=PODS)
    assert plan.removed_cumulative == (0, 1) and plan.survivors == (2, 3)
    assert (plan.dp_master_rank, plan.dp_master_ip) == (2, "127.0.0.3")
    # Pod 127.0.0.2 only has the dead rank left: guard/finalize only.
    assert plan.pod("127.0.0.2:1").status_targets == () and plan.pod("127.0.0.2:1").retired == (0,)


def test_emptied_pod_is_no_longer_a_participant() -> None:
    plan = plan_round(original_dp_ranks=range(4), dead_committed=[0, 1], removed_this_round=[3], endpoints=EPS, pods=PODS)
    assert [p.pod_ip for p in plan.pods] == ["127.0.0.3"]
    assert [p.pod_ip for p in recyclable_pods(PODS, [0, 1])] == ["127.0.0.2"]


def test_headless_survivor_gets_no_status_or_apply() -> None:
    eps = dict(EPS)
    eps[3] = EndpointInfo(3, "127.0.0.3", headless=True)
    plan = plan_round(original_dp_ranks=range(4), dead_committed=[], removed_this_round=[1], endpoints=eps, pods=PODS)
    assert plan.pod("127.0.0.3:1").status_targets == (2,)
    assert 3 in plan.survivors


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"removed_this_round": [0, 1, 2, 3]}, "no survivor"),
        ({"removed_this_round": []}, "removes no rank"),
        ({"removed_this_round": [9]}, "not original DP ranks"),
        ({"removed_this_round": [1], "dead_committed": [1]}, "already committed"),
        ({"removed_this_round": [1], "endpoints": {r: EPS[r] for r in (0, 1, 2)}}, "no endpoint known for ranks [3]"),
        ({"removed_this_round": [1], "pods": PODS[:1]}, "no pod hosts ranks [2, 3]"),
        ({"removed_this_round": [1], "pods": [PODS[0], PodInfo("127.0.0.3", "", (2, 3))]}, "no NodeManager address"),
        ({"removed_this_round": [1], "pods": [*PODS, PodInfo("127.0.0.4", "x:1", (3,))]}, "claimed by pods"),
        ({"removed_this_round": [1], "pods": [PODS[0], PodInfo("127.0.0.3", "127.0.0.2:1", (2, 3))]},
         "pods 127.0.0.2 and 127.0.0.3 share NodeManager address 127.0.0.2:1"),
    ],
)
def test_topology_fails_closed(kwargs: dict, message: str) -> None:
    args = {"original_dp_ranks": range(4), "dead_committed": [], "endpoints": EPS, "pods": PODS, **kwargs}
    with pytest.raises(TopologyError, match=message.replace("[", r"\[").replace("]", r"\]")):
        plan_round(**args)


def test_reconfiguration_retries_double_up_to_the_cap_and_give_up_after_the_last_attempt() -> None:
    delays = [reconfiguration_retry_delay_sec(n, max_attempts=6, first_delay_sec=0.5, max_delay_sec=3.0)
              for n in range(1, 7)]
    assert delays == [0.5, 1.0, 2.0, 3.0, 3.0, None]
