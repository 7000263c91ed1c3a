"""The Status long poll over real gRPC with fake-engine processes: the NodeManager reads again only
the engines still in a `wait_while` state, answers once they settled or at `settle_sec`, and
refuses bad bounds and states by name."""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
import pytest

from gen.motor.v1 import common_pb2, node_manager_pb2 as nm
from motor.testing.fake_controller import FakeController

from .nm_helpers import (
    DIAGNOSING,
    INSTANCE,
    UNHEALTHY,
    fake_control,
    fake_polled,
    first_polls_done,
    quiet_poller,
    rpc_error,
    running_nm,
    status_reads,
)


pytestmark = pytest.mark.timeout(60)


async def both_unhealthy(n) -> None:  # noqa: ANN001
    """Once the NodeManager's own first polls are done (it reads nothing more), both ranks unhealthy."""
    await first_polls_done(n)
    for rank in (0, 1):
        await fake_control(n.engine_url(rank), status="unhealthy")


async def test_answers_once_the_waiting_engine_settles(controller: FakeController, tmp_path: Path) -> None:
    async with running_nm(quiet_poller(controller.address, tmp_path)) as n:
        await first_polls_done(n)
        await fake_control(n.engine_url(1), status="unhealthy")
        healthy_reads = await status_reads(n.engine_url(0))
        call = asyncio.ensure_future(n.ft.Status(nm.StatusRequest(
            instance_id=INSTANCE, endpoint_ids=[0, 1], request_id="lp1", wait_while=[UNHEALTHY, DIAGNOSING],
            settle_sec=30), timeout=40))
        await fake_polled(n.engine_url(1), 3)  # the long poll is reading rank 1 again and again
        assert not call.done()
        await fake_control(n.engine_url(1), status="healthy")
        resp = await call
        assert [(e.id, e.status) for e in resp.engines] == [(0, common_pb2.ENGINE_HEALTH_HEALTHY),
                                                            (1, common_pb2.ENGINE_HEALTH_HEALTHY)]
        # Rank 0 was never in a waiting state: read once, never again.
        assert await status_reads(n.engine_url(0)) == healthy_reads + 1


async def test_waiting_engines_are_probed_in_turn_and_the_answer_is_read_after_the_last_probe(
        controller: FakeController, tmp_path: Path) -> None:
    async with running_nm(quiet_poller(controller.address, tmp_path)) as n:
        await both_unhealthy(n)
        call = asyncio.ensure_future(n.ft.Status(nm.StatusRequest(
            instance_id=INSTANCE, endpoint_ids=[0, 1], wait_while=[UNHEALTHY], settle_sec=30), timeout=40))
        await fake_polled(n.engine_url(0), 2)  # probed in turn: each rank read again
        await fake_polled(n.engine_url(1), 2)
        await fake_control(n.engine_url(1), status="healthy")
        await fake_polled(n.engine_url(0), 2)  # rank 1 moved, rank 0 still waits: still probed
        assert not call.done()
        await fake_control(n.engine_url(0), status="healthy")
        resp = await call
        assert [(e.id, e.status) for e in resp.engines] == [(0, common_pb2.ENGINE_HEALTH_HEALTHY),
                                                            (1, common_pb2.ENGINE_HEALTH_HEALTHY)]


def reads_of_kind(n, kind: str) -> float:  # noqa: ANN001
    return n.agent.metrics.registry.get_sample_value("motor_nodemanager_status_rpc_engine_reads_total",
                                                     {"read": kind}) or 0.0


async def test_a_long_poll_reads_one_engine_first_and_the_others_once_it_moved(controller: FakeController,
                                                                               tmp_path: Path) -> None:
    """A DP group's ranks move together: while the first engine waits, the others are not all read."""
    async with running_nm(quiet_poller(controller.address, tmp_path)) as n:
        await both_unhealthy(n)
        first_before = reads_of_kind(n, "first")
        call = asyncio.ensure_future(n.ft.Status(nm.StatusRequest(
            instance_id=INSTANCE, endpoint_ids=[0, 1], wait_while=[UNHEALTHY], settle_sec=30), timeout=40))
        await fake_polled(n.engine_url(0), 2)
        assert reads_of_kind(n, "first") == first_before + 1  # rank 0 alone; rank 1 only as a later probe
        for rank in (0, 1):
            await fake_control(n.engine_url(rank), status="healthy")
        resp = await call
        assert [(e.id, e.status) for e in resp.engines] == [(0, common_pb2.ENGINE_HEALTH_HEALTHY),
                                                            (1, common_pb2.ENGINE_HEALTH_HEALTHY)]

        # A first engine that does not wait: every other one is read at once, as without a wait.
        await fake_control(n.engine_url(1), status="unhealthy")
        first_before = reads_of_kind(n, "first")
        resp = await n.ft.Status(nm.StatusRequest(instance_id=INSTANCE, endpoint_ids=[0, 1], wait_while=[UNHEALTHY],
                                                  settle_sec=0), timeout=10)
        assert [e.status for e in resp.engines] == [common_pb2.ENGINE_HEALTH_HEALTHY,
                                                    common_pb2.ENGINE_HEALTH_UNHEALTHY]
        assert reads_of_kind(n, "first") == first_before + 2


