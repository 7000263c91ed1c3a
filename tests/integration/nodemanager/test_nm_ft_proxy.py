"""The FT proxy over real gRPC with real (fake-engine) processes launched by the NodeManager:
status identity contract, malformed and hanging engines, apply forwarding, guard, finalize, bad
input, proxy off. Engines here are the light fake engine (motor.testing.fake_engine)."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import grpc
import pytest

from gen.motor.v1 import common_pb2, controller_pb2, node_manager_pb2 as nm
from motor.testing.fake_controller import FakeController
from motor.testing.waits import async_wait_for

from .nm_helpers import INSTANCE, POD_IP, fake_applies, fake_control, fake_polled, nm_config, rpc_error, running_nm


pytestmark = pytest.mark.timeout(60)
SCALE_DOWN = nm.INSTRUCTION_SCALE_DOWN


async def test_status_reads_every_engine_in_request_order(controller: FakeController, tmp_path: Path) -> None:
    async with running_nm(nm_config(controller.address, tmp_path, ranks=(3, 5), dp_size=6)) as n:
        await fake_control(n.engine_url(5), status="unhealthy", fault_info="peer 1 gone", ft_state="weird")
        resp = await n.ft.Status(nm.StatusRequest(instance_id=INSTANCE, endpoint_ids=[5, 3], request_id="s1"), timeout=5)
        assert [e.id for e in resp.engines] == [5, 3]
        e5, e3 = resp.engines
        assert e5.status == common_pb2.ENGINE_HEALTH_UNHEALTHY and e5.fault_info == "peer 1 gone"
        assert e5.ft_state == common_pb2.FT_STATE_UNKNOWN and e5.raw_ft_state == "weird"
        assert e3.status == common_pb2.ENGINE_HEALTH_HEALTHY and e3.ft_state == common_pb2.FT_STATE_UNSPECIFIED
        assert abs(e3.observed_at_unix_sec - time.time()) < 5


BAD_ANSWERS = [
    ("wrong_id", grpc.StatusCode.FAILED_PRECONDITION, "engine identity contract violated: endpoint 1:",
     "the single entry has id 101, expected 1"),
    ("duplicate", grpc.StatusCode.FAILED_PRECONDITION, "engine identity contract violated: endpoint 1:",
     "duplicate engine ids [1]"),
    ("extra", grpc.StatusCode.FAILED_PRECONDITION, "engine identity contract violated: endpoint 1:",
     "unknown engine ids [51] beside it"),
    ("empty", grpc.StatusCode.FAILED_PRECONDITION, "engine identity contract violated: endpoint 1:", "no engines entry"),
    ("garbage", grpc.StatusCode.FAILED_PRECONDITION, "engine status malformed: endpoint 1:",
     "status body is not JSON: received '<html>not json'"),
    ("not_object", grpc.StatusCode.FAILED_PRECONDITION, "engine status malformed: endpoint 1:",
     "not a JSON object: received '[1, 2]'"),
    ("bad_status", grpc.StatusCode.FAILED_PRECONDITION, "engine status malformed: endpoint 1:",
     "engines[0].status is zombie"),
    ("http500", grpc.StatusCode.FAILED_PRECONDITION, "engine status malformed: endpoint 1:", "HTTP 500"),
    ("hang", grpc.StatusCode.DEADLINE_EXCEEDED, "engine timed out: endpoint 1:", "did not answer within 0.5s"),
]


async def test_bad_engine_answers_fail_status_and_are_reported_once(controller: FakeController, tmp_path: Path) -> None:
    """One engine answers each bad shape in turn: Status fails with the mapped code and a message
    naming the endpoint and what was received; the poller reports it once (PROTOCOL_ERROR, or DEAD
    for the first timeout), then RECOVERED once the engine is back; the other engine is untouched."""
    async with running_nm(nm_config(controller.address, tmp_path)) as n:
        url = n.engine_url(1)
        for mode, code, prefix, detail in BAD_ANSWERS:
            mark = len(controller.reports_of(1))
            await fake_control(url, status_mode=mode, hang_sec=30)
            err = await rpc_error(n.ft.Status(nm.StatusRequest(instance_id=INSTANCE, endpoint_ids=[0, 1]), timeout=5))
            assert err.code() == code, (mode, err.code(), err.details())
            assert err.details().startswith(prefix) and detail in err.details(), (mode, err.details())
            kind = controller_pb2.SOFTWARE_FAULT_KIND_DEAD if mode == "hang" else \
                controller_pb2.SOFTWARE_FAULT_KIND_PROTOCOL_ERROR
            await async_wait_for(lambda: controller.reports_of(1)[mark:], 5, f"{mode} report")
            await asyncio.sleep(0.7)  # several more polls of the same answer
            await fake_control(url, status_mode="ok")
            recovered = controller_pb2.SOFTWARE_FAULT_KIND_RECOVERED
            await async_wait_for(lambda: [r for r in controller.reports_of(1)[mark:] if r.kind == recovered], 5,
                                 f"{mode} recovered")
            reports = controller.reports_of(1)[mark:]
            assert [r.kind for r in reports] == [kind, recovered], (mode, reports)
            assert reports[0].pod_ip == POD_IP and reports[0].instance_id == INSTANCE
            assert reports[0].evidence.startswith(prefix) and detail in reports[0].evidence
        assert controller.reports_of(0) == []
        resp = await n.ft.Status(nm.StatusRequest(instance_id=INSTANCE, endpoint_ids=[1, 0]), timeout=5)
        assert [e.id for e in resp.engines] == [1, 0]


async def test_poller_reports_unhealthy_dead_once_each(controller: FakeController, tmp_path: Path) -> None:
    async with running_nm(nm_config(controller.address, tmp_path)) as n:
        url = n.engine_url(0)
        await fake_control(url, status="unhealthy", fault_info="collective failed")
        got = await async_wait_for(lambda: controller.reports_of(0, controller_pb2.SOFTWARE_FAULT_KIND_UNHEALTHY), 5, "U")
        assert got[0].status.status == common_pb2.ENGINE_HEALTH_UNHEALTHY and got[0].status.fault_info == "collective failed"
        await fake_control(url, status="dead")
        await async_wait_for(lambda: controller.reports_of(0, controller_pb2.SOFTWARE_FAULT_KIND_DEAD), 5, "D")
        await asyncio.sleep(0.8)
        kinds = [r.kind for r in controller.reports_of(0)]
        assert kinds == [controller_pb2.SOFTWARE_FAULT_KIND_UNHEALTHY, controller_pb2.SOFTWARE_FAULT_KIND_DEAD]


async def test_diagnosing_is_passed_through_and_never_reported(controller: FakeController, tmp_path: Path) -> None:
    """vLLM's transient state while it queries its all2all mask: Status answers DIAGNOSING (no protocol
    error); the poller reports nothing while it lasts, and the verdict after it is reported even when
    it reads like the last one (vLLM's fault_info is only the exception's type name)."""
    async with running_nm(nm_config(controller.address, tmp_path)) as n:
        url = n.engine_url(0)
        await fake_control(url, status="diagnosing")
        resp = await n.ft.Status(nm.StatusRequest(instance_id=INSTANCE, endpoint_ids=[0, 1]), timeout=5)
        assert [e.status for e in resp.engines] == [common_pb2.ENGINE_HEALTH_DIAGNOSING, common_pb2.ENGINE_HEALTH_HEALTHY]
        await fake_polled(url, 3)
        assert controller.reports_of(0) == []
        await fake_control(url, status="unhealthy", fault_info="peer 1 gone")
        await async_wait_for(lambda: controller.reports_of(0), 5, "UNHEALTHY report")
        await fake_control(url, status="diagnosing")
        await fake_polled(url, 3)
        await fake_polled(url, 3)
        assert len(controller.reports_of(0)) == 1
        await fake_control(url, status="unhealthy", fault_info="peer 1 gone")  # a new fault that reads alike
        await async_wait_for(lambda: len(controller.reports_of(0)) == 2, 5, "second UNHEALTHY report")
        await fake_polled(url, 3)
        assert [r.kind for r in controller.reports_of(0)] == [controller_pb2.SOFTWARE_FAULT_KIND_UNHEALTHY] * 2


async def test_apply_forwards_once_with_same_request_id_and_store_port(controller: FakeController, tmp_path: Path) -> None:
    cfg = nm_config(controller.address, tmp_path, ranks=(1, 2, 3), dp_size=4, dp_store_port_base=31000)
    async with running_nm(cfg) as n:
        await fake_control(n.engine_url(3), apply_mode="accept_server_id")
        grant = await n.ft.Guard(nm.GuardRequest(instance_id=INSTANCE, request_id="rid-A", lease_sec=30), timeout=5)
        assert grant.request_id == "rid-A" and not grant.renewed
        req = nm.ApplyRequest(instance_id=INSTANCE, request_id="rid-A", instruction=SCALE_DOWN, removed_dp_ranks=[2, 0],
                              dp_master_ip=POD_IP, dp_master_rank=1, endpoint_ids=[3, 1])
        before = time.time()
        resp = await n.ft.Apply(req, timeout=5)
        assert resp.accepted and resp.dp_store_port == 31002
        assert [r.endpoint_id for r in resp.results] == [3, 1]
        assert all(r.sent_at_unix_sec >= before for r in resp.results)  # the round's apply skew is built on it
        expected = {"instruction": "scale_down", "request_id": "rid-A",
                    "params": {"removed_dp_ranks": [0, 2], "dp_master_ip": POD_IP, "dp_store_port": 31002}}
        for r in resp.results:
            assert r.accepted and r.http_status == 202 and json.loads(r.request_body) == expected
        r3, r1 = resp.results
        assert r1.engine_request_id == "rid-A"
        assert r3.engine_request_id and r3.engine_request_id != "rid-A"  # the engine generated its own
        for rank in (1, 3):
            seen = await fake_applies(n.engine_url(rank))
            assert len(seen) == 1 and seen[0]["content_type"] == "application/json"
            assert seen[0]["body"] == resp.results[0].request_body
        assert await fake_applies(n.engine_url(2)) == []
        # Never twice.
        err = await rpc_error(n.ft.Apply(req, timeout=5))
        assert err.code() == grpc.StatusCode.ALREADY_EXISTS and "'rid-A'" in err.details()
        assert len(await fake_applies(n.engine_url(1))) == 1


async def test_apply_uses_the_store_port_the_controller_chose(controller: FakeController, tmp_path: Path) -> None:
    """The Controller's port (from the new master's pod) wins over this pod's base."""
    cfg = nm_config(controller.address, tmp_path, ranks=(1, 2), dp_size=4, dp_store_port_base=31000)
    async with running_nm(cfg) as n:
        await n.ft.Guard(nm.GuardRequest(instance_id=INSTANCE, request_id="rid-P", lease_sec=30), timeout=5)
        bad = nm.ApplyRequest(instance_id=INSTANCE, request_id="rid-P", instruction=SCALE_DOWN, removed_dp_ranks=[0],
                              dp_master_ip=POD_IP, dp_master_rank=1, endpoint_ids=[1, 2], dp_store_port=80)
        err = await rpc_error(n.ft.Apply(bad, timeout=5))
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and "dp_store_port 80" in err.details()
        good = nm.ApplyRequest(instance_id=INSTANCE, request_id="rid-P", instruction=SCALE_DOWN, removed_dp_ranks=[0],
                               dp_master_ip=POD_IP, dp_master_rank=1, endpoint_ids=[1, 2], dp_store_port=42001)
        resp = await n.ft.Apply(good, timeout=5)
        assert resp.dp_store_port == 42001
        assert all(json.loads(r.request_body)["params"]["dp_store_port"] == 42001 for r in resp.results)


