"""The FaultManager's priority decision over one instance's FT snapshot (RFC §4.3). Pure.

Bounded and non-looping: each call looks at the snapshot once and names one action.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum

from motor.controller.fault_tolerance.evidence import Health


class Action(StrEnum):
    NONE = "none"
    WAIT = "wait"
    FAST_RECOVERY = "fast_recovery"
    SCALE_DOWN = "scale_down"
    RECONFIGURE = "reconfigure"


class FallbackCause(StrEnum):
    """Why the whole instance is reconfigured (motor.v1.FallbackCause without its prefix): a bounded
    label for timelines and metrics, beside the human reason."""

    PROTOCOL_ERROR = "PROTOCOL_ERROR"
    SCALE_DOWN_DISABLED = "SCALE_DOWN_DISABLED"
    ALL_RANKS_DEAD = "ALL_RANKS_DEAD"
    ALL_UNHEALTHY_TIMEOUT = "ALL_UNHEALTHY_TIMEOUT"
    INCOMPLETE_SNAPSHOT = "INCOMPLETE_SNAPSHOT"
    HARDWARE_NOT_CORRELATED = "HARDWARE_NOT_CORRELATED"
    HARDWARE_UNMAPPABLE = "HARDWARE_UNMAPPABLE"
    PARTIAL_LOSS = "PARTIAL_LOSS"
    STRATEGY_FAILED = "STRATEGY_FAILED"
    INTERRUPTED_ROUND = "INTERRUPTED_ROUND"
    RETRY = "RETRY"


class WaitKind(StrEnum):
    DEAD_RANK = "dead_rank"
    EVIDENCE = "evidence"


@dataclass(frozen=True)
class Decision:
    action: Action
    reason: str
    dead: frozenset[int] = frozenset()
    unhealthy: frozenset[int] = frozenset()
    # When WAIT: the time at which the collection window closes.
    wait_until_sec: float | None = None
    # When RECONFIGURE: why.
    cause: FallbackCause | None = None
    # When WAIT: what is awaited, a DEAD rank (every active rank is UNHEALTHY) or more evidence.
    wait_kind: WaitKind | None = None


def decide(
    *,
    active_ranks: frozenset[int],
    health: Mapping[int, Health],
    window_started_at_sec: float | None,
    now_sec: float,
    collection_timeout_sec: float,
    scale_down_enabled: bool,
    fast_recovery_applicable: Callable[[frozenset[int]], bool],
) -> Decision:
    """One action for the instance.

    `health` holds the latest evidence per rank (ranks without evidence are absent); only active
    ranks (original − dead_committed) count. The collection window opens at the first UNHEALTHY/DEAD
    report of a round; later reports do not extend it.
    """
    seen = {rank: h for rank, h in health.items() if rank in active_ranks}
    protocol = frozenset(r for r, h in seen.items() if h is Health.PROTOCOL_ERROR)
    dead = frozenset(r for r, h in seen.items() if h is Health.DEAD)
    unhealthy = frozenset(r for r, h in seen.items() if h is Health.UNHEALTHY)
    if protocol:
        # RFC §4.1: an identity-contract violation is a protocol failure → original fallback.
        return Decision(Action.RECONFIGURE, f"engine protocol failure on ranks {sorted(protocol)}", dead, unhealthy,
                        cause=FallbackCause.PROTOCOL_ERROR)
    if not dead and not unhealthy:
        return Decision(Action.NONE, "no fault evidence")
    window_closed = window_started_at_sec is not None and now_sec - window_started_at_sec >= collection_timeout_sec
    window_end = None if window_started_at_sec is None else window_started_at_sec + collection_timeout_sec

    if not scale_down_enabled:
        # Baseline: a dead rank means whole-instance reconfiguration at once; peers-only symptoms wait
        # for a dead rank or the collection timeout, exactly as below.
        if dead:
            return Decision(Action.RECONFIGURE, f"ranks {sorted(dead)} dead (scale-down disabled)", dead, unhealthy,
                            cause=FallbackCause.SCALE_DOWN_DISABLED)
    if dead == active_ranks:
        return Decision(Action.RECONFIGURE, f"every active rank is dead {sorted(dead)}", dead, unhealthy,
                        cause=FallbackCause.ALL_RANKS_DEAD)
    if not dead and unhealthy == active_ranks:
        if fast_recovery_applicable(unhealthy):
            return Decision(Action.FAST_RECOVERY, "all active ranks unhealthy, fast recovery applicable", dead, unhealthy)
        if window_closed:
            return Decision(
                Action.RECONFIGURE,
                f"all active ranks unhealthy, no dead rank within {collection_timeout_sec:g}s",
                dead,
                unhealthy,
                cause=FallbackCause.ALL_UNHEALTHY_TIMEOUT,
            )
        return Decision(Action.WAIT, "all unhealthy, fast recovery not applicable: waiting for a dead rank",
                        dead, unhealthy, window_end, wait_kind=WaitKind.DEAD_RANK)
    if dead and unhealthy and (dead | unhealthy) == active_ranks and scale_down_enabled:
        return Decision(Action.SCALE_DOWN, f"complete snapshot: dead {sorted(dead)} unhealthy {sorted(unhealthy)}",
                        dead, unhealthy)
    if window_closed:
        missing = sorted(active_ranks - dead - unhealthy)
        return Decision(
            Action.RECONFIGURE,
            f"incomplete snapshot after {collection_timeout_sec:g}s: no evidence from ranks {missing}",
            dead,
            unhealthy,
            cause=FallbackCause.INCOMPLETE_SNAPSHOT,
        )
    return Decision(Action.WAIT, "incomplete snapshot: waiting for more evidence", dead, unhealthy, window_end,
                    wait_kind=WaitKind.EVIDENCE)


def reconfiguration_retry_delay_sec(attempts: int, *, max_attempts: int, first_delay_sec: float,
                                    max_delay_sec: float) -> float | None:
    """How long a reconfiguration that failed `attempts` times (≥ 1) waits before its next try:
    doubling from `first_delay_sec`, capped at `max_delay_sec`; None once `max_attempts` failed
    (it gives up until a pod registers again, never retrying forever)."""
    if attempts >= max_attempts:
        return None
    return min(max_delay_sec, first_delay_sec * 2 ** (attempts - 1))
