"""What an Apply must be before anything is sent (nodemanager.apply_checks), scale_up's rules in
particular: every refusal names the bad value; scale-down and retry keep their rules."""

from __future__ import annotations

import pytest

from gen.motor.v1 import node_manager_pb2 as nm
from nodemanager.apply_checks import PodView, check_apply
from nodemanager.errors import InvalidArgument

# A pod of ranks 0, 1 of four: rank 1 retired, started again as a joiner; rank 3 (elsewhere) removed.
POD = PodView(dp_size=4, local=[0, 1], headless=(), retired=frozenset({1}), joining=frozenset({1}))
UP = nm.INSTRUCTION_SCALE_UP


def test_a_scale_up_to_a_survivor_and_a_joiner_is_taken() -> None:
    assert check_apply(POD, UP, [3], "10.0.0.1", 0, [0, 1], [1]) == [0, 1]


@pytest.mark.parametrize(("removed", "added", "targets", "master", "message"), [
    ([3], [], [0], 0, "added_dp_ranks [] is empty"),
    ([3], [1, 1], [0], 0, "added_dp_ranks [1, 1] repeat ranks [1]"),
    ([3], [4], [0], 0, "added_dp_ranks [4] are not original ranks 0..3"),
    ([1], [1], [0], 0, "ranks [1] are in both"),
    ([3], [0, 1], [0], 0, "added_dp_ranks [0] serve on this pod already"),
    ([], [3], [0], 0, "omits this pod's retired ranks [1]"),
    ([3], [1], [0], 3, "dp_master_rank 3 is in removed_dp_ranks [3]"),
    ([3], [1, 2], [0], 0, None),
], ids=["empty", "repeated", "range", "both", "serving", "forgotten", "master-removed", "other-pod-joiner"])
def test_scale_up_refusals_name_the_value(removed, added, targets, master, message) -> None:
    if message is None:
        assert check_apply(POD, UP, removed, "10.0.0.1", master, targets, added) == targets
        return
    with pytest.raises(InvalidArgument, match=message.replace("[", r"\[").replace("]", r"\]")):
        check_apply(POD, UP, removed, "10.0.0.1", master, targets, added)


def test_a_joiner_not_started_or_not_added_is_refused() -> None:
    stopped = PodView(dp_size=4, local=[0, 1], headless=(), retired=frozenset({1}))
    with pytest.raises(InvalidArgument, match=r"endpoint_ids \[1\] are in added_dp_ranks but were not started"):
        check_apply(stopped, UP, [], "10.0.0.1", 0, [0, 1], [1])
    # A joiner the round does not add stays removed: it takes no apply.
    with pytest.raises(InvalidArgument, match=r"endpoint_ids \[1\] are in removed_dp_ranks \[1\]"):
        check_apply(POD, UP, [1], "10.0.0.1", 0, [0, 1], [3])


def test_added_ranks_belong_to_scale_up_only_and_joiners_take_no_scale_down() -> None:
    with pytest.raises(InvalidArgument, match=r"added_dp_ranks \[1\] are only for INSTRUCTION_SCALE_UP"):
        check_apply(POD, nm.INSTRUCTION_SCALE_DOWN, [1, 3], "10.0.0.1", 0, [0], [1])
    with pytest.raises(InvalidArgument, match=r"endpoint_ids \[1\] were retired"):
        check_apply(POD, nm.INSTRUCTION_SCALE_DOWN, [1, 3], "10.0.0.1", 0, [0, 1], [])
    assert check_apply(POD, nm.INSTRUCTION_RETRY, [1, 3], "", 0, [0], []) == [0]