async def test_apply_not_accepted_by_any_engine(controller: FakeController, tmp_path: Path) -> None:
    async with running_nm(nm_config(controller.address, tmp_path, ranks=(0, 1, 2), dp_size=4)) as n:
        await fake_control(n.engine_url(0), apply_mode="reject_list")
        await fake_control(n.engine_url(1), apply_mode="reject_str")
        await fake_control(n.engine_url(2), apply_mode="hang", hang_sec=30)
        await n.ft.Guard(nm.GuardRequest(instance_id=INSTANCE, request_id="rid-B", lease_sec=30), timeout=5)
        resp = await n.ft.Apply(nm.ApplyRequest(instance_id=INSTANCE, request_id="rid-B", instruction=SCALE_DOWN,
                                                removed_dp_ranks=[3], dp_master_ip=POD_IP, dp_master_rank=0,
                                                endpoint_ids=[0, 1, 2]), timeout=5)
        assert not resp.accepted
        r0, r1, r2 = resp.results
        assert (r0.accepted, r0.http_status, r0.message) == (False, 400, "HTTP 400: body: Field required")
        assert (r1.accepted, r1.http_status, r1.message) == (False, 400, "HTTP 400: Invalid instruction")
        assert (r2.accepted, r2.http_status) == (False, 0) and "did not answer within 0.5s" in r2.message
        assert all(json.loads(r.request_body)["request_id"] == "rid-B" for r in resp.results)
        # Not retried.
        assert [len(await fake_applies(n.engine_url(r))) for r in (0, 1, 2)] == [1, 1, 1]


