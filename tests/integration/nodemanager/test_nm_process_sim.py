"""A real ``motor-nodemanager`` process supervising two real ``motor-engine-sim`` ranks (torch gloo
DP group) on pod 127.0.0.2, against a recording Controller peer: registration, a hung status route,
a full scale-down round through the proxy (guard, status, apply, stale finalize, commit), a killed
engine, the proxy switched off by the Controller, and a clean SIGTERM.

The pod is shared by the module while it stays fit for the next test (`PodHolder`) and started
afresh otherwise, so every test passes alone and in any order; in file order one pod serves them
all. Each test counts only the fault reports sent after it started (`Reports`)."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest

from gen.motor.v1 import common_pb2, controller_pb2, node_manager_pb2_grpc
from gen.motor.v1 import node_manager_pb2 as nm
from motor.common.ports import free_port
from motor.common.process import ManagedProcess, group_alive, start_process, stop_process_group
from motor.sim.client import SimClient
from motor.testing.fake_controller import FakeController
from motor.testing.waits import wait_for

pytestmark = pytest.mark.timeout(90)

POD_IP = "127.0.0.2"
INSTANCE = 7
BIN = Path(sys.executable).parent
K = controller_pb2


@dataclass
class SimPod:
    controller: FakeController
    proc: ManagedProcess
    channel: grpc.Channel | None
    store_port_base: int
    log_dir: Path
    engine_pids: list[int] = field(default_factory=list)

    @property
    def ft(self) -> node_manager_pb2_grpc.NodeManagerFaultToleranceStub:
        return node_manager_pb2_grpc.NodeManagerFaultToleranceStub(self.channel)

    @property
    def lifecycle(self) -> node_manager_pb2_grpc.NodeManagerStub:
        return node_manager_pb2_grpc.NodeManagerStub(self.channel)

    def describe(self) -> nm.DescribePodResponse:
        return self.lifecycle.DescribePod(nm.DescribePodRequest(), timeout=5)

    def engine(self, rank: int) -> SimClient:
        ep = self.describe().engines[rank].endpoint
        return SimClient(f"http://{ep.ip}:{ep.business_port}", timeout_sec=5)

    def alive(self) -> list[int] | None:
        hb = self.controller.last_heartbeat()
        return None if hb is None else list(hb.alive_endpoint_ids)


class Reports:
    """One rank's fault reports sent from now on."""

    def __init__(self, fc: FakeController, rank: int) -> None:
        self.fc, self.rank, self.start = fc, rank, len(fc.reports_of(rank))

    def __call__(self, kind: int | None = None) -> list[controller_pb2.ReportSoftwareFaultRequest]:
        return [r for r in self.fc.reports_of(self.rank)[self.start:] if kind is None or r.kind == kind]


def rpc_error(fn, *args, **kwargs) -> grpc.RpcError:
    try:
        result = fn(*args, **kwargs)
    except grpc.RpcError as exc:
        return exc
    raise AssertionError(f"call succeeded unexpectedly: {result}")


def start_pod(run: Path) -> SimPod:
    fc = FakeController(proxy_enabled=True, heartbeat_interval_sec=0.3)
    fc.start()
    base = free_port(POD_IP)
    config = {
        "controller_address": fc.address, "instance_id": INSTANCE, "dp_size": 2, "pod_ip": POD_IP,
        "server": {"host": POD_IP, "port": 0},
        "engines": [{"dp_rank": 0}, {"dp_rank": 1}],
        "dp_master_ip": POD_IP, "dp_master_port": 0, "dp_store_port_base": base,
        "engine_extra_args": ["--enable-fault-injection", "--num-experts", "2", "--collective-timeout-sec", "10",
                              "--engine-recovery-timeout-sec", "20"],
        "ft_capability": {"num_redundant_experts": 2},
        "log_dir": str(run / "engines"),
        "engine_request_timeout_sec": 1.0, "engine_ready_timeout_sec": 60.0, "engine_stop_grace_sec": 5.0,
        "fault_tolerance_config": {"enable_dp_scale_down": True, "engine_status_poll_interval_sec": 0.5},
    }
    (run / "nm.json").write_text(json.dumps(config))
    ready = run / "nm.ready.json"
    try:
        proc = start_process([str(BIN / "motor-nodemanager"), "--config", str(run / "nm.json"), "--ready-file",
                              str(ready)], log_path=run / "nodemanager.log", name="motor-nodemanager")
    except BaseException:
        fc.stop()
        raise
    p = SimPod(fc, proc, None, base, run / "engines")
    try:
        info = proc.wait_ready_file(ready, 30, required_keys=["grpc_port"])
        p.channel = grpc.insecure_channel(f"{POD_IP}:{info['grpc_port']}")
        wait_for(lambda: fc.registers, 75, "registration after both engines are ready")
        p.engine_pids = [e.pid for e in p.describe().engines]
    except BaseException:
        stop_pod(p)
        raise
    return p


