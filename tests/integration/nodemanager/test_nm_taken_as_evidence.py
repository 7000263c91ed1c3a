"""A Status call flagged `taken_as_evidence` over real gRPC with fake-engine processes: the
NodeManager counts the UNHEALTHY and DEAD entries it answered as reported, so its own poll sends no
report of the same entry, while an entry read without the flag is reported and a taken fault still
recovers; under a round's guard that RECOVERED waits, and the round's commit drops it (so the
Controller's snapshot pull gets no verdict twice, nor a RECOVERED per survivor)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gen.motor.v1 import common_pb2, controller_pb2, node_manager_pb2 as nm
from motor.testing.fake_controller import FakeController
from motor.testing.waits import async_wait_for

from .nm_helpers import INSTANCE, fake_control, first_polls_done, quiet_poller, running_nm

pytestmark = pytest.mark.timeout(60)

UNHEALTHY = controller_pb2.SOFTWARE_FAULT_KIND_UNHEALTHY
RECOVERED = controller_pb2.SOFTWARE_FAULT_KIND_RECOVERED


async def both_unhealthy_rank1_taken(n) -> nm.StatusResponse:
    """Both engines unhealthy after the poller's first reads; rank 1 read by a Status call flagged
    taken_as_evidence, rank 0 left to the poller."""
    await first_polls_done(n)
    for rank in (0, 1):
        await fake_control(n.engine_url(rank), status="unhealthy")
    return await n.ft.Status(nm.StatusRequest(instance_id=INSTANCE, endpoint_ids=[1], taken_as_evidence=True),
                             timeout=10)


async def test_entries_taken_as_evidence_are_not_reported_again(controller: FakeController, tmp_path: Path) -> None:
    async with running_nm(quiet_poller(controller.address, tmp_path)) as n:
        resp = await both_unhealthy_rank1_taken(n)
        poller = n.agent.poller
        assert [(e.id, e.status) for e in resp.engines] == [(1, common_pb2.ENGINE_HEALTH_UNHEALTHY)]
        assert await poller.poll_once(1) is None, "rank 1's verdict was taken: not reported"
        assert await poller.poll_once(0) == UNHEALTHY, "rank 0 was not read by the Controller: reported"
        # One report worker delivers in order: once rank 0's is in, a rank 1 report would be too.
        await async_wait_for(lambda: controller.reports_of(0, UNHEALTHY), 10, "rank 0's UNHEALTHY report")
        assert controller.reports_of(1) == []
        assert n.agent.metrics.registry.get_sample_value("motor_nodemanager_fault_reports_taken_total",
                                                         {"kind": "UNHEALTHY"}) == 1
        await fake_control(n.engine_url(1), status="healthy")
        assert await poller.poll_once(1) == RECOVERED, "a taken fault still recovers"
        await async_wait_for(lambda: controller.reports_of(1, RECOVERED), 10, "rank 1's RECOVERED report")


async def test_without_the_flag_a_status_read_leaves_the_poller_alone(controller: FakeController,
                                                                      tmp_path: Path) -> None:
    async with running_nm(quiet_poller(controller.address, tmp_path)) as n:
        await first_polls_done(n)
        await fake_control(n.engine_url(1), status="unhealthy")
        await n.ft.Status(nm.StatusRequest(instance_id=INSTANCE, endpoint_ids=[1]), timeout=10)
        assert await n.agent.poller.poll_once(1) == UNHEALTHY
        await async_wait_for(lambda: controller.reports_of(1, UNHEALTHY), 10, "rank 1's UNHEALTHY report")


async def test_a_committed_round_owes_no_recovered_for_what_the_controller_took(controller: FakeController,
                                                                                tmp_path: Path) -> None:
    async with running_nm(quiet_poller(controller.address, tmp_path)) as n:
        await both_unhealthy_rank1_taken(n)
        poller = n.agent.poller
        assert await poller.poll_once(0) == UNHEALTHY  # rank 0: the NodeManager's own report
        await n.ft.Guard(nm.GuardRequest(instance_id=INSTANCE, request_id="sd-1", lease_sec=30), timeout=10)
        for rank in (0, 1):
            await fake_control(n.engine_url(rank), status="healthy")  # the round's rebuild
        assert await poller.poll_once(1) is None, "taken, and the round holds the guard: RECOVERED waits"
        assert await poller.poll_once(0) == RECOVERED, "its own report is cleared by its own RECOVERED"
        await n.ft.Finalize(nm.FinalizeRequest(instance_id=INSTANCE, request_id="sd-1", commit=True), timeout=10)
        assert await poller.poll_once(1) is None, "the commit superseded the taken verdict: nothing owed"
        await async_wait_for(lambda: controller.reports_of(0, RECOVERED), 10, "rank 0's RECOVERED report")
        assert controller.reports_of(1) == []