async def test_guard_renew_conflict_expiry_and_finalize(controller: FakeController, tmp_path: Path) -> None:
    async with running_nm(nm_config(controller.address, tmp_path)) as n:
        ft = n.ft
        first = await ft.Guard(nm.GuardRequest(instance_id=INSTANCE, request_id="r1", lease_sec=0.6), timeout=5)
        asked_at = time.monotonic()
        assert not first.renewed and 0 < first.lease_remaining_sec <= 0.6
        g = await ft.Guard(nm.GuardRequest(instance_id=INSTANCE, request_id="r1", lease_sec=1.5), timeout=5)
        # Renewed to the later deadline: what remains now beats what the first lease had left.
        assert g.renewed and first.lease_remaining_sec - (time.monotonic() - asked_at) < g.lease_remaining_sec <= 1.5
        err = await rpc_error(ft.Guard(nm.GuardRequest(instance_id=INSTANCE, request_id="r2", lease_sec=10), timeout=5))
        assert err.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "'r1'" in err.details() and "'r2'" in err.details() and "s;" in err.details()
        described = await n.lifecycle.DescribePod(nm.DescribePodRequest(), timeout=5)
        assert described.guard_request_id == "r1" and 0 < described.guard_remaining_sec <= 1.5
        # Stale finalize: another id never releases r1's guard.
        err = await rpc_error(ft.Finalize(nm.FinalizeRequest(instance_id=INSTANCE, request_id="r0", commit=False), timeout=5))
        assert err.code() == grpc.StatusCode.FAILED_PRECONDITION and "stale finalize" in err.details()
        await async_wait_for(lambda: n.agent.guard.live_holder() is None, 10, "r1's lease expired")
        assert (await n.lifecycle.DescribePod(nm.DescribePodRequest(), timeout=5)).guard_request_id == ""
        g = await ft.Guard(nm.GuardRequest(instance_id=INSTANCE, request_id="r2", lease_sec=10), timeout=5)
        assert g.request_id == "r2" and not g.renewed
        err = await rpc_error(ft.Finalize(nm.FinalizeRequest(instance_id=INSTANCE, request_id="r1", commit=True,
                                                            retired_ids=[1]), timeout=5))
        assert err.code() == grpc.StatusCode.FAILED_PRECONDITION and "'r1' is not the guard holder 'r2'" in err.details()
        done = await ft.Finalize(nm.FinalizeRequest(instance_id=INSTANCE, request_id="r2", commit=False), timeout=5)
        assert done.guard_released and list(done.retired_ids) == []
        err = await rpc_error(ft.Finalize(nm.FinalizeRequest(instance_id=INSTANCE, request_id="r2", commit=False), timeout=5))
        assert err.code() == grpc.StatusCode.FAILED_PRECONDITION and "none is held" in err.details()


