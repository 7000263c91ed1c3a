"""The transaction guard: lease bounds, renewal to the later deadline, conflicts, expiry, stale
apply/finalize, release — all on a fake clock."""

from __future__ import annotations

import math

import pytest

from nodemanager.errors import AlreadyExists, FailedPrecondition, InvalidArgument
from nodemanager.guard import ForwardedApplies, GuardState, check_lease, check_request_id


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, sec: float) -> None:
        self.now += sec


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def guard(clock: FakeClock) -> GuardState:
    return GuardState(clock)


@pytest.mark.parametrize("lease", [0.0, -1.0, 3600.0001, 1e9, math.inf, -math.inf, math.nan])
def test_lease_out_of_range_is_refused_naming_it(lease: float) -> None:
    with pytest.raises(InvalidArgument, match=r"lease_sec=.* is not in \(0, 3600\]"):
        check_lease(lease)


@pytest.mark.parametrize("lease", [1e-6, 0.5, 85.0, 3600.0])
def test_lease_in_range_is_accepted(lease: float) -> None:
    assert check_lease(lease) == lease


@pytest.mark.parametrize("rid", ["", "   ", "a\nb", "x" * 257])
def test_bad_request_ids_are_refused(rid: str) -> None:
    with pytest.raises(InvalidArgument, match="request_id"):
        check_request_id(rid)


def test_first_guard_is_granted(guard: GuardState) -> None:
    grant = guard.acquire("r1", 85)
    assert (grant.request_id, grant.lease_remaining_sec, grant.renewed) == ("r1", 85, False)
    assert guard.is_live() and guard.live_holder() == "r1" and guard.holder == "r1"
    assert guard.remaining_sec() == 85


def test_same_id_renews_to_the_later_deadline(guard: GuardState, clock: FakeClock) -> None:
    guard.acquire("r1", 10)
    clock.advance(4)
    grant = guard.acquire("r1", 20)
    assert grant.renewed and grant.lease_remaining_sec == pytest.approx(20)
    clock.advance(1)
    # A shorter renewal never shortens the lease.
    grant = guard.acquire("r1", 1)
    assert grant.renewed and grant.lease_remaining_sec == pytest.approx(19)
    assert guard.remaining_sec() == pytest.approx(19)


def test_other_id_while_live_is_refused_naming_both_and_remaining(guard: GuardState, clock: FakeClock) -> None:
    guard.acquire("r1", 10)
    clock.advance(2.5)
    with pytest.raises(FailedPrecondition) as info:
        guard.acquire("r2", 10)
    text = str(info.value)
    assert "'r1'" in text and "'r2'" in text and "7.5s" in text
    assert guard.holder == "r1"


def test_other_id_after_expiry_takes_over(guard: GuardState, clock: FakeClock) -> None:
    guard.acquire("r1", 10)
    clock.advance(10)
    assert not guard.is_live() and guard.live_holder() is None and guard.holder == "r1"
    grant = guard.acquire("r2", 5)
    assert not grant.renewed and grant.replaced_expired == "r1"
    assert guard.live_holder() == "r2"


def test_same_id_after_expiry_is_a_fresh_grant(guard: GuardState, clock: FakeClock) -> None:
    guard.acquire("r1", 1)
    clock.advance(2)
    grant = guard.acquire("r1", 3)
    assert not grant.renewed and grant.replaced_expired is None and guard.remaining_sec() == 3


def test_apply_needs_the_live_lease_of_its_id(guard: GuardState, clock: FakeClock) -> None:
    with pytest.raises(FailedPrecondition, match="stale apply: request_id 'r1' holds no guard"):
        guard.require_live("r1", "apply")
    guard.acquire("r1", 5)
    guard.require_live("r1", "apply")
    with pytest.raises(FailedPrecondition, match="stale apply: request_id 'r2' is not the guard holder 'r1'"):
        guard.require_live("r2", "apply")
    clock.advance(6)
    with pytest.raises(FailedPrecondition, match="lease of request_id 'r1' expired 1.0s ago"):
        guard.require_live("r1", "apply")


def test_finalize_accepts_the_recorded_holder_even_after_expiry(guard: GuardState, clock: FakeClock) -> None:
    guard.acquire("r1", 5)
    clock.advance(6)
    guard.require_holder("r1", "finalize")
    with pytest.raises(FailedPrecondition, match="stale finalize"):
        guard.require_holder("r0", "finalize")


def test_stale_finalize_never_releases_a_newer_guard(guard: GuardState, clock: FakeClock) -> None:
    guard.acquire("old", 1)
    clock.advance(2)
    guard.acquire("new", 10)
    with pytest.raises(FailedPrecondition, match="'old' is not the guard holder 'new'"):
        guard.require_holder("old", "finalize")
    assert guard.release("old") is False
    assert guard.live_holder() == "new"


def test_release_and_clear(guard: GuardState) -> None:
    guard.acquire("r1", 5)
    assert guard.release("r1") is True
    assert guard.holder is None and guard.remaining_sec() == 0.0 and not guard.is_live()
    with pytest.raises(FailedPrecondition, match="none is held"):
        guard.require_holder("r1", "finalize")
    guard.acquire("r2", 5)
    assert guard.clear() == "r2" and guard.holder is None
    assert guard.clear() is None


def test_bad_lease_does_not_touch_the_current_guard(guard: GuardState) -> None:
    guard.acquire("r1", 5)
    with pytest.raises(InvalidArgument):
        guard.acquire("r1", 0)
    with pytest.raises(InvalidArgument):
        guard.acquire("", 5)
    assert guard.live_holder() == "r1" and guard.remaining_sec() == 5


def test_forwarded_applies_refuse_a_second_forward_and_stay_bounded() -> None:
    applies = ForwardedApplies(capacity=2)
    applies.claim("a")
    with pytest.raises(AlreadyExists, match="'a' was already forwarded"):
        applies.claim("a")
    applies.claim("b")
    applies.claim("c")
    assert "a" not in applies and "b" in applies and "c" in applies
    with pytest.raises(ValueError):
        ForwardedApplies(0)


def test_a_newer_leader_term_takes_a_live_guard_over(guard: GuardState, clock: FakeClock) -> None:
    guard.acquire("old-leader", 30, term=5)
    clock.advance(1)
    with pytest.raises(FailedPrecondition, match=r"leader term 5.*'same-term' of term 5 refused"):
        guard.acquire("same-term", 30, term=5)
    with pytest.raises(FailedPrecondition, match="of term 4 refused"):
        guard.acquire("older", 30, term=4)
    grant = guard.acquire("new-leader", 30, term=7)
    assert grant.replaced_live == "old-leader" and grant.replaced_expired is None and grant.term == 7
    assert guard.holder == "new-leader" and guard.term == 7
    with pytest.raises(FailedPrecondition, match="'old-leader' is not the guard holder 'new-leader'"):
        guard.require_live("old-leader", "apply")
    guard.require_live("new-leader", "apply")
    assert guard.release("new-leader") and guard.term == 0
