"""The FT proxy's plain functions without engines: proxy switch, argument checks, guard ownership,
stale apply/finalize, never-twice apply, commit/abort, retired ids (fake clock, no sockets)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gen.motor.v1 import node_manager_pb2
from nodemanager.config import NodeManagerConfig
from nodemanager.engine_http import EngineHttpClient
from nodemanager.errors import AlreadyExists, FailedPrecondition, InvalidArgument, ProxyDisabled, Unavailable
from nodemanager.ft_proxy import FtProxy
from nodemanager.guard import GuardState
from nodemanager.pod_state import PodState
from nodemanager.supervisor import ProcessSupervisor

SCALE_DOWN = node_manager_pb2.INSTRUCTION_SCALE_DOWN
RETRY = node_manager_pb2.INSTRUCTION_RETRY


class Clock:
    now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def env(tmp_path: Path):
    cfg = NodeManagerConfig.model_validate({
        "controller_address": "127.0.0.1:1", "instance_id": 7, "dp_size": 6, "pod_ip": "127.0.0.2",
        "engines": [{"dp_rank": 2}, {"dp_rank": 3}, {"dp_rank": 4, "headless": True}],
        "dp_store_port_base": 30000,
    })
    clock = Clock()
    state = PodState(7, proxy_enabled=True)
    sup = ProcessSupervisor(cfg, tmp_path, on_ready=lambda *_: None, on_exit=lambda *_: None)
    commits: list[tuple[list[int], str]] = []
    proxy = FtProxy(cfg, state, sup, EngineHttpClient("/v1/fault_tolerance", 1.0), GuardState(clock),
                    on_commit=lambda ids, rid: commits.append((ids, rid)))
    return proxy, state, clock, commits


def apply_kwargs(**over):
    kw = dict(instance_id=7, request_id="r1", instruction=SCALE_DOWN, removed_dp_ranks=[0], dp_master_ip="127.0.0.2",
              dp_master_rank=2, endpoint_ids=[2, 3])
    kw.update(over)
    return kw


async def test_everything_is_unimplemented_when_the_proxy_is_off(env) -> None:
    proxy, state, _, _ = env
    state.set_proxy(False, "test")
    with pytest.raises(ProxyDisabled, match=r"enable_dp_scale_down_proxy=false"):
        proxy.guard("r1", 10, 7)
    with pytest.raises(ProxyDisabled):
        await proxy.status(7, [2])
    with pytest.raises(ProxyDisabled):
        await proxy.apply(**apply_kwargs())
    with pytest.raises(ProxyDisabled):
        proxy.finalize(instance_id=7, request_id="r1", commit=True, retired_ids=[])


def test_guard_checks_instance_and_id(env) -> None:
    proxy, *_ = env
    with pytest.raises(InvalidArgument, match="instance_id 8 is not this pod's instance 7"):
        proxy.guard("r1", 10, 8)
    with pytest.raises(InvalidArgument, match="request_id '' is empty"):
        proxy.guard("", 10, 7)
    with pytest.raises(InvalidArgument, match="lease_sec=0"):
        proxy.guard("r1", 0, 7)


@pytest.mark.parametrize(
    ("over", "expected"),
    [
        ({"request_id": ""}, "request_id '' is empty"),
        ({"instance_id": 1}, "instance_id 1 is not this pod's instance 7"),
        ({"instruction": node_manager_pb2.INSTRUCTION_UNSPECIFIED}, "instruction INSTRUCTION_UNSPECIFIED is not supported"),
        ({"instruction": 9}, "instruction 9 is not supported"),
        ({"removed_dp_ranks": []}, "removed_dp_ranks [] is empty"),
        ({"removed_dp_ranks": [0, 6]}, "removed_dp_ranks [6] are not original ranks 0..5"),
        ({"removed_dp_ranks": [0, 0]}, "removed_dp_ranks [0, 0] repeat ranks [0]"),
        ({"dp_master_ip": "master"}, "dp_master_ip 'master' is not an IP address"),
        ({"dp_master_rank": 9}, "dp_master_rank 9 is not an original rank"),
        ({"dp_master_rank": 0}, "dp_master_rank 0 is in removed_dp_ranks [0]"),
        ({"endpoint_ids": []}, "endpoint_ids [] is empty"),
        ({"endpoint_ids": [2, 5]}, "endpoint_ids [5] are not endpoints of this pod"),
        ({"endpoint_ids": [4]}, "endpoint_ids [4] are headless"),
        ({"endpoint_ids": [3], "removed_dp_ranks": [0, 3]}, "endpoint_ids [3] are in removed_dp_ranks [0, 3]"),
    ],
)
async def test_bad_apply_arguments_are_refused(env, over: dict, expected: str) -> None:
    proxy, *_ = env
    proxy.guard("r1", 10, 7)
    with pytest.raises(InvalidArgument) as info:
        await proxy.apply(**apply_kwargs(**over))
    assert expected in str(info.value)
    assert "r1" not in proxy.applies  # nothing forwarded


async def test_apply_without_the_guard_is_stale(env) -> None:
    proxy, _, clock, _ = env
    with pytest.raises(FailedPrecondition, match="stale apply: request_id 'r1' holds no guard"):
        await proxy.apply(**apply_kwargs())
    proxy.guard("r0", 5, 7)
    with pytest.raises(FailedPrecondition, match="not the guard holder 'r0'"):
        await proxy.apply(**apply_kwargs())
    clock.now += 6
    proxy.guard("r1", 5, 7)
    clock.now += 6
    with pytest.raises(FailedPrecondition, match="expired"):
        await proxy.apply(**apply_kwargs())


async def test_apply_is_forwarded_at_most_once(env) -> None:
    proxy, *_ = env
    proxy.guard("r1", 10, 7)
    # Engines were never launched: no port, so nothing is reachable; the outcome says so.
    result = await proxy.apply(**apply_kwargs(dp_master_rank=3))
    assert not result.accepted and result.dp_store_port == 30001
    assert [(o.endpoint_id, o.http_status) for o in result.outcomes] == [(2, 0), (3, 0)]
    assert all('"dp_store_port": 30001' in o.request_body for o in result.outcomes)
    with pytest.raises(AlreadyExists, match="'r1' was already forwarded"):
        await proxy.apply(**apply_kwargs())


async def test_retry_is_forwarded_with_no_params_and_no_store_port(env) -> None:
    proxy, state, _, _ = env
    proxy.guard("fr-1", 10, 7)
    result = await proxy.apply(**apply_kwargs(request_id="fr-1", instruction=RETRY, removed_dp_ranks=[],
                                              dp_master_ip="", dp_master_rank=0))
    assert not result.accepted and result.dp_store_port == 0  # never launched: nothing reachable
    assert [o.request_body for o in result.outcomes] == [
        '{"instruction": "retry", "request_id": "fr-1", "params": {}}'] * 2
    with pytest.raises(AlreadyExists, match="'fr-1' was already forwarded"):
        await proxy.apply(**apply_kwargs(request_id="fr-1", instruction=RETRY, removed_dp_ranks=[]))


@pytest.mark.parametrize(
    ("over", "expected"),
    [
        ({"removed_dp_ranks": [7]}, "removed_dp_ranks [7] are not original ranks 0..5"),
        ({"removed_dp_ranks": [0]}, "omits this pod's retired ranks [3]"),
        ({"removed_dp_ranks": [3], "endpoint_ids": [2, 3]}, "endpoint_ids [3] were retired"),
        ({"removed_dp_ranks": [3], "endpoint_ids": [4]}, "endpoint_ids [4] are headless"),
    ],
)
async def test_bad_retry_arguments_are_refused(env, over: dict, expected: str) -> None:
    proxy, state, _, _ = env
    state.retire([3])
    proxy.guard("fr-1", 10, 7)
    with pytest.raises(InvalidArgument) as info:
        await proxy.apply(**apply_kwargs(request_id="fr-1", instruction=RETRY, **over))
    assert expected in str(info.value)
    assert "fr-1" not in proxy.applies


async def test_status_of_unlaunched_engine_is_unavailable(env) -> None:
    proxy, *_ = env
    with pytest.raises(Unavailable, match="engine unreachable: endpoint 2: engine has not been launched"):
        await proxy.status(7, [2])
    with pytest.raises(InvalidArgument, match=r"endpoint_ids \[4\] are headless"):
        await proxy.status(7, [4])


def test_finalize_commit_records_retired_and_releases(env) -> None:
    proxy, state, _, commits = env
    with pytest.raises(FailedPrecondition, match="stale finalize: request_id 'r1' holds no guard"):
        proxy.finalize(instance_id=7, request_id="r1", commit=True, retired_ids=[3])
    proxy.guard("r1", 10, 7)
    with pytest.raises(FailedPrecondition, match="stale finalize: request_id 'rX' is not the guard holder 'r1'"):
        proxy.finalize(instance_id=7, request_id="rX", commit=True, retired_ids=[3])
    with pytest.raises(InvalidArgument, match=r"retired_ids \[9\] are not endpoints of this pod"):
        proxy.finalize(instance_id=7, request_id="r1", commit=True, retired_ids=[9])
    result = proxy.finalize(instance_id=7, request_id="r1", commit=True, retired_ids=[4, 3])  # headless allowed
    assert result.retired_ids == [3, 4] and result.guard_released and result.newly_retired == [3, 4]
    assert commits == [([3, 4], "r1")] and state.retired == {3, 4}
    assert proxy.guard_state.holder is None
    # A second round: cumulative answer, retired ids now refused for status/apply targets.
    proxy.guard("r2", 10, 7)
    result = proxy.finalize(instance_id=7, request_id="r2", commit=True, retired_ids=[])
    assert result.retired_ids == [3, 4] and result.newly_retired == []
    assert commits == [([3, 4], "r1"), ([], "r2")], "every commit re-arms the pod's survivors"


async def test_retired_ranks_must_stay_in_removed_and_are_no_target(env) -> None:
    proxy, state, _, _ = env
    state.retire([3])
    proxy.guard("r1", 10, 7)
    with pytest.raises(InvalidArgument, match=r"not cumulative: it omits this pod's retired ranks \[3\]"):
        await proxy.apply(**apply_kwargs(endpoint_ids=[2]))
    with pytest.raises(InvalidArgument, match=r"endpoint_ids \[3\] were retired"):
        await proxy.status(7, [3])


def test_finalize_abort_releases_without_retiring(env) -> None:
    proxy, state, _, commits = env
    proxy.guard("r1", 10, 7)
    result = proxy.finalize(instance_id=7, request_id="r1", commit=False, retired_ids=[2])
    assert result.guard_released and result.retired_ids == [] and state.retired == frozenset() and not commits
    proxy.guard("r2", 10, 7)  # the guard is free again


def test_finalize_commit_is_refused_on_an_expired_lease_abort_is_not(env) -> None:
    """RFC §6, an expired lease (or a wrong id) is refused by the NodeManager."""
    proxy, state, clock, commits = env
    proxy.guard("r1", 10, 7)
    clock.now = 11.0
    with pytest.raises(FailedPrecondition, match="lease of request_id 'r1' expired"):
        proxy.finalize(instance_id=7, request_id="r1", commit=True, retired_ids=[2])
    assert not state.retired and not commits
    result = proxy.finalize(instance_id=7, request_id="r1", commit=False, retired_ids=[])
    assert result.guard_released and proxy.guard_state.holder is None