async def test_commit_retires_ids_from_heartbeat_reports_and_processes(controller: FakeController, tmp_path: Path) -> None:
    async with running_nm(nm_config(controller.address, tmp_path, ranks=(0, 1, 2), dp_size=3)) as n:
        await async_wait_for(lambda: controller.last_heartbeat() and list(controller.last_heartbeat().alive_endpoint_ids) == [0, 1, 2], 5, "hb")
        pid1 = n.agent.supervisor.slot(1).pid
        await fake_control(n.engine_url(1), status="dead")
        await async_wait_for(lambda: controller.reports_of(1, controller_pb2.SOFTWARE_FAULT_KIND_DEAD), 5, "D")
        await n.ft.Guard(nm.GuardRequest(instance_id=INSTANCE, request_id="rc", lease_sec=30), timeout=5)
        done = await n.ft.Finalize(nm.FinalizeRequest(instance_id=INSTANCE, request_id="rc", commit=True,
                                                      retired_ids=[1]), timeout=5)
        assert list(done.retired_ids) == [1] and done.guard_released
        mark = len(controller.heartbeats)
        await async_wait_for(lambda: [list(h.alive_endpoint_ids) for h in controller.heartbeats_since(mark)][-1:] == [[0, 2]],
                             5, "heartbeat without the retired id")
        # The retired engine's process is stopped, its exit not reported, and it is no longer polled.
        await async_wait_for(lambda: not n.agent.supervisor.slot(1).pid, 5, "retired engine stopped")
        import psutil
        assert not psutil.pid_exists(pid1) or psutil.Process(pid1).status() == psutil.STATUS_ZOMBIE
        await asyncio.sleep(0.6)
        assert [r.kind for r in controller.reports_of(1)] == [controller_pb2.SOFTWARE_FAULT_KIND_DEAD]
        assert 1 not in n.agent.poller.watched
        err = await rpc_error(n.ft.Status(nm.StatusRequest(instance_id=INSTANCE, endpoint_ids=[1]), timeout=5))
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and "endpoint_ids [1] were retired" in err.details()
        # Re-registration carries the retired ids.
        controller.forget(POD_IP)
        await async_wait_for(lambda: len(controller.registers) >= 2, 5, "re-register")
        assert list(controller.registers[-1].retired_ids) == [1]
        # Every local rank committed: the heartbeat is the empty set.
        await n.ft.Guard(nm.GuardRequest(instance_id=INSTANCE, request_id="rd", lease_sec=30), timeout=5)
        done = await n.ft.Finalize(nm.FinalizeRequest(instance_id=INSTANCE, request_id="rd", commit=True,
                                                      retired_ids=[0, 2]), timeout=5)
        assert list(done.retired_ids) == [0, 1, 2]
        mark = len(controller.heartbeats)
        await async_wait_for(lambda: [list(h.alive_endpoint_ids) for h in controller.heartbeats_since(mark)][-1:] == [[]],
                             5, "empty heartbeat")
        assert n.exits == []  # all retired is not "all dead"