def stop_pod(p: SimPod) -> None:
    try:
        if p.channel is not None:
            try:
                p.engine_pids += [e.pid for e in p.describe().engines if e.pid]
            except grpc.RpcError:
                pass
            p.channel.close()
        p.proc.stop(grace_sec=20)
        for pid in {pid for pid in p.engine_pids if pid}:
            if group_alive(pid):
                stop_process_group(pid, grace_sec=2)  # only if the NodeManager left one behind
    finally:
        p.controller.stop()


class PodHolder:
    """The module's pod, shared while it is fit for the next test and replaced otherwise: tests run
    in any order, each takes a pod whose NodeManager runs with the proxy on and no guard held, and
    whose ranks it needs are running, HEALTHY and without an unrecovered fault report."""

    def __init__(self, tmp_path_factory: pytest.TempPathFactory) -> None:
        self._tmp = tmp_path_factory
        self.current: SimPod | None = None

    def get(self, ranks: tuple[int, ...]) -> SimPod:
        if self.current is not None and not self._fit(self.current, ranks):
            stop_pod(self.current)
            self.current = None
        if self.current is None:
            self.current = start_pod(self._tmp.mktemp("nm-sim"))
        return self.current

    @staticmethod
    def _fit(p: SimPod, ranks: tuple[int, ...]) -> bool:
        if not p.proc.running:
            return False
        try:
            if not p.controller.proxy_enabled:  # a test switched it off: switch it back on
                p.controller.proxy_enabled = True
                wait_for(lambda: p.describe().ft_proxy_enabled, 5, "proxy on adopted again")
            described = p.describe()
            if described.guard_request_id or not described.ft_proxy_enabled:
                return False
            if not all(described.engines[r].running and not described.engines[r].retired for r in ranks):
                return False
            if ranks:
                resp = p.ft.Status(nm.StatusRequest(instance_id=INSTANCE, endpoint_ids=list(ranks)), timeout=5)
                if any(e.status != common_pb2.ENGINE_HEALTH_HEALTHY for e in resp.engines):
                    return False
        except (grpc.RpcError, TimeoutError, AssertionError):
            return False
        # No fault reported and not recovered yet on a rank it needs.
        return all([r.kind for r in p.controller.reports_of(rank)][-1:] in ([], [K.SOFTWARE_FAULT_KIND_RECOVERED])
                   for rank in ranks)

    def close(self) -> None:
        if self.current is not None:
            stop_pod(self.current)
            self.current = None


@pytest.fixture(scope="module")
def pods(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PodHolder]:
    holder = PodHolder(tmp_path_factory)
    try:
        yield holder
    finally:
        holder.close()


@pytest.fixture
def pod(pods: PodHolder) -> SimPod:
    """A pod with both ranks running and healthy."""
    return pods.get((0, 1))


def test_registers_real_engines_once_ready(pod: SimPod) -> None:
    reg = pod.controller.registers[0]
    assert reg.pod.pod_ip == POD_IP and reg.instance_id == INSTANCE and reg.dp_size == 2
    assert [e.id for e in reg.endpoints] == [0, 1] and all(e.business_port for e in reg.endpoints)
    assert reg.ft_capability.engine_ft_enabled and reg.ft_capability.num_redundant_experts == 2
    for e in reg.endpoints:  # registered only once the engine served /health
        assert SimClient(f"http://{e.ip}:{e.business_port}").request("GET", "/health").status == 200
    wait_for(lambda: pod.alive() == [0, 1], 5, "heartbeat with both ranks")
    resp = pod.ft.Status(nm.StatusRequest(instance_id=INSTANCE, endpoint_ids=[1, 0]), timeout=5)
    assert [(e.id, e.status) for e in resp.engines] == [(1, common_pb2.ENGINE_HEALTH_HEALTHY),
                                                         (0, common_pb2.ENGINE_HEALTH_HEALTHY)]