async def test_without_settle_a_waiting_first_engine_still_brings_a_read_of_every_engine(
        controller: FakeController, tmp_path: Path) -> None:
    async with running_nm(quiet_poller(controller.address, tmp_path)) as n:
        await both_unhealthy(n)
        before = [await status_reads(n.engine_url(r)) for r in (0, 1)]
        resp = await n.ft.Status(nm.StatusRequest(instance_id=INSTANCE, endpoint_ids=[0, 1], wait_while=[UNHEALTHY]),
                                 timeout=10)
        assert [e.status for e in resp.engines] == [common_pb2.ENGINE_HEALTH_UNHEALTHY] * 2
        assert [await status_reads(n.engine_url(r)) for r in (0, 1)] == [b + 1 for b in before]


async def test_answers_the_latest_reads_at_the_bound(controller: FakeController, tmp_path: Path) -> None:
    async with running_nm(quiet_poller(controller.address, tmp_path)) as n:
        await first_polls_done(n)
        await fake_control(n.engine_url(0), status="diagnosing")
        before = await status_reads(n.engine_url(0))
        resp = await n.ft.Status(nm.StatusRequest(instance_id=INSTANCE, endpoint_ids=[0], wait_while=[DIAGNOSING],
                                                  settle_sec=0.3), timeout=10)
        assert [e.status for e in resp.engines] == [common_pb2.ENGINE_HEALTH_DIAGNOSING]
        assert await status_reads(n.engine_url(0)) > before + 1  # read again while it waited


async def test_without_settle_one_read_of_each_engine(controller: FakeController, tmp_path: Path) -> None:
    async with running_nm(quiet_poller(controller.address, tmp_path)) as n:
        await first_polls_done(n)
        await fake_control(n.engine_url(0), status="unhealthy")
        before = await status_reads(n.engine_url(0))
        resp = await n.ft.Status(nm.StatusRequest(instance_id=INSTANCE, endpoint_ids=[0], wait_while=[UNHEALTHY]),
                                 timeout=10)
        assert [e.status for e in resp.engines] == [common_pb2.ENGINE_HEALTH_UNHEALTHY]
        assert await status_reads(n.engine_url(0)) == before + 1


async def test_a_caller_sets_the_longest_gap_between_reads(controller: FakeController, tmp_path: Path) -> None:
    """The same wait with reread_max_sec at its floor reads the waiting engine more often than with
    the NodeManager's own cadence (which doubles up to 0.2 s)."""
    async with running_nm(quiet_poller(controller.address, tmp_path)) as n:
        await first_polls_done(n)
        await fake_control(n.engine_url(0), status="diagnosing")
        reads = {}
        for cap in (0.0, 0.01):
            before = await status_reads(n.engine_url(0))
            resp = await n.ft.Status(nm.StatusRequest(instance_id=INSTANCE, endpoint_ids=[0], wait_while=[DIAGNOSING],
                                                      settle_sec=0.6, reread_max_sec=cap), timeout=10)
            assert [e.status for e in resp.engines] == [common_pb2.ENGINE_HEALTH_DIAGNOSING]
            reads[cap] = await status_reads(n.engine_url(0)) - before
        assert reads[0.01] > reads[0.0], reads


BAD = [
    ({"settle_sec": -1.0, "wait_while": [UNHEALTHY]}, "settle_sec -1.0 is outside [0, 60]"),
    ({"settle_sec": 61.0, "wait_while": [UNHEALTHY]}, "settle_sec 61.0 is outside [0, 60]"),
    ({"settle_sec": float("nan"), "wait_while": [UNHEALTHY]}, "settle_sec nan is outside [0, 60]"),
    ({"settle_sec": 1.0, "wait_while": [nm.EngineState(status=common_pb2.ENGINE_HEALTH_UNSPECIFIED)]},
     "wait_while status 0 is not an engine health"),
    ({"settle_sec": 1.0, "wait_while": [nm.EngineState(status=99)]}, "wait_while status 99 is not an engine health"),
    ({"settle_sec": 1.0, "wait_while": [nm.EngineState(status=common_pb2.ENGINE_HEALTH_HEALTHY, ft_state=42)]},
     "wait_while ft_state 42 is not an FT state"),
    ({"settle_sec": 1.0, "wait_while": [UNHEALTHY], "reread_max_sec": 0.001},
     "reread_max_sec 0.001 is outside [0.01, 0.2]"),
    ({"settle_sec": 1.0, "wait_while": [UNHEALTHY], "reread_max_sec": 5.0},
     "reread_max_sec 5.0 is outside [0.01, 0.2]"),
    ({"settle_sec": 1.0, "wait_while": [UNHEALTHY], "reread_max_sec": float("inf")},
     "reread_max_sec inf is outside [0.01, 0.2]"),
]


async def test_bad_bounds_and_states_are_refused_by_name(controller: FakeController, tmp_path: Path) -> None:
    async with running_nm(quiet_poller(controller.address, tmp_path)) as n:
        await first_polls_done(n)
        for fields, detail in BAD:
            err = await rpc_error(n.ft.Status(nm.StatusRequest(instance_id=INSTANCE, endpoint_ids=[0], **fields),
                                              timeout=5))
            assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and detail in err.details(), (fields, err.details())
        resp = await n.ft.Status(nm.StatusRequest(instance_id=INSTANCE, endpoint_ids=[0, 1]), timeout=5)
        assert [e.id for e in resp.engines] == [0, 1]  # still serving