async def test_bad_input_is_refused_and_the_nodemanager_keeps_serving(controller: FakeController, tmp_path: Path) -> None:
    async with running_nm(nm_config(controller.address, tmp_path)) as n:
        ft = n.ft
        cases = [
            (ft.Guard(nm.GuardRequest(instance_id=INSTANCE, request_id="r", lease_sec=0), timeout=5),
             grpc.StatusCode.INVALID_ARGUMENT, "lease_sec=0.0"),
            (ft.Guard(nm.GuardRequest(instance_id=INSTANCE, request_id="r", lease_sec=3601), timeout=5),
             grpc.StatusCode.INVALID_ARGUMENT, "lease_sec=3601.0"),
            (ft.Guard(nm.GuardRequest(instance_id=INSTANCE, request_id="r", lease_sec=float("nan")), timeout=5),
             grpc.StatusCode.INVALID_ARGUMENT, "lease_sec=nan"),
            (ft.Guard(nm.GuardRequest(instance_id=INSTANCE, request_id="", lease_sec=5), timeout=5),
             grpc.StatusCode.INVALID_ARGUMENT, "request_id '' is empty"),
            (ft.Guard(nm.GuardRequest(instance_id=99, request_id="r", lease_sec=5), timeout=5),
             grpc.StatusCode.INVALID_ARGUMENT, "instance_id 99 is not this pod's instance 7"),
            (ft.Status(nm.StatusRequest(instance_id=INSTANCE, endpoint_ids=[]), timeout=5),
             grpc.StatusCode.INVALID_ARGUMENT, "endpoint_ids [] is empty"),
            (ft.Status(nm.StatusRequest(instance_id=INSTANCE, endpoint_ids=[0, 9]), timeout=5),
             grpc.StatusCode.INVALID_ARGUMENT, "endpoint_ids [9] are not endpoints of this pod"),
            (ft.Status(nm.StatusRequest(instance_id=INSTANCE, endpoint_ids=[1, 1]), timeout=5),
             grpc.StatusCode.INVALID_ARGUMENT, "repeat ids [1]"),
            (ft.Apply(nm.ApplyRequest(instance_id=INSTANCE, request_id="r", removed_dp_ranks=[1], dp_master_ip=POD_IP,
                                      endpoint_ids=[0]), timeout=5),
             grpc.StatusCode.INVALID_ARGUMENT, "instruction INSTRUCTION_UNSPECIFIED is not supported"),
            (ft.Apply(nm.ApplyRequest(instance_id=INSTANCE, request_id="r", instruction=SCALE_DOWN, removed_dp_ranks=[1],
                                      dp_master_ip=POD_IP, endpoint_ids=[0]), timeout=5),
             grpc.StatusCode.FAILED_PRECONDITION, "stale apply: request_id 'r' holds no guard"),
            (ft.Finalize(nm.FinalizeRequest(instance_id=INSTANCE, request_id="r", commit=True), timeout=5),
             grpc.StatusCode.FAILED_PRECONDITION, "stale finalize: request_id 'r' holds no guard"),
            (n.lifecycle.StopEngines(nm.StopEnginesRequest(instance_id=INSTANCE, grace_sec=-1), timeout=5),
             grpc.StatusCode.INVALID_ARGUMENT, "grace_sec=-1.0"),
            (n.lifecycle.StartEngines(nm.StartEnginesRequest(instance_id=INSTANCE, endpoint_ids=[4]), timeout=5),
             grpc.StatusCode.INVALID_ARGUMENT, "endpoint_ids [4] are not endpoints of this pod"),
            (n.lifecycle.StartEngines(nm.StartEnginesRequest(instance_id=INSTANCE, endpoint_ids=[0]), timeout=5),
             grpc.StatusCode.FAILED_PRECONDITION, "engines [0] are already running"),
            (n.lifecycle.RelaunchEngines(nm.RelaunchEnginesRequest(instance_id=INSTANCE, dp_master_ip="x"), timeout=5),
             grpc.StatusCode.INVALID_ARGUMENT, "dp_master_ip 'x' is not an IP address"),
        ]
        for call, code, text in cases:
            err = await rpc_error(call)
            assert err.code() == code and text in err.details(), (code, text, err.code(), err.details())
        described = await n.lifecycle.DescribePod(nm.DescribePodRequest(), timeout=5)
        assert [e.running for e in described.engines] == [True, True] and described.ft_proxy_enabled


