"""Elastic scale-up on one NodeManager over real gRPC with fake-engine processes that follow the
contract (docs/engine-protocol-scale-up.md): a retired rank started as a joiner (`--join`) with the
running engine left alone and kept retired (heartbeat, DescribePod); the scale_up apply's body to
survivor and joiner; finalize(commit) makes the joiner ordinary; finalize(abort) stops it; a joiner
that dies is reported and read unreachable; bad input is INVALID_ARGUMENT naming the value."""

from __future__ import annotations

import json
from pathlib import Path

import grpc
import pytest

from gen.motor.v1 import controller_pb2, node_manager_pb2 as nm
from motor.testing.fake_controller import FakeController
from motor.testing.waits import async_wait_for
from nodemanager.supervisor import RunState

from .nm_helpers import INSTANCE, POD_IP, fake_applies, fake_control, nm_config, rpc_error, running_nm

pytestmark = pytest.mark.timeout(90)
SCALE_UP = nm.INSTRUCTION_SCALE_UP
RANKS = (0, 1, 2)


async def _retire_rank_1(n, controller: FakeController) -> None:
    """A committed scale-down of rank 1: retired, its engine stopped."""
    await async_wait_for(lambda: controller.last_heartbeat() and
                         list(controller.last_heartbeat().alive_endpoint_ids) == list(RANKS), 10, "every rank alive")
    await n.ft.Guard(nm.GuardRequest(instance_id=INSTANCE, request_id="sd-7-a", lease_sec=30), timeout=5)
    await n.ft.Finalize(nm.FinalizeRequest(instance_id=INSTANCE, request_id="sd-7-a", commit=True, retired_ids=[1]),
                        timeout=5)
    await async_wait_for(lambda: n.agent.supervisor.slot(1).state is RunState.STOPPED, 10, "rank 1 stopped")


async def _engines(n) -> list[tuple[int, bool, bool]]:
    described = await n.lifecycle.DescribePod(nm.DescribePodRequest(), timeout=5)
    return [(e.endpoint.id, e.running, e.retired) for e in described.engines]


def _apply(request_id: str, endpoint_ids: list[int], added: list[int], removed: list[int] = ()) -> nm.ApplyRequest:
    return nm.ApplyRequest(instance_id=INSTANCE, request_id=request_id, instruction=SCALE_UP,
                           removed_dp_ranks=list(removed), added_dp_ranks=added, dp_master_ip=POD_IP,
                           dp_master_rank=0, endpoint_ids=endpoint_ids, dp_store_port=29650)


async def test_a_joiner_is_started_alone_readmitted_by_the_apply_and_made_ordinary_by_the_commit(
        controller: FakeController, tmp_path: Path) -> None:
    async with running_nm(nm_config(controller.address, tmp_path, ranks=RANKS, dp_size=3)) as n:
        await _retire_rank_1(n, controller)
        pid0 = n.agent.supervisor.slot(0).pid
        started = await n.lifecycle.StartEngines(nm.StartEnginesRequest(
            instance_id=INSTANCE, request_id="su-7-b", endpoint_ids=[1], join=True), timeout=30)
        assert [e.id for e in started.endpoints] == [1] and started.launched_at_unix_sec > 0
        assert await _engines(n) == [(0, True, False), (1, True, True), (2, True, False)]
        assert n.agent.supervisor.slot(0).pid == pid0  # the running engines are left alone
        assert (await fake_control(n.engine_url(1)))["joiner"] is True  # its argv ended with --join
        mark = len(controller.heartbeats)
        beat = (await async_wait_for(lambda: controller.heartbeats_since(mark), 5, "a heartbeat"))[0]
        assert list(beat.alive_endpoint_ids) == [0, 2]  # still retired: not heartbeated

        await n.ft.Guard(nm.GuardRequest(instance_id=INSTANCE, request_id="su-7-b", lease_sec=30), timeout=5)
        ready = await n.ft.Status(nm.StatusRequest(instance_id=INSTANCE, endpoint_ids=[0, 1, 2], request_id="su-7-b"),
                                  timeout=5)
        assert [(e.id, e.status) for e in ready.engines] == [(r, 1) for r in RANKS]  # ENGINE_HEALTH_HEALTHY
        resp = await n.ft.Apply(_apply("su-7-b", [0, 1, 2], [1]), timeout=5)
        assert resp.accepted and resp.dp_store_port == 29650, resp
        body = json.loads((await fake_applies(n.engine_url(1)))[-1]["body"])
        assert body == {"instruction": "scale_up", "request_id": "su-7-b",
                        "params": {"added_dp_ranks": [1], "removed_dp_ranks": [], "dp_master_ip": POD_IP,
                                   "dp_store_port": 29650}}
        assert json.loads((await fake_applies(n.engine_url(0)))[-1]["body"]) == body  # the same to every one
        done = await n.ft.Finalize(nm.FinalizeRequest(instance_id=INSTANCE, request_id="su-7-b", commit=True),
                                   timeout=5)
        assert done.guard_released and list(done.retired_ids) == []
        assert await _engines(n) == [(0, True, False), (1, True, False), (2, True, False)]
        mark = len(controller.heartbeats)
        await async_wait_for(lambda: [list(h.alive_endpoint_ids) for h in controller.heartbeats_since(mark)][-1:]
                             == [[0, 1, 2]], 5, "the joined rank heartbeated")
        assert 1 in n.agent.poller.watched
        register = n.agent.register_request()
        assert list(register.retired_ids) == []


