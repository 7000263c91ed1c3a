"""A pod stopped by StopPod stays stopped across a restart of its NodeManager in the same pod (the
same log_dir, as the shipped StatefulSet's in-place restart keeps it), over real gRPC with
fake-engine processes: the restarted NodeManager launches none of the stopped ranks, registers
with them retired and heartbeats none alive, until the Controller starts them again."""

from __future__ import annotations

from pathlib import Path

import pytest

from gen.motor.v1 import node_manager_pb2 as nm
from motor.testing.fake_controller import FakeController
from motor.testing.waits import async_wait_for
from .nm_helpers import INSTANCE, POD_IP, nm_config, running_nm

pytestmark = pytest.mark.timeout(90)


async def test_a_stopped_pod_restarted_in_place_stays_stopped_until_started_again(controller: FakeController,
                                                                                   tmp_path: Path) -> None:
    config = nm_config(controller.address, tmp_path)
    async with running_nm(config) as n:
        await async_wait_for(lambda: controller.registers, 10, "the first registration")
        await n.lifecycle.StopPod(nm.StopPodRequest(request_id="sd-9", reason="every DP rank of the pod is "
                                                    "committed dead", instance_id=INSTANCE, pod_ip=POD_IP), timeout=5)
        await async_wait_for(lambda: n.exits, 2, "exit request")
        assert n.exits[0][0] == 0
    registered_before = len(controller.registers)

    async with running_nm(config) as n:  # the container restarted in place
        register = (await async_wait_for(lambda: controller.registers[registered_before:], 10,
                                         "the restarted NodeManager's registration"))[0]
        assert sorted(register.retired_ids) == [0, 1]
        # Every endpoint at a real port (the one its launch takes): the Controller refuses port 0.
        assert all(0 < e.business_port <= 65535 for e in register.endpoints), register.endpoints
        described = await n.lifecycle.DescribePod(nm.DescribePodRequest(), timeout=5)
        assert [(e.endpoint.id, e.running, e.retired, e.pid) for e in described.engines] == \
            [(0, False, True, 0), (1, False, True, 0)]
        mark = len(controller.heartbeats)
        heartbeat = (await async_wait_for(lambda: controller.heartbeats_since(mark), 5, "a heartbeat"))[0]
        assert list(heartbeat.alive_endpoint_ids) == []
        assert n.exits == []
        assert n.agent.metrics.registry.get_sample_value("motor_nodemanager_stopped_ranks") == 2

        # The Controller brings the ranks back (a reconfiguration, a scale-up): the stop is over.
        await n.lifecycle.StartEngines(nm.StartEnginesRequest(instance_id=INSTANCE, request_id="reconf-1"),
                                       timeout=30)
        described = await n.lifecycle.DescribePod(nm.DescribePodRequest(), timeout=5)
        assert [(e.running, e.retired) for e in described.engines] == [(True, False), (True, False)]
        assert n.agent.metrics.registry.get_sample_value("motor_nodemanager_stopped_ranks") == 0

    async with running_nm(config) as n:  # a later restart launches every rank
        described = await n.lifecycle.DescribePod(nm.DescribePodRequest(), timeout=5)
        assert [(e.running, e.retired) for e in described.engines] == [(True, False), (True, False)]


async def test_a_replacement_pod_launches_nothing_and_registers_its_ranks_retired_until_started(
        controller: FakeController, tmp_path: Path) -> None:
    config = nm_config(controller.address, tmp_path, replacement_pod=True)
    async with running_nm(config) as n:
        register = (await async_wait_for(lambda: controller.registers, 10, "the replacement's registration"))[0]
        assert sorted(register.retired_ids) == [0, 1]
        ports = {e.id: e.business_port for e in register.endpoints}
        assert all(0 < p <= 65535 for p in ports.values()), ports
        described = await n.lifecycle.DescribePod(nm.DescribePodRequest(), timeout=5)
        assert [(e.running, e.retired, e.pid) for e in described.engines] == [(False, True, 0), (False, True, 0)]
        mark = len(controller.heartbeats)
        heartbeat = (await async_wait_for(lambda: controller.heartbeats_since(mark), 5, "a heartbeat"))[0]
        assert list(heartbeat.alive_endpoint_ids) == [] and n.exits == []

        await n.lifecycle.StartEngines(nm.StartEnginesRequest(instance_id=INSTANCE, request_id="restore-1"),
                                       timeout=30)
        described = await n.lifecycle.DescribePod(nm.DescribePodRequest(), timeout=5)
        assert [(e.running, e.retired) for e in described.engines] == [(True, False), (True, False)]
        assert {e.endpoint.id: e.endpoint.business_port for e in described.engines} == ports  # launched there