async def test_proxy_off_answers_unimplemented_on_all_four(tmp_path: Path) -> None:
    fc = FakeController(proxy_enabled=False, heartbeat_interval_sec=0.2)
    fc.start()
    try:
        cfg = nm_config(fc.address, tmp_path, fault_tolerance_config={"enable_dp_scale_down": False})
        async with running_nm(cfg) as n:
            calls = [
                n.ft.Guard(nm.GuardRequest(instance_id=INSTANCE, request_id="r", lease_sec=5), timeout=5),
                n.ft.Status(nm.StatusRequest(instance_id=INSTANCE, endpoint_ids=[0]), timeout=5),
                n.ft.Apply(nm.ApplyRequest(instance_id=INSTANCE, request_id="r", instruction=SCALE_DOWN), timeout=5),
                n.ft.Finalize(nm.FinalizeRequest(instance_id=INSTANCE, request_id="r"), timeout=5),
            ]
            for call in calls:
                err = await rpc_error(call)
                assert err.code() == grpc.StatusCode.UNIMPLEMENTED
                assert err.details() == "DP scale-down proxy is disabled (enable_dp_scale_down_proxy=false)"
            # Nothing else changes: heartbeat with every running rank, polling still reports faults.
            await async_wait_for(lambda: fc.last_heartbeat() and list(fc.last_heartbeat().alive_endpoint_ids) == [0, 1], 5, "hb")
            # The controller switches the proxy on: adopted at the next heartbeat.
            fc.proxy_enabled = True
            await async_wait_for(lambda: n.agent.state.proxy_enabled, 5, "proxy on")
            g = await n.ft.Guard(nm.GuardRequest(instance_id=INSTANCE, request_id="r", lease_sec=5), timeout=5)
            assert g.request_id == "r"
    finally:
        fc.stop()
