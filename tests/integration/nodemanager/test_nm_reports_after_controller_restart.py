"""Fault reports reach a Controller that restarted, over real gRPC with fake-engine processes: a
rank that is DEAD with its API up is reported again to a Controller that came back from its store
(it knows the pod, holds no evidence) and to one that forgot the pod (the pod registers again); a
report made while the Controller was down is delivered once it answers again."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from gen.motor.v1 import controller_pb2
from motor.testing.fake_controller import FakeController
from motor.testing.waits import async_wait_for
from .nm_helpers import POD_IP, fake_control, nm_config, running_nm

pytestmark = pytest.mark.timeout(90)

DEAD = controller_pb2.SOFTWARE_FAULT_KIND_DEAD


@asynccontextmanager
async def restarted(old: FakeController, *, down_sec: float, restored: bool) -> AsyncIterator[FakeController]:
    """`old` stops; after `down_sec` a fresh Controller starts on its port, knowing the pod when it
    came back from its store (`restored`), with no evidence either way."""
    host, port = old.host, old.port
    old.stop()
    await asyncio.sleep(down_sec)
    new = FakeController(proxy_enabled=True, heartbeat_interval_sec=0.2, known_pods=(POD_IP,) if restored else ())
    new.start(host, port)
    try:
        yield new
    finally:
        new.stop()


@pytest.mark.parametrize("restored", [True, False], ids=["restored-from-store", "forgot-the-pod"])
async def test_a_restarted_controller_hears_about_a_dead_rank_again(controller: FakeController, tmp_path: Path,
                                                                  restored: bool) -> None:
    async with running_nm(nm_config(controller.address, tmp_path)) as n:
        await async_wait_for(lambda: controller.registers, 10, "the first registration")
        await fake_control(n.engine_url(1), status="dead")  # its API still answers
        await async_wait_for(lambda: controller.reports_of(1, DEAD), 10, "rank 1's DEAD report")
        async with restarted(controller, down_sec=0.8, restored=restored) as new:
            report = await async_wait_for(lambda: new.reports_of(1, DEAD), 15,
                                          "rank 1's DEAD reported again to the restarted Controller")
            assert report[0].pod_ip == POD_IP
            assert len(new.registers) == (0 if restored else 1)
            assert new.reports_of(0) == []


async def test_a_report_made_while_the_controller_is_down_is_delivered_when_it_is_back(
        controller: FakeController, tmp_path: Path) -> None:
    controller.heartbeat_interval_sec = 30.0  # no heartbeat in the test's time: the report's own retries deliver it
    async with running_nm(nm_config(controller.address, tmp_path, heartbeat_interval_sec=30.0)) as n:
        await async_wait_for(lambda: controller.registers, 10, "the first registration")
        host, port = controller.host, controller.port
        controller.stop()
        await fake_control(n.engine_url(1), status="dead")
        attempts = n.agent.config.fault_report_attempts
        await async_wait_for(
            lambda: n.agent.metrics.registry.get_sample_value("motor_nodemanager_fault_report_retries_total"),
            10, "the report's quick attempts spent", until=lambda retried: (retried or 0) >= attempts)
        assert n.agent.reporter.pending == 1 and n.agent.reporter.lost == 0
        back = FakeController(proxy_enabled=True, heartbeat_interval_sec=30.0, known_pods=(POD_IP,))
        back.start(host, port)
        try:
            await async_wait_for(lambda: back.reports_of(1, DEAD), 10, "rank 1's owed DEAD report")
            await async_wait_for(lambda: n.agent.reporter.pending == 0, 5, "the report acknowledged")
            assert n.agent.reporter.lost == 0
        finally:
            back.stop()
