"""The long poll's re-read cadence and its bounds (nodemanager.settle, pure)."""

from __future__ import annotations

import math

import pytest

from nodemanager.errors import InvalidArgument
from nodemanager.settle import (
    SETTLE_FAST_REREADS,
    SETTLE_FIRST_REREAD_SEC,
    SETTLE_MAX_REREAD_SEC,
    check_reread_cap,
    reread_delay_sec,
)


def test_reads_are_quick_at_first_then_double_up_to_the_cap() -> None:
    delays = [reread_delay_sec(n) for n in range(12)]
    assert delays[:SETTLE_FAST_REREADS - 1] == [SETTLE_FIRST_REREAD_SEC] * (SETTLE_FAST_REREADS - 1)
    assert delays == sorted(delays) and delays[-1] == SETTLE_MAX_REREAD_SEC
    assert max(reread_delay_sec(n, 0.05) for n in range(12)) == 0.05
    assert all(reread_delay_sec(n, 0.01) == 0.01 for n in range(12)), "a cap under the first gap holds from the start"


@pytest.mark.parametrize("cap", [0.01, 0.05, 0.2])
def test_a_cap_in_range_is_kept(cap: float) -> None:
    assert check_reread_cap(cap) == cap


def test_zero_is_the_nodemanagers_own_cadence() -> None:
    assert check_reread_cap(0.0) == SETTLE_MAX_REREAD_SEC


@pytest.mark.parametrize("cap", [-0.05, 0.009, 0.21, 10.0, math.nan, math.inf])
def test_a_cap_out_of_range_is_refused_by_value(cap: float) -> None:
    with pytest.raises(InvalidArgument, match=f"reread_max_sec {cap!r} is outside"):
        check_reread_cap(cap)
