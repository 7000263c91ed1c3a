"""The fast-recovery policy (fast_recovery_policy.judge), its attempt book and its config: every check
of is_applicable over the fault data, in order, and every refused config value named."""

from __future__ import annotations

import dataclasses

import pytest
from pydantic import ValidationError

from motor.common.config.fast_recovery import FastRecoveryConfig
from motor.common.config.fault_tolerance import FaultToleranceConfig
from motor.controller.fault_tolerance.correlation import PendingHardware
from motor.controller.fault_tolerance.evidence import EvidenceKind, Health, RankEvidence
from motor.controller.fault_tolerance.fast_recovery_policy import (
    AttemptBook,
    FaultFacts,
    HardwareFact,
    collect_facts,
    judge,
)
from motor.controller.model.capability import Capability

CAP = Capability(engine_ft_enabled=True, scale_down_supported=True, external_lb=True, auto_recovery=False,
                 enable_eplb=True, num_redundant_experts=8, retry_supported=True)
RANKS = frozenset({0, 1, 2, 3})


def ev(rank: int, detail: str = "status=unhealthy fault_info='RuntimeError'",
       kind: EvidenceKind = EvidenceKind.UNHEALTHY) -> RankEvidence:
    health = Health.DEAD if kind in (EvidenceKind.DEAD, EvidenceKind.ENGINE_DEAD) else Health.UNHEALTHY
    return RankEvidence(rank, health, kind, detail, 1.0)


def facts(**changes) -> FaultFacts:
    base = FaultFacts(instance_id=7, active_ranks=RANKS, unhealthy=RANKS, evidence={r: ev(r) for r in RANKS},
                      capability=CAP, now_sec=100.0)
    return dataclasses.replace(base, **changes)


def verdict(f: FaultFacts, attempts: int = 0, enabled: bool = True, **config):
    return judge(f, enabled=enabled, config=FastRecoveryConfig(**config), attempts_in_window=attempts)


def test_a_transient_fault_on_retry_capable_engines_is_applicable() -> None:
    v = verdict(facts())
    assert v.applicable and "attempt 1 of 2" in v.reason and "RuntimeError" in v.reason


@pytest.mark.parametrize(
    ("f", "kwargs", "named"),
    [
        (facts(), {"enabled": False}, "enable_fast_recovery=false"),
        (facts(unhealthy=frozenset({0, 1})), {}, "are not every active rank"),
        (facts(unhealthy=frozenset()), {}, "are not every active rank"),
        (facts(capability=None, capability_note="pods reported different FT capabilities"), {},
         "pods reported different FT capabilities"),
        (facts(capability=dataclasses.replace(CAP, engine_ft_enabled=False)), {}, "engine_ft_enabled=false"),
        (facts(capability=dataclasses.replace(CAP, retry_supported=False)), {}, "retry_supported=false"),
        (facts(capability=dataclasses.replace(CAP, auto_recovery=True)), {}, "auto_recovery=true"),
        (facts(missing_heartbeat=frozenset({2})), {}, "ranks [2] are missing from their pods' heartbeats"),
        (facts(evidence={r: ev(r) for r in (0, 1, 2)}), {}, "rank 3 has no evidence"),
        (facts(evidence={**{r: ev(r) for r in (0, 1, 2)}, 3: ev(3, kind=EvidenceKind.PROTOCOL_ERROR)}), {},
         "rank 3 has evidence PROTOCOL_ERROR"),
        (facts(evidence={**{r: ev(r) for r in (1, 2, 3)}, 0: ev(0, "fault_info='HBM ECC'")}),
         {"refused_fault_infos": ["ECC"]}, "rank 0 fault_info \"fault_info='HBM ECC'\" matches refused_fault_infos"),
        (facts(evidence={**{r: ev(r) for r in (1, 2, 3)}, 0: ev(0, "fault_info='HBM ECC'")}),
         {"allowed_fault_infos": ["RuntimeError", "Timeout"]}, "matches no allowed_fault_infos"),
        (facts(hardware=(HardwareFact(frozenset({1}), 5, ("80E18402",), "node=n npu=Ascend910-1"),)), {},
         "codes ['80E18402'] not in allowed_hardware_fault_codes"),
        (facts(hardware=(HardwareFact(frozenset({1}), 5, ("80E18402", "A8028801"), "d"),)),
         {"allowed_hardware_fault_codes": ["80e18402"]}, "codes ['A8028801']"),
        (facts(hardware=(HardwareFact(frozenset({1}), 5, (), "node=n"),)),
         {"allowed_hardware_fault_codes": ["80E18402"]}, "['<none>']"),
        (facts(), {"attempts": 2}, "2 fast recoveries within 600s (max_attempts=2)"),
    ],
)
def test_each_check_refuses_with_its_reason(f: FaultFacts, kwargs: dict, named: str) -> None:
    enabled = kwargs.pop("enabled", True)
    attempts = kwargs.pop("attempts", 0)
    v = verdict(f, attempts, enabled, **kwargs)
    assert not v.applicable and named in v.reason, v.reason


