"""Endpoint id checks shared by every RPC, and the pod state (retired ids, heartbeat alive set)."""

from __future__ import annotations

import pytest

from nodemanager.endpoints import check_endpoint_ids, check_instance
from nodemanager.errors import InvalidArgument
from nodemanager.pod_state import PodState

LOCAL = [2, 3, 5]


@pytest.mark.parametrize(
    ("ids", "kwargs", "expected"),
    [
        ([], {}, "endpoint_ids [] is empty; name at least one local endpoint (local: [2, 3, 5])"),
        ([2, 2], {}, "endpoint_ids [2, 2] repeat ids [2]"),
        ([2, 9, 1], {}, "endpoint_ids [9, 1] are not endpoints of this pod (local: [2, 3, 5])"),
        ([3], {"headless": {3}}, "endpoint_ids [3] are headless"),
        ([5, 2], {"retired": {5}}, "endpoint_ids [5] were retired by a committed scale-down (retired: [5])"),
        ([9], {"field": "retired_ids"}, "retired_ids [9] are not endpoints of this pod"),
    ],
)
def test_refusals_name_the_ids(ids: list[int], kwargs: dict, expected: str) -> None:
    with pytest.raises(InvalidArgument) as info:
        check_endpoint_ids(ids, local=LOCAL, **kwargs)
    assert expected in str(info.value)


def test_allowed_cases_return_the_ids_in_order() -> None:
    assert check_endpoint_ids([5, 2], local=LOCAL) == [5, 2]
    assert check_endpoint_ids([], local=LOCAL, allow_empty=True) == []
    assert check_endpoint_ids([3], local=LOCAL, headless={3}, allow_headless=True) == [3]
    assert check_endpoint_ids([5], local=LOCAL, retired={5}, allow_retired=True) == [5]


def test_instance_must_be_the_pods() -> None:
    check_instance(7, 7)
    with pytest.raises(InvalidArgument, match="instance_id 8 is not this pod's instance 7"):
        check_instance(8, 7)


def test_retired_set_and_heartbeat_alive_set() -> None:
    state = PodState(7, proxy_enabled=True)
    assert state.retire([3, 2]) == [2, 3]
    assert state.retire([3, 5]) == [5]
    assert state.retired == {2, 3, 5} and state.is_retired(5)
    # Proxy on: exactly the running ranks not retired; empty only when every running rank is retired.
    assert state.alive_for_heartbeat([2, 3, 5, 6]) == [6]
    assert state.alive_for_heartbeat([2, 3]) == []
    assert state.unretire([2, 9]) == [2]
    assert state.alive_for_heartbeat([2, 3]) == [2]
    # Proxy off: every running rank.
    assert state.set_proxy(False, "test") is True and state.set_proxy(False, "test") is False
    assert state.alive_for_heartbeat([3, 2]) == [2, 3]
