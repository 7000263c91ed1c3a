"""Engine lifecycle, process supervision and the Controller link over real gRPC with real
(fake-engine) processes: death reported once, never for intentional stops, start/stop/relaunch,
StopPod, the all-dead exit frozen by a guard, registration retried until the Controller answers."""

from __future__ import annotations

import asyncio
import logging
import sys
from pathlib import Path

import grpc
import pytest

from gen.motor.v1 import controller_pb2
from gen.motor.v1 import node_manager_pb2 as nm
from motor.common.ports import free_port
from motor.testing.fake_controller import FakeController
from motor.testing.waits import async_wait_for

from .nm_helpers import INSTANCE, POD_IP, fake_exit, nm_config, rpc_error, running_nm

pytestmark = pytest.mark.timeout(60)
ENGINE_DEAD = controller_pb2.SOFTWARE_FAULT_KIND_ENGINE_DEAD
DEAD = controller_pb2.SOFTWARE_FAULT_KIND_DEAD


def alive_in_last_heartbeat(fc: FakeController) -> list[int] | None:
    hb = fc.last_heartbeat()
    return None if hb is None else list(hb.alive_endpoint_ids)


async def test_death_reported_once_and_lifecycle_stops_never(controller: FakeController, tmp_path: Path) -> None:
    async with running_nm(nm_config(controller.address, tmp_path)) as n:
        lc = n.lifecycle
        await async_wait_for(lambda: alive_in_last_heartbeat(controller) == [0, 1], 5, "both alive")
        pid0 = n.agent.supervisor.slot(0).pid
        await fake_exit(n.engine_url(0), 3)
        got = await async_wait_for(lambda: controller.reports_of(0, ENGINE_DEAD), 5, "ENGINE_DEAD")
        assert f"engine process {pid0} exited with exit code 3" in got[0].evidence
        polls = n.agent.poller.polls
        await async_wait_for(lambda: alive_in_last_heartbeat(controller) == [1], 5, "rank 0 gone from heartbeat")
        assert 0 not in n.agent.poller.watched
        # Several poll periods (0.2 s) after the ENGINE_DEAD: rank 1's reads go on, rank 0's stopped.
        await async_wait_for(lambda: n.agent.poller.polls >= polls + 4, 5, "4 more status polls")
        assert len(controller.reports_of(0, ENGINE_DEAD)) == 1
        # Polling of the dead engine stopped with it: nothing after ENGINE_DEAD (no DEAD-by-timeout on
        # top of it). A poll racing the exit watcher may have seen the dying engine unreachable just
        # before (DEAD): true evidence of the same death.
        kinds = [r.kind for r in controller.reports_of(0)]
        assert kinds in ([ENGINE_DEAD], [DEAD, ENGINE_DEAD]), kinds

        described = await lc.DescribePod(nm.DescribePodRequest(), timeout=5)
        e0, e1 = described.engines
        assert (e0.running, e0.pid, e0.exit_code) == (False, 0, 3) and e1.running and e1.pid
        assert described.pod.pod_ip == POD_IP and list(described.pod.endpoint_ids) == [0, 1]
        assert described.instance_id == INSTANCE and e0.endpoint.device_infos[0].device_id == "Ascend910-0"

        stopped = await lc.StopEngines(nm.StopEnginesRequest(instance_id=INSTANCE, request_id="stop-1",
                                                             endpoint_ids=[1], grace_sec=2), timeout=10)
        assert list(stopped.stopped_ids) == [1]
        await async_wait_for(lambda: alive_in_last_heartbeat(controller) == [], 5, "empty heartbeat")
        assert controller.reports_of(1) == []

        started = await lc.StartEngines(nm.StartEnginesRequest(instance_id=INSTANCE, request_id="start-1"), timeout=20)
        assert [e.id for e in started.endpoints] == [0, 1] and all(e.business_port for e in started.endpoints)
        await async_wait_for(lambda: alive_in_last_heartbeat(controller) == [0, 1], 5, "both alive again")
        old = {i: n.agent.supervisor.slot(i).pid for i in (0, 1)}
        relaunched = await lc.RelaunchEngines(nm.RelaunchEnginesRequest(instance_id=INSTANCE, request_id="rl-1",
                                                                        grace_sec=2), timeout=20)
        assert [e.id for e in relaunched.endpoints] == [0, 1]
        new = {i: n.agent.supervisor.slot(i).pid for i in (0, 1)}
        assert all(new[i] and new[i] != old[i] for i in (0, 1))
        # The relaunched engines keep their addresses when the ports are still free.
        assert [e.business_port for e in relaunched.endpoints] == [e.business_port for e in started.endpoints]
        await asyncio.sleep(0.5)
        assert len(controller.reports_of(0, ENGINE_DEAD)) == 1 and controller.reports_of(1) == []
        # A relaunched engine is polled again and its faults reported afresh.
        assert sorted(n.agent.poller.watched) == [0, 1]


