"""Attacks on the NodeManager's leader-term fence over real gRPC with real (fake-engine) processes:
a call without a term or with a malformed one once a term was seen, a deposed leader's guard and
its in-flight apply, and a restarted NodeManager that must remember the highest term."""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
import pytest

from gen.motor.v1 import node_manager_pb2 as nm
from motor.common.metadata import LEADER_TERM_METADATA
from motor.testing.fake_controller import FakeController
from motor.testing.waits import async_wait_for

from .nm_helpers import INSTANCE, POD_IP, fake_applies, nm_config, rpc_error, running_nm

pytestmark = pytest.mark.timeout(60)


def term(value: str | int) -> tuple[tuple[str, str], ...]:
    return ((LEADER_TERM_METADATA, str(value)),)


def guard(request_id: str) -> nm.GuardRequest:
    return nm.GuardRequest(instance_id=INSTANCE, request_id=request_id, lease_sec=30)


async def test_calls_without_a_term_or_with_a_malformed_one_are_refused_once_a_term_was_seen(
        controller: FakeController, tmp_path: Path) -> None:
    async with running_nm(nm_config(controller.address, tmp_path, ranks=(0,), dp_size=1)) as n:
        await n.ft.Guard(guard("leader-5"), timeout=5, metadata=term(5))
        unfenced = await rpc_error(n.ft.Guard(guard("no-term"), timeout=5))
        assert unfenced.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "carries no leader term" in unfenced.details() and "term 5" in unfenced.details()
        for bad in ("7x", "-1", "99999999999999999999"):
            err = await rpc_error(n.ft.Guard(guard("bad-term"), timeout=5, metadata=term(bad)))
            assert err.code() == grpc.StatusCode.FAILED_PRECONDITION and repr(bad) in err.details(), err.details()
        stop = await rpc_error(n.lifecycle.StopPod(nm.StopPodRequest(), timeout=5))
        assert stop.code() == grpc.StatusCode.FAILED_PRECONDITION and "carries no leader term" in stop.details()
        assert n.agent.guard.holder == "leader-5" and n.exits == []


async def test_a_new_leader_takes_the_deposed_leaders_guard_and_its_in_flight_apply_never_reaches_the_engine(
        controller: FakeController, tmp_path: Path) -> None:
    cfg = nm_config(controller.address, tmp_path, ranks=(1,), dp_size=2,
                    fault_injection={"enabled": True, "apply_delay_sec": 60.0})
    async with running_nm(cfg) as n:
        await n.ft.Guard(guard("deposed"), timeout=5, metadata=term(5))
        apply = asyncio.ensure_future(n.ft.Apply(nm.ApplyRequest(
            instance_id=INSTANCE, request_id="deposed", instruction=nm.INSTRUCTION_SCALE_DOWN, removed_dp_ranks=[0],
            dp_master_ip=POD_IP, dp_master_rank=1, endpoint_ids=[1]), timeout=10, metadata=term(5)))
        # The deposed leader's apply passed every check and is on its way to the engine.
        await async_wait_for(lambda: "deposed" in n.agent.proxy.applies, 5, "apply in flight", interval_sec=0.01)
        taken = await n.ft.Guard(guard("successor"), timeout=5, metadata=term(6))
        assert not taken.renewed and n.agent.guard.holder == "successor" and n.agent.guard.term == 6
        err = await rpc_error(apply)
        assert err.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "'deposed' is not the guard holder 'successor'" in err.details()
        assert await fake_applies(n.engine_url(1)) == []


async def test_a_restarted_nodemanager_remembers_the_highest_term(controller: FakeController, tmp_path: Path) -> None:
    cfg = nm_config(controller.address, tmp_path, ranks=(0,), dp_size=1)
    async with running_nm(cfg) as n:
        await n.ft.Guard(guard("leader-9"), timeout=5, metadata=term(9))
    assert (tmp_path / "engines" / "leader-term.json").exists()
    async with running_nm(cfg, wait_launched=False) as n:
        err = await rpc_error(n.ft.Guard(guard("deposed-8"), timeout=5, metadata=term(8)))
        assert err.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "leader term 8 is older than term 9" in err.details()