def test_hung_status_route_is_a_timeout_and_dead_evidence(pod: SimPod) -> None:
    reports1 = Reports(pod.controller, 1)
    assert pod.engine(1).inject("hang_status", duration_sec=3.0).status == 200
    err = rpc_error(pod.ft.Status, nm.StatusRequest(instance_id=INSTANCE, endpoint_ids=[0, 1]), timeout=5)
    # The NodeManager's own engine bound ended it (its message), not the caller's 5 s deadline.
    assert err.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert err.details().startswith("engine timed out: endpoint 1:"), err.details()
    dead = wait_for(lambda: reports1(K.SOFTWARE_FAULT_KIND_DEAD), 5, "DEAD on first timeout")
    assert "did not answer within 1s" in dead[0].evidence
    wait_for(lambda: reports1(K.SOFTWARE_FAULT_KIND_RECOVERED), 8, "RECOVERED after the hang")
    assert [r.kind for r in reports1()] == [K.SOFTWARE_FAULT_KIND_DEAD, K.SOFTWARE_FAULT_KIND_RECOVERED]


def test_scale_down_round_through_the_proxy(pod: SimPod) -> None:
    ft, fc, rid = pod.ft, pod.controller, "sd-round-1"
    reports0, reports1 = Reports(fc, 0), Reports(fc, 1)
    grant = ft.Guard(nm.GuardRequest(instance_id=INSTANCE, request_id=rid, lease_sec=85), timeout=5)
    assert grant.request_id == rid and not grant.renewed
    # Rank 1's executor dies (API up, status dead); rank 0 loses its peer (unhealthy).
    assert pod.engine(1).inject("executor_death").status == 200
    assert pod.engine(0).inject("unhealthy", reason="peer rank 1 gone").status == 200
    wait_for(lambda: reports1(K.SOFTWARE_FAULT_KIND_DEAD), 5, "rank 1 DEAD from the status route")
    wait_for(lambda: reports0(K.SOFTWARE_FAULT_KIND_UNHEALTHY), 5, "rank 0 UNHEALTHY")
    status = ft.Status(nm.StatusRequest(instance_id=INSTANCE, endpoint_ids=[0, 1], request_id=rid), timeout=5)
    (s0, s1) = status.engines
    assert (s0.status, s0.ft_state) == (common_pb2.ENGINE_HEALTH_UNHEALTHY, common_pb2.FT_STATE_UNSPECIFIED)
    assert s1.status == common_pb2.ENGINE_HEALTH_DEAD

    apply = nm.ApplyRequest(instance_id=INSTANCE, request_id=rid, instruction=nm.INSTRUCTION_SCALE_DOWN,
                            removed_dp_ranks=[1], dp_master_ip=POD_IP, dp_master_rank=0, endpoint_ids=[0])
    resp = ft.Apply(apply, timeout=5)
    assert resp.accepted and resp.dp_store_port == pod.store_port_base + 1
    (r0,) = resp.results
    assert (r0.endpoint_id, r0.http_status, r0.engine_request_id) == (0, 202, rid)
    assert json.loads(r0.request_body) == {"instruction": "scale_down", "request_id": rid, "params": {
        "removed_dp_ranks": [1], "dp_master_ip": POD_IP, "dp_store_port": pod.store_port_base + 1}}
    err = rpc_error(ft.Apply, apply, timeout=5)
    assert err.code() == grpc.StatusCode.ALREADY_EXISTS

    def recovered() -> bool:
        e = ft.Status(nm.StatusRequest(instance_id=INSTANCE, endpoint_ids=[0], request_id=rid), timeout=5).engines[0]
        assert e.ft_state != common_pb2.FT_STATE_FAILED, e.ft_error
        # vLLM's dialect replaces the whole entry on each change: no last_ft_request_id once healthy.
        return e.status == common_pb2.ENGINE_HEALTH_HEALTHY and e.ft_state == common_pb2.FT_STATE_UNSPECIFIED

    wait_for(recovered, 30, "rank 0 healthy after the scale-down", interval_sec=0.3)
    assert pod.engine(0).admin_state()["removed_dp_ranks"] == [1]  # the apply, not a mere recovery
    # A stale finalize (another transaction's id) is refused and changes nothing.
    err = rpc_error(ft.Finalize, nm.FinalizeRequest(instance_id=INSTANCE, request_id="sd-old", commit=True,
                                                    retired_ids=[1]), timeout=5)
    assert err.code() == grpc.StatusCode.FAILED_PRECONDITION and "stale finalize" in err.details()
    assert pod.describe().guard_request_id == rid
    done = ft.Finalize(nm.FinalizeRequest(instance_id=INSTANCE, request_id=rid, commit=True, retired_ids=[1]), timeout=5)
    assert list(done.retired_ids) == [1] and done.guard_released
    # Retired: gone from the heartbeat, its process stopped without an ENGINE_DEAD report.
    wait_for(lambda: pod.alive() == [0], 5, "heartbeat without rank 1")
    wait_for(lambda: pod.describe().engines[1].pid == 0, 10, "retired engine process gone")
    e1 = pod.describe().engines[1]
    assert e1.retired and not e1.running
    assert reports1(K.SOFTWARE_FAULT_KIND_ENGINE_DEAD) == []
    wait_for(lambda: reports0(K.SOFTWARE_FAULT_KIND_RECOVERED), 5, "rank 0 RECOVERED")
    # The survivor serves as a one-rank group.
    assert pod.engine(0).complete("hello", max_tokens=3, timeout_sec=20).status == 200