async def test_an_abort_stops_the_joiners_and_they_stay_retired(controller: FakeController, tmp_path: Path) -> None:
    async with running_nm(nm_config(controller.address, tmp_path, ranks=RANKS, dp_size=3)) as n:
        await _retire_rank_1(n, controller)
        await n.ft.Guard(nm.GuardRequest(instance_id=INSTANCE, request_id="su-7-c", lease_sec=30), timeout=5)
        await n.lifecycle.StartEngines(nm.StartEnginesRequest(instance_id=INSTANCE, request_id="su-7-c",
                                                              endpoint_ids=[1], join=True), timeout=30)
        await n.ft.Finalize(nm.FinalizeRequest(instance_id=INSTANCE, request_id="su-7-c", commit=False), timeout=5)
        await async_wait_for(lambda: n.agent.supervisor.slot(1).state is RunState.STOPPED, 10, "the joiner stopped")
        assert await _engines(n) == [(0, True, False), (1, False, True), (2, True, False)]
        assert n.agent.state.joining == frozenset()
        # A later round starts it again as a joiner.
        await n.lifecycle.StartEngines(nm.StartEnginesRequest(instance_id=INSTANCE, request_id="su-7-d",
                                                              endpoint_ids=[1], join=True), timeout=30)
        assert await _engines(n) == [(0, True, False), (1, True, True), (2, True, False)]


async def test_a_joiner_that_dies_is_reported_and_read_unreachable(controller: FakeController, tmp_path: Path) -> None:
    async with running_nm(nm_config(controller.address, tmp_path, ranks=RANKS, dp_size=3)) as n:
        await _retire_rank_1(n, controller)
        await n.lifecycle.StartEngines(nm.StartEnginesRequest(instance_id=INSTANCE, request_id="su-7-e",
                                                              endpoint_ids=[1], join=True), timeout=30)
        n.agent.supervisor.slot(1).proc.popen.kill()  # type: ignore[union-attr]
        await async_wait_for(lambda: controller.reports_of(1, controller_pb2.SOFTWARE_FAULT_KIND_ENGINE_DEAD), 10,
                             "the joiner's death reported")
        err = await rpc_error(n.ft.Status(nm.StatusRequest(instance_id=INSTANCE, endpoint_ids=[1],
                                                           request_id="su-7-e"), timeout=5))
        assert err.code() == grpc.StatusCode.UNAVAILABLE, err.details()


@pytest.mark.parametrize(("apply", "message"), [
    (_apply("su-7-f", [0], []), "added_dp_ranks [] is empty"),
    (_apply("su-7-f", [0], [0]), "added_dp_ranks [0] serve on this pod already"),
    (_apply("su-7-f", [0], [1], [1]), "ranks [1] are in both added_dp_ranks [1] and removed_dp_ranks [1]"),
    (_apply("su-7-f", [0], [7]), "added_dp_ranks [7] are not original ranks 0..2"),
    (_apply("su-7-f", [0, 1], [1]), "endpoint_ids [1] are in added_dp_ranks but were not started as joiners"),
    (nm.ApplyRequest(instance_id=INSTANCE, request_id="su-7-f", instruction=nm.INSTRUCTION_SCALE_DOWN,
                     removed_dp_ranks=[1], added_dp_ranks=[1], dp_master_ip=POD_IP, endpoint_ids=[0]),
     "added_dp_ranks [1] are only for INSTRUCTION_SCALE_UP"),
], ids=["empty", "serving", "both", "out-of-range", "not-joined", "not-scale-up"])
async def test_bad_scale_up_input_is_invalid_argument_naming_the_value(controller: FakeController, tmp_path: Path,
                                                                        apply, message: str) -> None:
    async with running_nm(nm_config(controller.address, tmp_path, ranks=RANKS, dp_size=3)) as n:
        await _retire_rank_1(n, controller)
        await n.ft.Guard(nm.GuardRequest(instance_id=INSTANCE, request_id="su-7-f", lease_sec=30), timeout=5)
        err = await rpc_error(n.ft.Apply(apply, timeout=5))
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and message in err.details(), err.details()
        err = await rpc_error(n.lifecycle.StartEngines(nm.StartEnginesRequest(
            instance_id=INSTANCE, request_id="su-7-f", endpoint_ids=[0], join=True), timeout=10))
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and "endpoint_ids [0] are not retired" in err.details()
        err = await rpc_error(n.lifecycle.StartEngines(nm.StartEnginesRequest(
            instance_id=INSTANCE, request_id="su-7-f", join=True), timeout=10))
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and "is empty" in err.details(), err.details()