async def test_start_clears_the_retired_flag(controller: FakeController, tmp_path: Path) -> None:
    async with running_nm(nm_config(controller.address, tmp_path)) as n:
        await n.ft.Guard(nm.GuardRequest(instance_id=INSTANCE, request_id="r", lease_sec=30), timeout=5)
        await n.ft.Finalize(nm.FinalizeRequest(instance_id=INSTANCE, request_id="r", commit=True, retired_ids=[1]),
                            timeout=5)
        await async_wait_for(lambda: not n.agent.supervisor.slot(1).pid, 5, "retired engine stopped")
        await async_wait_for(lambda: alive_in_last_heartbeat(controller) == [0], 5, "retired gone")
        await n.lifecycle.StartEngines(nm.StartEnginesRequest(instance_id=INSTANCE, endpoint_ids=[1]), timeout=20)
        described = await n.lifecycle.DescribePod(nm.DescribePodRequest(), timeout=5)
        assert [(e.running, e.retired) for e in described.engines] == [(True, False), (True, False)]
        await async_wait_for(lambda: alive_in_last_heartbeat(controller) == [0, 1], 5, "rank 1 back")
        assert controller.reports_of(1) == []


async def test_all_engines_dead_exit_is_frozen_while_guarded(controller: FakeController, tmp_path: Path) -> None:
    async with running_nm(nm_config(controller.address, tmp_path, exit_when_all_engines_dead=True)) as n:
        await n.ft.Guard(nm.GuardRequest(instance_id=INSTANCE, request_id="g", lease_sec=1.5), timeout=5)
        await fake_exit(n.engine_url(0), 1)
        await fake_exit(n.engine_url(1), 1)
        await async_wait_for(lambda: controller.reports_of(0, ENGINE_DEAD) and controller.reports_of(1, ENGINE_DEAD),
                             5, "both dead")
        await asyncio.sleep(0.5)
        assert n.exits == []  # frozen by the live guard
        await async_wait_for(lambda: n.exits, 4, "exit after the lease expired")
        assert n.exits[0][0] == 3 and "[0, 1] died" in n.exits[0][1]


async def test_stop_pod_answers_then_exits(controller: FakeController, tmp_path: Path) -> None:
    async with running_nm(nm_config(controller.address, tmp_path)) as n:
        resp = await n.lifecycle.StopPod(nm.StopPodRequest(request_id="recycle-1", reason="all ranks retired",
                                                            instance_id=INSTANCE, pod_ip=POD_IP),
                                         timeout=5)
        assert resp.accepted
        await async_wait_for(lambda: n.exits, 2, "exit request")
        assert n.exits[0][0] == 0 and "recycle-1" in n.exits[0][1]


