"""Every (status, ft_state) pair a survivor can report, judged before and after apply (DESIGN §5),
in both engine dialects: vLLM's (no ft_state, a transient `diagnosing`) and the RFC-era one."""

from __future__ import annotations

import itertools

import pytest

from gen.motor.v1 import common_pb2
from motor.controller.fault_tolerance.engine_states import Verdict, apply_readiness, recovery_state, status_text

H = common_pb2.EngineHealth
F = common_pb2.FtState
DONE, WAIT, DEAD, FAIL = Verdict.DONE, Verdict.WAIT, Verdict.DEAD, Verdict.FAIL

BEFORE = {
    (H.ENGINE_HEALTH_UNHEALTHY, F.FT_STATE_UNSPECIFIED): DONE,
    (H.ENGINE_HEALTH_HEALTHY, F.FT_STATE_UNSPECIFIED): WAIT,
    (H.ENGINE_HEALTH_UNHEALTHY, F.FT_STATE_RECOVERING): WAIT,
    (H.ENGINE_HEALTH_DIAGNOSING, F.FT_STATE_UNSPECIFIED): WAIT,
}
AFTER = {
    (H.ENGINE_HEALTH_HEALTHY, F.FT_STATE_UNSPECIFIED): DONE,
    (H.ENGINE_HEALTH_UNHEALTHY, F.FT_STATE_UNSPECIFIED): WAIT,
    (H.ENGINE_HEALTH_UNHEALTHY, F.FT_STATE_RECOVERING): WAIT,
    (H.ENGINE_HEALTH_DIAGNOSING, F.FT_STATE_UNSPECIFIED): WAIT,
}
PAIRS = list(itertools.product(H.values(), F.values()))


@pytest.mark.parametrize(("status", "ft_state"), PAIRS)
def test_before_apply(status: int, ft_state: int) -> None:
    want = DEAD if status == H.ENGINE_HEALTH_DEAD else BEFORE.get((status, ft_state), FAIL)
    assert apply_readiness(common_pb2.EngineFtStatus(status=status, ft_state=ft_state)) is want


@pytest.mark.parametrize(("status", "ft_state"), PAIRS)
def test_after_apply(status: int, ft_state: int) -> None:
    assert recovery_state(common_pb2.EngineFtStatus(status=status, ft_state=ft_state)) is AFTER.get((status, ft_state), FAIL)


def test_status_text_quotes_the_engine_error_and_fault_info() -> None:
    text = status_text(common_pb2.EngineFtStatus(status=H.ENGINE_HEALTH_DEAD, fault_info="Recovery failed; full restart required"))
    assert text == "(dead, -) fault_info='Recovery failed; full restart required'"
