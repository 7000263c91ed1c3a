"""How a scale-down round judges one survivor's FT status (DESIGN §5): before apply (apply-ready?)
and after apply (recovered?), the poll cadence, and the human rendering of a status. Pure.

(status, ft_state) pairs; ft_state is absent in vLLM's dialect and present in the RFC-era one.
`diagnosing` (vLLM's transient state while it queries its all2all mask) is never a failure: the
survivor is not ready yet, so the round waits, within its deadline, for what the engine decides.
"""

from __future__ import annotations

from enum import StrEnum

from gen.motor.v1 import common_pb2

_HEALTH = common_pb2.EngineHealth
_FT = common_pb2.FtState

FIRST_POLL_DELAY_SEC = 0.05


class Verdict(StrEnum):
    DONE = "done"
    WAIT = "wait"
    # Before apply only: the survivor died and is absorbed into the round's removed set.
    DEAD = "dead"
    FAIL = "fail"


def poll_delay_sec(polls_done: int, poll_interval_sec: float) -> float:
    """Doubling from 50 ms up to poll_interval_sec: engines often settle in a fraction of a second
    (a rebuild takes ~0.1 s on the reference engine), and the interval stays an upper bound."""
    return min(poll_interval_sec, FIRST_POLL_DELAY_SEC * (2**min(polls_done, 16)))


# The (status, ft_state) pairs a survivor is waited out in: the verdicts below say WAIT on exactly
# these, and the round's status long poll (StatusRequest.wait_while) waits them out at the NodeManager.
APPLY_WAIT_STATES: frozenset[tuple[int, int]] = frozenset({
    (_HEALTH.ENGINE_HEALTH_DIAGNOSING, _FT.FT_STATE_UNSPECIFIED),
    (_HEALTH.ENGINE_HEALTH_HEALTHY, _FT.FT_STATE_UNSPECIFIED),
    (_HEALTH.ENGINE_HEALTH_UNHEALTHY, _FT.FT_STATE_RECOVERING),
})
RECOVERY_WAIT_STATES: frozenset[tuple[int, int]] = frozenset({
    (_HEALTH.ENGINE_HEALTH_DIAGNOSING, _FT.FT_STATE_UNSPECIFIED),
    (_HEALTH.ENGINE_HEALTH_UNHEALTHY, _FT.FT_STATE_UNSPECIFIED),
    (_HEALTH.ENGINE_HEALTH_UNHEALTHY, _FT.FT_STATE_RECOVERING),
})

# What the snapshot pull's probe waits out at the NodeManager: only UNHEALTHY or DEAD is a verdict.
NO_VERDICT_STATES: frozenset[tuple[int, int]] = frozenset(
    (health, ft_state) for health in (_HEALTH.ENGINE_HEALTH_HEALTHY, _HEALTH.ENGINE_HEALTH_DIAGNOSING)
    for ft_state in _FT.values())


def apply_readiness(s: common_pb2.EngineFtStatus) -> Verdict:
    """Before apply: DONE (apply-ready) only on (unhealthy, -); WAIT on (healthy, -), diagnosing and
    (unhealthy, recovering); DEAD is absorbed by the caller; anything else fails the round."""
    if s.status == _HEALTH.ENGINE_HEALTH_DEAD:
        return Verdict.DEAD
    if s.status == _HEALTH.ENGINE_HEALTH_UNHEALTHY and s.ft_state == _FT.FT_STATE_UNSPECIFIED:
        return Verdict.DONE
    if (s.status, s.ft_state) in APPLY_WAIT_STATES:
        return Verdict.WAIT
    return Verdict.FAIL


def recovery_state(s: common_pb2.EngineFtStatus) -> Verdict:
    """After apply: DONE only on (healthy, -); WAIT on (unhealthy, -), diagnosing and (unhealthy,
    recovering); everything else ((unhealthy, failed), dead — e.g. a failed vote, "Recovery failed;
    full restart required" —, (healthy, recovering), unknown) fails the round."""
    if s.status == _HEALTH.ENGINE_HEALTH_HEALTHY and s.ft_state == _FT.FT_STATE_UNSPECIFIED:
        return Verdict.DONE
    if (s.status, s.ft_state) in RECOVERY_WAIT_STATES:
        return Verdict.WAIT
    return Verdict.FAIL


def status_text(s: common_pb2.EngineFtStatus) -> str:
    health = _HEALTH.Name(s.status).removeprefix("ENGINE_HEALTH_").lower()
    ft = "-" if s.ft_state == _FT.FT_STATE_UNSPECIFIED else (s.raw_ft_state or _FT.Name(s.ft_state).removeprefix("FT_STATE_").lower())
    text = f"({health}, {ft})"
    if s.ft_error:
        text += f" ft_error={s.ft_error!r}"
    if s.fault_info:
        text += f" fault_info={s.fault_info!r}"
    return text
