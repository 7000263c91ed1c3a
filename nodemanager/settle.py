"""The long poll of the Status RPC: which (status, ft_state) pairs a caller may wait out, and how
often the NodeManager reads a still-waiting engine again. Pure."""

from __future__ import annotations

import math
from collections.abc import Iterable

from gen.motor.v1 import common_pb2
from nodemanager.engine_answers import EngineStatusEntry
from nodemanager.errors import InvalidArgument

# Re-reads of a still-waiting engine are short for the first SETTLE_FAST_REREADS (a rebuild takes
# ~50–170 ms on the reference engine: seen within 25 ms of it), then double up to
# SETTLE_MAX_REREAD_SEC, so a long wait (a survivor that only notices the fault at its collective
# timeout) costs no more reads than the Controller's own backoff did; only engines still waiting are
# read again.
SETTLE_FIRST_REREAD_SEC = 0.025
SETTLE_FAST_REREADS = 4
SETTLE_MAX_REREAD_SEC = 0.2
# The shortest cap a caller may set on the gap (StatusRequest.reread_max_sec): below it a long poll
# would read an engine faster than its answer changes.
SETTLE_MIN_REREAD_CAP_SEC = 0.01
MAX_SETTLE_SEC = 60.0
# The rest of the call's deadline is kept for the last read of every engine.
SETTLE_SHARE_OF_DEADLINE = 0.8

EngineStatePair = tuple[int, int]  # (common_pb2.EngineHealth, common_pb2.FtState)


def check_settle(wait_while: Iterable[EngineStatePair], settle_sec: float) -> frozenset[EngineStatePair]:
    """The pairs to wait out (empty: answer after one read); InvalidArgument naming a bad value."""
    if not math.isfinite(settle_sec) or not 0.0 <= settle_sec <= MAX_SETTLE_SEC:
        raise InvalidArgument(f"settle_sec {settle_sec!r} is outside [0, {MAX_SETTLE_SEC:g}]")
    pairs = frozenset(wait_while)
    for status, ft_state in sorted(pairs):
        if status not in common_pb2.EngineHealth.values() or status == common_pb2.ENGINE_HEALTH_UNSPECIFIED:
            raise InvalidArgument(f"wait_while status {status} is not an engine health")
        if ft_state not in common_pb2.FtState.values():
            raise InvalidArgument(f"wait_while ft_state {ft_state} is not an FT state")
    return pairs if settle_sec > 0 else frozenset()


def check_reread_cap(reread_max_sec: float) -> float:
    """The longest gap between two re-reads a caller asked for (0: the NodeManager's own);
    InvalidArgument naming a bad value."""
    if reread_max_sec == 0.0:
        return SETTLE_MAX_REREAD_SEC
    if not math.isfinite(reread_max_sec) or not SETTLE_MIN_REREAD_CAP_SEC <= reread_max_sec <= SETTLE_MAX_REREAD_SEC:
        raise InvalidArgument(f"reread_max_sec {reread_max_sec!r} is outside [{SETTLE_MIN_REREAD_CAP_SEC:g}, "
                              f"{SETTLE_MAX_REREAD_SEC:g}] (0: the NodeManager's own)")
    return reread_max_sec


def engine_state(entry: EngineStatusEntry) -> EngineStatePair:
    msg = entry.to_pb()
    return msg.status, msg.ft_state


def reread_delay_sec(rereads_done: int, cap_sec: float = SETTLE_MAX_REREAD_SEC) -> float:
    doublings = max(0, rereads_done - SETTLE_FAST_REREADS + 1)
    return min(cap_sec, SETTLE_FIRST_REREAD_SEC * 2 ** min(doublings, 16))