def test_engine_kill_is_reported_once(pods: PodHolder) -> None:
    pod = pods.get((0,))  # rank 1 may be running, or retired by the scale-down round
    reports0 = Reports(pod.controller, 0)
    pid = pod.describe().engines[0].pid
    others = [e.endpoint.id for e in pod.describe().engines if e.endpoint.id != 0 and e.running]
    assert pod.engine(0).inject("kill_process").status == 200
    got = wait_for(lambda: reports0(K.SOFTWARE_FAULT_KIND_ENGINE_DEAD), 5, "ENGINE_DEAD")
    assert f"engine process {pid} exited with signal SIGKILL" in got[0].evidence
    wait_for(lambda: pod.alive() == others, 5, "rank 0 gone from the heartbeat")
    # Several more supervision cycles with the engine dead (heartbeats 0.3 s apart), none re-reporting.
    mark = len(pod.controller.heartbeats)
    wait_for(lambda: len(pod.controller.heartbeats_since(mark)) >= 4, 10, "4 more heartbeats without rank 0")
    assert all(list(h.alive_endpoint_ids) == others for h in pod.controller.heartbeats_since(mark))
    assert len(reports0(K.SOFTWARE_FAULT_KIND_ENGINE_DEAD)) == 1
    assert not pod.describe().engines[0].running


def test_proxy_switched_off_by_the_controller(pods: PodHolder) -> None:
    pod = pods.get(())  # PodHolder switches it back on for the next test
    pod.controller.proxy_enabled = False
    wait_for(lambda: not pod.describe().ft_proxy_enabled, 5, "proxy off adopted")
    for call, req in [(pod.ft.Guard, nm.GuardRequest(instance_id=INSTANCE, request_id="x", lease_sec=5)),
                      (pod.ft.Status, nm.StatusRequest(instance_id=INSTANCE, endpoint_ids=[0])),
                      (pod.ft.Apply, nm.ApplyRequest(instance_id=INSTANCE, request_id="x")),
                      (pod.ft.Finalize, nm.FinalizeRequest(instance_id=INSTANCE, request_id="x"))]:
        err = rpc_error(call, req, timeout=5)
        assert err.code() == grpc.StatusCode.UNIMPLEMENTED
        assert err.details() == "DP scale-down proxy is disabled (enable_dp_scale_down_proxy=false)"


def test_sigterm_stops_cleanly(pods: PodHolder) -> None:
    pod = pods.get(())  # the next test gets a new pod
    assert pod.proc.stop(grace_sec=20) == 0, pod.proc.log_tail()
    assert "NodeManager stopped" in pod.proc.log_tail(20)