def test_allowed_patterns_and_codes_let_a_matching_fault_through() -> None:
    f = facts(evidence={r: ev(r, f"pulled by the Controller: Timeout in allreduce {r}") for r in RANKS},
              hardware=(HardwareFact(frozenset({1}), 4, ("0x80e18402",), "link flap"),))
    assert verdict(f, allowed_fault_infos=["^pulled.*Timeout"], allowed_hardware_fault_codes=["80E18402"]).applicable


def test_refused_patterns_are_checked_before_allowed_ones() -> None:
    v = verdict(facts(), allowed_fault_infos=["RuntimeError"], refused_fault_infos=["Runtime"])
    assert not v.applicable and "refused_fault_infos" in v.reason


def test_the_attempt_book_slides_its_window() -> None:
    book = AttemptBook()
    assert book.count(7, 0.0, 10.0) == 0
    book.record(7, 0.0, max_kept=2)
    book.record(7, 5.0, max_kept=2)
    book.record(8, 5.0, max_kept=2)
    assert book.count(7, 9.9, 10.0) == 2
    assert book.count(7, 10.0, 10.0) == 1  # the first left the window
    assert book.count(7, 15.0, 10.0) == 0
    for t in range(5):
        book.record(9, float(t), max_kept=2)
    assert book.count(9, 4.0, 100.0) == 2  # bounded by what can matter


def test_collect_facts_leaves_out_a_stale_correlation_entry() -> None:
    current = PendingHardware("k1", frozenset({1}), 50.0, "now", matched=True, window_started_sec=40.0, level=5,
                              codes=("A",))
    stale = PendingHardware("k2", frozenset({2}), 10.0, "before", matched=True, window_started_sec=5.0)
    waiting = PendingHardware("k3", frozenset({3}), 60.0, "waiting", level=4, codes=("B",))
    f = collect_facts(instance_id=7, active_ranks=RANKS, unhealthy=RANKS, evidence={0: ev(0)},
                      pending_hardware=[current, stale, waiting], window_started_sec=40.0,
                      missing_since_sec={3: 1.0}, capability=(CAP, ""), now_sec=41.0)
    assert [h.description for h in f.hardware] == ["now", "waiting"]
    assert f.hardware[0] == HardwareFact(frozenset({1}), 5, ("A",), "now")
    assert f.missing_heartbeat == {3} and f.capability == CAP and f.now_sec == 41.0


def test_fast_recovery_is_off_by_default_and_turns_the_proxy_on() -> None:
    ft = FaultToleranceConfig()
    assert not ft.enable_fast_recovery and not ft.fast_recovery_enabled and not ft.enable_dp_scale_down_proxy
    on = FaultToleranceConfig(enable_fast_recovery=True)
    assert on.fast_recovery_enabled and on.enable_dp_scale_down_proxy
    assert not FaultToleranceConfig(enable_fast_recovery=True, enable_fault_tolerance=False).enable_dp_scale_down_proxy
    assert FastRecoveryConfig().guard_lease_sec(5.0) == 2 * 30.0 + 4 * 5.0 + 5.0


@pytest.mark.parametrize(
    ("values", "named"),
    [
        ({"allowed_fault_infos": ["("]}, "allowed_fault_infos pattern '(' is not a regular expression"),
        ({"refused_fault_infos": ["  "]}, "refused_fault_infos holds a blank pattern"),
        ({"allowed_fault_infos": ["x"] * 65}, "at most 64"),
        ({"allowed_hardware_fault_codes": ["80E1 8402"]}, "'80E1 8402' is not a fault code"),
        ({"max_attempts": 0}, "max_attempts"),
        ({"attempt_window_sec": 0}, "attempt_window_sec"),
        ({"execution_deadline_sec": 2000}, "execution_deadline_sec"),
        ({"poll_interval_sec": 11}, "poll_interval_sec"),
        ({"retries": 1}, "retries"),
    ],
)
def test_bad_values_are_refused_naming_the_key(values: dict, named: str) -> None:
    with pytest.raises(ValidationError, match=named.replace("(", r"\(").replace("[", r"\[")):
        FastRecoveryConfig(**values)


def test_codes_are_kept_without_case_or_prefix() -> None:
    assert FastRecoveryConfig(allowed_hardware_fault_codes=["0xa8028801", "LinkDown"]).allowed_hardware_fault_codes \
        == ["A8028801", "LINKDOWN"]
