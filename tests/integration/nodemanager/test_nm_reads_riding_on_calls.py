"""A status read carried by a Guard or an Apply (`then_status`), over real gRPC with fake-engine
processes: the read comes back in the answer once the guard holds or every engine accepted; a bad
read is refused before the guard is taken or anything reaches an engine; a refused apply carries no
read."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from gen.motor.v1 import common_pb2, node_manager_pb2 as nm
from motor.testing.fake_controller import FakeController

from .nm_helpers import (
    INSTANCE,
    POD_IP,
    UNHEALTHY,
    fake_applies,
    fake_control,
    first_polls_done,
    quiet_poller,
    rpc_error,
    running_nm,
    status_reads,
)

pytestmark = pytest.mark.timeout(60)


def guard(request_id: str, then: nm.StatusRead | None = None) -> nm.GuardRequest:
    return nm.GuardRequest(instance_id=INSTANCE, request_id=request_id, lease_sec=30, then_status=then)


def apply(request_id: str, then: nm.StatusRead | None = None) -> nm.ApplyRequest:
    # Ranks 0 and 1 of a DP=4 instance survive the removal of 2 and 3 (another pod's).
    return nm.ApplyRequest(instance_id=INSTANCE, request_id=request_id, instruction=nm.INSTRUCTION_SCALE_DOWN,
                           removed_dp_ranks=[2, 3], dp_master_ip=POD_IP, dp_master_rank=0, endpoint_ids=[0, 1],
                           then_status=then)


def config(controller: FakeController, tmp_path: Path):
    """Ranks 0 and 1 of DP=4, and a poller that reads each engine once (`quiet_poller`)."""
    return quiet_poller(controller.address, tmp_path, dp_size=4)


async def test_a_guard_answers_with_the_read_once_it_holds(controller: FakeController, tmp_path: Path) -> None:
    async with running_nm(config(controller, tmp_path)) as n:
        await first_polls_done(n)
        await fake_control(n.engine_url(1), status="unhealthy", fault_info="RuntimeError")
        before = [await status_reads(n.engine_url(r)) for r in (0, 1)]
        resp = await n.ft.Guard(guard("rid-G", nm.StatusRead(endpoint_ids=[1, 0])), timeout=5)
        assert resp.request_id == "rid-G" and not resp.renewed
        assert resp.then_status.HasField("status") and resp.then_status.read_sec >= 0
        assert [(e.id, e.status, e.fault_info) for e in resp.then_status.status.engines] == [
            (1, common_pb2.ENGINE_HEALTH_UNHEALTHY, "RuntimeError"), (0, common_pb2.ENGINE_HEALTH_HEALTHY, "")]
        assert [await status_reads(n.engine_url(r)) for r in (0, 1)] == [b + 1 for b in before]
        # The guard holds: another request is refused.
        err = await rpc_error(n.ft.Guard(guard("rid-other"), timeout=5))
        assert err.code() == grpc.StatusCode.FAILED_PRECONDITION and "'rid-G'" in err.details()
        # Without then_status the answer has no read.
        renewed = await n.ft.Guard(guard("rid-G"), timeout=5)
        assert renewed.renewed and not renewed.HasField("then_status")


async def test_a_guard_with_a_long_poll_waits_out_the_states_asked(controller: FakeController,
                                                                   tmp_path: Path) -> None:
    async with running_nm(config(controller, tmp_path)) as n:
        await first_polls_done(n)
        await fake_control(n.engine_url(0), status="unhealthy")
        resp = await n.ft.Guard(guard("rid-L", nm.StatusRead(endpoint_ids=[0], wait_while=[UNHEALTHY],
                                                              settle_sec=0.3)), timeout=5)
        assert [e.status for e in resp.then_status.status.engines] == [common_pb2.ENGINE_HEALTH_UNHEALTHY]
        assert resp.then_status.read_sec >= 0.2  # waited (most of) settle_sec out, reading again


@pytest.mark.parametrize("then, named", [
    (nm.StatusRead(endpoint_ids=[0, 7]), "7"),
    (nm.StatusRead(endpoint_ids=[0], wait_while=[UNHEALTHY], settle_sec=-1), "settle_sec -1"),
    (nm.StatusRead(endpoint_ids=[]), "endpoint_ids"),
])
async def test_a_bad_read_is_refused_before_the_guard_is_taken_or_an_apply_sent(
        controller: FakeController, tmp_path: Path, then: nm.StatusRead, named: str) -> None:
    async with running_nm(config(controller, tmp_path)) as n:
        err = await rpc_error(n.ft.Guard(guard("rid-bad", then), timeout=5))
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and named in err.details(), err.details()
        # No guard was taken: another request gets it at once.
        grant = await n.ft.Guard(guard("rid-ok"), timeout=5)
        assert grant.request_id == "rid-ok" and not grant.renewed
        err = await rpc_error(n.ft.Apply(apply("rid-ok", then), timeout=5))
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and named in err.details(), err.details()
        assert [await fake_applies(n.engine_url(r)) for r in (0, 1)] == [[], []]
        # The same apply without the bad read is still the first: nothing was claimed.
        assert (await n.ft.Apply(apply("rid-ok"), timeout=5)).accepted


async def test_an_apply_answers_with_the_read_after_every_engine_accepted(controller: FakeController,
                                                                          tmp_path: Path) -> None:
    async with running_nm(config(controller, tmp_path)) as n:
        await n.ft.Guard(guard("rid-A"), timeout=5)
        resp = await n.ft.Apply(apply("rid-A", nm.StatusRead(endpoint_ids=[0, 1])), timeout=5)
        assert resp.accepted and [r.endpoint_id for r in resp.results] == [0, 1]
        assert resp.then_status.HasField("status") and resp.then_status.read_sec >= 0
        # Read after the engines took the instruction: each shows the round's request id.
        assert [(e.id, e.last_ft_request_id) for e in resp.then_status.status.engines] == [(0, "rid-A"), (1, "rid-A")]


async def test_an_apply_not_accepted_carries_no_read(controller: FakeController, tmp_path: Path) -> None:
    async with running_nm(config(controller, tmp_path)) as n:
        await first_polls_done(n)
        await fake_control(n.engine_url(1), apply_mode="reject_str")
        await n.ft.Guard(guard("rid-R"), timeout=5)
        before = [await status_reads(n.engine_url(r)) for r in (0, 1)]
        resp = await n.ft.Apply(apply("rid-R", nm.StatusRead(endpoint_ids=[0, 1])), timeout=5)
        assert not resp.accepted and not resp.HasField("then_status")
        assert [await status_reads(n.engine_url(r)) for r in (0, 1)] == before


async def test_a_failed_read_is_answered_beside_what_the_call_did(controller: FakeController,
                                                                  tmp_path: Path) -> None:
    """The guard holds and the instruction was accepted regardless: the answer says so, and says
    why the read failed as a Status call would have (its code and message)."""
    async with running_nm(config(controller, tmp_path)) as n:
        await first_polls_done(n)
        await fake_control(n.engine_url(1), status_mode="wrong_id")
        resp = await n.ft.Guard(guard("rid-F", nm.StatusRead(endpoint_ids=[0, 1])), timeout=5)
        assert resp.request_id == "rid-F" and not resp.then_status.HasField("status")
        assert resp.then_status.error_code == grpc.StatusCode.FAILED_PRECONDITION.value[0]
        assert "endpoint 1" in resp.then_status.error, resp.then_status.error
        err = await rpc_error(n.ft.Guard(guard("rid-other"), timeout=5))
        assert err.code() == grpc.StatusCode.FAILED_PRECONDITION  # the guard holds
        await fake_control(n.engine_url(1), status_mode="hang", hang_sec=30)
        resp = await n.ft.Apply(apply("rid-F", nm.StatusRead(endpoint_ids=[0, 1])), timeout=5)
        assert resp.accepted and not resp.then_status.HasField("status")
        assert resp.then_status.error_code == grpc.StatusCode.DEADLINE_EXCEEDED.value[0]
        assert "did not answer within" in resp.then_status.error, resp.then_status.error
        assert [len(await fake_applies(n.engine_url(r))) for r in (0, 1)] == [1, 1]