async def test_a_stop_goes_on_past_a_task_that_keeps_running_and_still_stops_the_engines(
        controller: FakeController, tmp_path: Path, caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("nodemanager.agent._TASK_END_BOUND_SEC", 0.3)
    release = asyncio.Event()

    async def swallows_its_cancellation() -> None:  # as a bug in a loop, or in a library under it, would
        while not release.is_set():
            try:
                await release.wait()
            except asyncio.CancelledError:
                continue

    async with running_nm(nm_config(controller.address, tmp_path)) as n:
        stuck = asyncio.create_task(swallows_its_cancellation(), name="stuck-loop")
        n.agent._tasks.append(stuck)
        engines = [n.agent.supervisor.slot(i).proc for i in (0, 1)]
        assert all(p is not None and p.running for p in engines)
        caplog.set_level(logging.ERROR, logger="motor.common.waiting")
    # The harness asserts no engine outlived the stop; the stuck task is named with where it waits.
    assert all(p is not None and not p.running for p in engines)
    assert f"instance={INSTANCE} pod={POD_IP} stop: task stuck-loop did not end within 0.3s" in caplog.text
    assert "swallows_its_cancellation" in caplog.text
    release.set()
    await stuck


async def test_the_engines_stop_even_when_the_grpc_servers_stop_fails(controller: FakeController, tmp_path: Path,
                                                                      caplog: pytest.LogCaptureFixture) -> None:
    async with running_nm(nm_config(controller.address, tmp_path)) as n:
        server_stop = n.service._grpc.stop

        async def fails(grace_sec: float | None = None) -> None:
            await server_stop(grace_sec)
            raise RuntimeError("server stop failed")

        n.service._grpc.stop = fails  # type: ignore[method-assign]
        engines = [n.agent.supervisor.slot(i).proc for i in (0, 1)]
    assert all(p is not None and not p.running for p in engines)
    assert f"nodemanager pod={POD_IP} gRPC server stop failed; stopping the pod anyway" in caplog.text


async def test_engines_that_cannot_start_are_reported_and_the_pod_still_registers(
    controller: FakeController, tmp_path: Path
) -> None:
    cfg = nm_config(controller.address, tmp_path, engine_command=[sys.executable, "-c", "import sys; sys.exit(5)"])
    async with running_nm(cfg) as n:
        await async_wait_for(lambda: controller.registers, 5, "registration")
        for rank in (0, 1):
            got = await async_wait_for(lambda rank=rank: controller.reports_of(rank, ENGINE_DEAD), 5, "ENGINE_DEAD")
            assert "exit code 5 before it was ready" in got[0].evidence
        await async_wait_for(lambda: alive_in_last_heartbeat(controller) == [], 5, "empty heartbeat")
        err = await rpc_error(n.lifecycle.StartEngines(nm.StartEnginesRequest(instance_id=INSTANCE), timeout=10))
        assert err.code() == grpc.StatusCode.UNAVAILABLE and "rank 0: engine of rank 0 exited before it was ready" in err.details()
    mark = len(controller.reports_of(0, ENGINE_DEAD))
    cfg = nm_config(controller.address, tmp_path, engine_command=["/nonexistent/engine-binary", "{port}"])
    async with running_nm(cfg):
        got = await async_wait_for(lambda: controller.reports_of(0, ENGINE_DEAD)[mark:], 5, "spawn failure")
        assert "engine could not be started" in got[-1].evidence and "/nonexistent/engine-binary" in got[-1].evidence


async def test_engine_not_ready_in_time_is_stopped_and_reported(controller: FakeController, tmp_path: Path) -> None:
    cfg = nm_config(controller.address, tmp_path, ranks=(0,), dp_size=1, engine_ready_timeout_sec=1.0,
                    engine_command=[sys.executable, "-c", "import time; time.sleep(60)"])
    async with running_nm(cfg) as n:
        got = await async_wait_for(lambda: controller.reports_of(0, ENGINE_DEAD), 5, "ENGINE_DEAD")
        assert "before it was ready; not ready (http://127.0.0.2:" in got[0].evidence
        assert "/health not 200) within 1s; stopped" in got[0].evidence
        await async_wait_for(lambda: controller.registers, 5, "registration despite the failed engine")
        assert n.agent.supervisor.slot(0).pid == 0


async def test_registration_is_retried_until_the_controller_answers(tmp_path: Path, caplog) -> None:
    port = free_port("127.0.0.1")
    fc = FakeController(proxy_enabled=True, heartbeat_interval_sec=0.2)
    fc.refuse_registrations = 1
    caplog.set_level(logging.WARNING, logger="nodemanager.controller_link")

    def failed_registrations() -> int:
        return sum("register attempt" in r.getMessage() and "failed" in r.getMessage() for r in caplog.records)

    try:
        async with running_nm(nm_config(f"127.0.0.1:{port}", tmp_path)) as n:
            # The Controller is down: the NodeManager keeps retrying (no counter of failed attempts is
            # exposed, so its warnings are counted) and keeps serving meanwhile.
            await async_wait_for(lambda: failed_registrations() >= 3, 10, "3 failed registration attempts")
            assert n.agent.link.registrations == 0
            described = await n.lifecycle.DescribePod(nm.DescribePodRequest(), timeout=5)
            assert all(e.running for e in described.engines)
            fc.start(port=port)
            await async_wait_for(lambda: len(fc.registers) >= 2, 5, "refused, then accepted registration")
            await async_wait_for(lambda: fc.heartbeats, 5, "heartbeat")
            reg = fc.registers[-1]
            assert reg.pod.node_manager_address == f"{POD_IP}:{n.service.grpc_port}"
            assert [e.id for e in reg.endpoints] == [0, 1] and reg.dp_size == 2
            # Controller restarts and forgets the pod: heartbeat gets known=false, the pod registers again.
            fc.stop()
            await asyncio.sleep(0.5)
            count = len(fc.registers)
            fc2 = FakeController(proxy_enabled=True, heartbeat_interval_sec=0.2)
            fc2.start(port=port)
            try:
                await async_wait_for(lambda: fc2.registers, 8, "re-registration after controller restart")
                assert count == len(fc.registers)
                await async_wait_for(lambda: fc2.heartbeats and list(fc2.heartbeats[-1].alive_endpoint_ids) == [0, 1],
                                     5, "heartbeats resume")
            finally:
                fc2.stop()
    finally:
        fc.stop()
