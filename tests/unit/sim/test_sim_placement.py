from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from motor.sim.placement import (
    InsufficientRedundancyError,
    PlacementError,
    initial_placement,
    lost_experts,
    place,
    replace_after_scale_down,
    slots_per_rank,
)

pytestmark = pytest.mark.timeout(60)  # per test, module fixtures included


def check_invariants(p, ranks: list[int]) -> None:
    assert p.ranks == sorted(ranks)
    assert all(len(p.by_rank[r]) == p.slots_per_rank for r in ranks)
    counts = p.replica_counts()
    assert min(counts.values()) >= 1, "every logical expert keeps a replica"
    assert max(counts.values()) - min(counts.values()) <= 1, "replicas are balanced"
    holders = p.replicas()
    for expert, count in counts.items():
        # Replicas of one expert sit on distinct ranks whenever that is possible.
        assert len(holders[expert]) == min(count, len(ranks))


layouts = st.integers(1, 8).flatmap(
    lambda dp: st.tuples(st.just(dp), st.integers(1, 24), st.integers(0, 24)).filter(
        lambda t: (t[1] + t[2]) % t[0] == 0
    )
)


@settings(max_examples=300, deadline=None)
@given(layouts)
def test_initial_placement_invariants(layout: tuple[int, int, int]) -> None:
    dp, experts, redundant = layout
    p = initial_placement(experts, redundant, dp)
    assert p.slots_per_rank == (experts + redundant) // dp
    check_invariants(p, list(range(dp)))


@settings(max_examples=300, deadline=None)
@given(layouts, st.data())
def test_scale_down_keeps_every_expert_or_refuses(layout: tuple[int, int, int], data: st.DataObject) -> None:
    dp, experts, redundant = layout
    p = initial_placement(experts, redundant, dp)
    survivors = data.draw(st.lists(st.sampled_from(range(dp)), min_size=1, unique=True))
    lost = lost_experts(p, survivors)
    if lost:
        with pytest.raises(InsufficientRedundancyError) as info:
            replace_after_scale_down(p, survivors)
        assert info.value.lost_experts == lost
        assert str(lost[0]) in str(info.value)
    else:
        q = replace_after_scale_down(p, survivors)
        assert q.slots_per_rank == p.slots_per_rank
        check_invariants(q, survivors)


def test_example_layout_of_the_integration_flow() -> None:
    p = initial_placement(4, 4, 4)
    assert dict(p.by_rank) == {0: (0, 2), 1: (0, 2), 2: (1, 3), 3: (1, 3)}
    q = replace_after_scale_down(p, [0, 2, 3])
    assert dict(q.by_rank) == {0: (0, 1), 2: (0, 2), 3: (1, 3)}
    r = replace_after_scale_down(q, [2, 3])
    assert dict(r.by_rank) == {2: (0, 2), 3: (1, 3)}
    with pytest.raises(InsufficientRedundancyError, match=r"\[1, 3\]"):
        replace_after_scale_down(r, [2])


def test_no_redundancy_means_no_scale_down() -> None:
    p = initial_placement(8, 0, 4)
    with pytest.raises(InsufficientRedundancyError):
        replace_after_scale_down(p, [0, 1, 2])


def test_full_replication_survives_down_to_one_rank() -> None:
    p = initial_placement(4, 12, 4)
    assert all(set(slots) == {0, 1, 2, 3} for slots in p.by_rank.values())
    q = replace_after_scale_down(p, [3])
    assert dict(q.by_rank) == {3: (0, 1, 2, 3)}


@pytest.mark.parametrize(
    "experts, redundant, dp, message",
    [
        (8, 3, 4, "11 physical experts is not divisible by dp_size 4"),
        (0, 4, 4, "num_experts must be >= 1, got 0"),
        (4, -1, 1, "num_redundant_experts must be >= 0, got -1"),
        (4, 0, 0, "dp_size must be >= 1, got 0"),
    ],
)
def test_slots_per_rank_refuses_bad_layouts(experts: int, redundant: int, dp: int, message: str) -> None:
    with pytest.raises(PlacementError, match=message):
        slots_per_rank(experts, redundant, dp)


def test_place_refuses_too_few_slots_and_unknown_survivors() -> None:
    with pytest.raises(PlacementError, match="cannot hold 5 logical experts"):
        place(5, [0, 1], 2)
    with pytest.raises(PlacementError, match="empty"):
        place(2, [], 2)
    with pytest.raises(PlacementError, match=r"survivors \[9\]"):
        replace_after_scale_down(initial_placement(2, 2, 2), [9])


def test_placement_json_is_stable() -> None:
    p = initial_placement(2, 2, 2)
    assert p.to_json() == {"num_logical_experts": 2, "slots_per_rank": 2, "by_rank": {"0": [0, 1], "1": [0, 1]}}
