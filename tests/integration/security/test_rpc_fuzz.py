"""Fuzz of every RPC of every Motor service (hypothesis) against real gRPC servers: a Controller
(in-memory store, one assembled instance), a Coordinator (one published instance) and a NodeManager
(real engine processes: the fake engine; a recording Controller peer), each running in one event
loop on a thread of its own, called over real sockets.

Requests are random protobuf messages built from the descriptors, with boundary values: strings and
repeated fields one past their bound (`motor.common.validation`), huge rank lists, known and wrong
instance ids, unknown enum values, NaN and infinite numbers. For every case:

- the answer has a clear status code (never UNKNOWN, INTERNAL or DATA_LOSS);
- the service still answers health SERVING;
- a refused call (INVALID_ARGUMENT, NOT_FOUND, FAILED_PRECONDITION, ALREADY_EXISTS, UNIMPLEMENTED,
  OUT_OF_RANGE, RESOURCE_EXHAUSTED, ...) changed nothing: the service's state before and after the
  call is the same (checked whenever no recovery was running in the background around the call).

Example counts are bounded (MOTOR_FUZZ_EXAMPLES per RPC, default 25) and reported in the summary.
"""

from __future__ import annotations

import asyncio
import math
import os
import sys
import threading
from collections import Counter
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

import grpc
import pytest
from google.protobuf import message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor, ServiceDescriptor
from google.protobuf.message import Message
from grpc_health.v1 import health_pb2, health_pb2_grpc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gen.motor.v1 import (
    common_pb2,
    controller_pb2,
    controller_pb2_grpc,
    coordinator_pb2,
    coordinator_pb2_grpc,
    node_manager_pb2,
)
from motor.common.validation import DEFAULT_REPEATED_LIMIT, DEFAULT_STRING_LIMIT, REPEATED_LIMITS, STRING_LIMITS
from motor.controller.config import ControllerConfig
from motor.controller.main import ControllerService
from motor.controller.status import runtime_proto
from motor.coordinator.config import CoordinatorConfig
from motor.coordinator.main import CoordinatorService
from motor.testing.fake_controller import FakeController
from nodemanager.config import NodeManagerConfig
from motor.testing.waits import wait_for
from nodemanager.main import NodeManagerService

EXAMPLES = int(os.environ.get("MOTOR_FUZZ_EXAMPLES", "25"))
CALL_TIMEOUT_SEC = 5.0
POD_IP = "127.0.0.2"
NM_INSTANCE = 7
CTL_INSTANCE = 5
FAKE_ENGINE = [sys.executable, "-m", "motor.testing.fake_engine", "--host", "{host}", "--port", "{port}",
               "--dp-rank", "{dp_rank}", "--ft-api-prefix", "{ft_api_prefix}"]

# A server that answers one of these crashed inside a handler.
UNCLEAR = {grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL, grpc.StatusCode.DATA_LOSS}
# The call was refused: it must not have changed anything.
REFUSED = {grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND, grpc.StatusCode.FAILED_PRECONDITION,
           grpc.StatusCode.ALREADY_EXISTS, grpc.StatusCode.UNIMPLEMENTED, grpc.StatusCode.OUT_OF_RANGE,
           grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.UNAUTHENTICATED}

pytestmark = pytest.mark.timeout(600)


# -- request strategies --------------------------------------------------------------------------
INT32 = (-2**31, 2**31 - 1)
INT64 = (-2**63, 2**63 - 1)
# Known and boundary values by field name; everything else is random within its type.
KNOWN: dict[str, list[Any]] = {
    "instance_id": [NM_INSTANCE, CTL_INSTANCE, 0, -1, NM_INSTANCE + 1, 2**63 - 1],
    "id": [0, 1, CTL_INSTANCE, NM_INSTANCE, -1],
    "endpoint_id": [0, 1, 2, -1, 4096],
    "endpoint_ids": [0, 1, 2, -1, 2**31 - 1],
    "removed_dp_ranks": [0, 1, 2, -1],
    "retired_ids": [0, 1, 2, -1],
    "alive_endpoint_ids": [0, 1, 2],
    "instance_ids": [CTL_INSTANCE, 0, -1],
    "dp_master_rank": [0, 1, -1, 4096],
    "dp_size": [0, 1, 2, -1, 4097],
    "request_id": ["fuzz-1", "fuzz-2", "", " "],
    "pod_ip": [POD_IP, "127.0.0.5", "", "not-an-ip"],
    "ip": [POD_IP, "127.0.0.5", ""],
    "dp_master_ip": [POD_IP, "", "not-an-ip", "::1"],
    "node_name": ["node-a", ""],
    "npu_name": ["Ascend910-0", ""],
    "node_manager_address": ["127.0.0.1:9", "", "garbage"],
    "lease_sec": [0.0, 5.0, 3600.0, 3600.5, -1.0, math.nan, math.inf],
    "grace_sec": [0.0, 0.1, -1.0, math.nan, math.inf],
    "revision": [0, 1, 2, 2**62, -1],
    "limit": [0, 1, -1, 2**31 - 1],
    "business_port": [0, 1, 65535, 65536, -1],
    "mgmt_port": [0, 1, 65535, 65536, -1],
    "dp_master_port": [0, 29500, 65536, -1],
}


def _message_class(desc: Descriptor) -> type[Message]:
    return message_factory.GetMessageClass(desc)


def _scalar(field: FieldDescriptor) -> st.SearchStrategy[Any]:
    known = KNOWN.get(field.name)
    t = field.type
    if t in (FieldDescriptor.TYPE_STRING, FieldDescriptor.TYPE_BYTES):
        limit = STRING_LIMITS.get(field.name, DEFAULT_STRING_LIMIT)
        generic = st.one_of(st.text(max_size=16), st.just("x" * limit), st.just("y" * (limit + 1)))
        if t == FieldDescriptor.TYPE_BYTES:
            generic = generic.map(str.encode)
    elif t == FieldDescriptor.TYPE_BOOL:
        generic = st.booleans()
    elif t in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
        generic = st.floats(allow_nan=True, allow_infinity=True, width=64 if t == FieldDescriptor.TYPE_DOUBLE else 32)
    elif t == FieldDescriptor.TYPE_ENUM:
        values = [v.number for v in field.enum_type.values]
        generic = st.one_of(st.sampled_from(values), st.integers(-3, max(values) + 3))
    elif t in (FieldDescriptor.TYPE_INT64, FieldDescriptor.TYPE_SINT64, FieldDescriptor.TYPE_SFIXED64):
        generic = st.integers(*INT64)
    else:
        generic = st.integers(*INT32)
    return st.one_of(st.sampled_from(known), generic) if known else generic


@st.composite
def messages(draw: st.DrawFn, desc: Descriptor, depth: int = 0) -> Message:
    """A random message: each field present or not, with random or boundary values."""
    msg = _message_class(desc)()
    for f in desc.fields:
        if draw(st.booleans()):
            _fill(draw, msg, f, depth)
    return msg


@st.composite
def mutated(draw: st.DrawFn, seed: Message) -> Message:
    """A valid request with one or two of its fields replaced by random or boundary values (or
    cleared), so the fuzz reaches past the first check of each handler."""
    msg = type(seed)()
    msg.CopyFrom(seed)
    fields = list(seed.DESCRIPTOR.fields)
    if not fields:
        return msg
    for f in draw(st.lists(st.sampled_from(fields), min_size=0, max_size=2, unique_by=lambda f: f.name)):
        msg.ClearField(f.name)
        if draw(st.integers(0, 4)):
            _fill(draw, msg, f, 1)
    return msg


def _fill(draw: st.DrawFn, msg: Message, f: FieldDescriptor, depth: int) -> None:
    is_map = f.message_type is not None and f.message_type.GetOptions().map_entry
    if is_map:
        key_f, value_f = f.message_type.fields_by_name["key"], f.message_type.fields_by_name["value"]
        for _ in range(draw(st.integers(0, 3))):
            key = draw(_scalar(key_f))
            if value_f.message_type is not None:
                if depth < 3:
                    getattr(msg, f.name)[key].CopyFrom(draw(messages(value_f.message_type, depth + 1)))
            else:
                getattr(msg, f.name)[key] = draw(_scalar(value_f))
    elif f.is_repeated:
        limit = REPEATED_LIMITS.get(f.name, DEFAULT_REPEATED_LIMIT)
        huge = draw(st.integers(0, 9)) == 0
        if f.message_type is not None:
            if huge:
                getattr(msg, f.name).extend([_message_class(f.message_type)()] * (limit + 1))
            elif depth < 3:
                for item in draw(st.lists(messages(f.message_type, depth + 1), max_size=3)):
                    getattr(msg, f.name).add().CopyFrom(item)
        elif huge:
            getattr(msg, f.name).extend([draw(_scalar(f))] * (limit + 1))
        else:
            getattr(msg, f.name).extend(draw(st.lists(_scalar(f), max_size=4)))
    elif f.message_type is not None:
        if depth < 3:
            getattr(msg, f.name).CopyFrom(draw(messages(f.message_type, depth + 1)))
    else:
        setattr(msg, f.name, draw(_scalar(f)))


# -- the services --------------------------------------------------------------------------------
class LoopThread:
    """One asyncio loop on a thread: the services live there; the tests call them over sockets."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="fuzz-services", daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, Any], timeout_sec: float = 60.0) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout_sec)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()


@dataclass
class Target:
    address: str
    fingerprint: Callable[[], Any]  # the service's state, read on its own loop
    quiet: Callable[[], bool]  # no background recovery running
    stats: dict[str, Counter[str]] = field(default_factory=dict)


def _controller_state(svc: ControllerService) -> Any:
    core = svc.core
    assert core is not None
    runtimes = [runtime_proto(r).SerializeToString(deterministic=True) for r in core.runtimes.all()]
    pods = [(rec.instance_id, rec.assembled, sorted((ip, repr(vars(p))) for ip, p in rec.pods.items()))
            for rec in core.registry.all()]
    evidence = [(r.instance_id, repr(sorted(core.faults.evidence(r.instance_id).items()))) for r in core.runtimes.all()]
    timelines = [(r.instance_id, [(t.request_id, len(t.proto.events)) for t in core.timelines.transactions(r.instance_id)])
                 for r in core.runtimes.all()]
    return runtimes, pods, evidence, timelines


def _controller_quiet(svc: ControllerService) -> bool:
    core = svc.core
    assert core is not None
    return all(core.faults.running(r.instance_id) is None for r in core.runtimes.all())


def _coordinator_state(svc: CoordinatorService) -> Any:
    snap = svc.table.snapshot(0.0)
    return snap.revision, [(v.spec.id, v.spec.endpoint_ids, v.paused) for v in snap.instances]


def _nodemanager_state(svc: NodeManagerService) -> Any:
    agent = svc.agent
    engines = [(v.endpoint.endpoint_id if hasattr(v.endpoint, "endpoint_id") else repr(v.endpoint), v.pid,
                v.running, v.retired) for v in agent.engines.describe()]
    guard = agent.guard
    return (agent.state.proxy_enabled, sorted(agent.state.retired), engines, guard.live_holder(),
            getattr(guard, "_deadline", None), list(getattr(agent.proxy.applies, "_ids", {})))


@dataclass
class Services:
    controller: Target
    coordinator: Target
    nodemanager: Target
    exits: list[tuple[int, str]]


def _on_loop(loop: LoopThread, fn: Callable[[], Any]) -> Callable[[], Any]:
    async def read() -> Any:
        return fn()

    return lambda: loop.run(read(), 10.0)


@pytest.fixture(scope="module")
def services(tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("fuzz")
    loop = LoopThread()
    fake_ctl = FakeController(proxy_enabled=True, heartbeat_interval_sec=0.5)
    fake_ctl.start("127.0.0.1", 0)
    exits: list[tuple[int, str]] = []
    started: list[Any] = []
    try:
        ctl = ControllerService(ControllerConfig.model_validate({
            "server": {"host": "127.0.0.1", "port": 0, "shutdown_grace_sec": 0.5},
            "status_http": {"host": "127.0.0.1", "port": 0},
            "heartbeat_interval_sec": 1800.0, "heartbeat_timeout_sec": 3600.0, "publish_interval_sec": 3600.0,
            "reconfiguration_timeout_sec": 5.0, "hardware_monitor": {"kubernetes": "off"},
            "fault_tolerance_config": {
                "enable_dp_scale_down": True, "strategy_center_check_interval": 300.0,
                "software_status_collection_timeout_sec": 600.0, "hardware_ft_correlation_window_sec": 1.0,
                "dp_scale_down_config": {"request_timeout_sec": 0.5, "poll_interval_sec": 0.2,
                                         "execution_deadline_sec": 1.0}},
        }))
        ctl_info = loop.run(ctl.start())
        started.append(ctl)
        coord = CoordinatorService(CoordinatorConfig.model_validate({
            "server": {"host": "127.0.0.1", "port": 0, "shutdown_grace_sec": 0.5},
            "http": {"host": "127.0.0.1", "port": 0}, "hold_when_unavailable_sec": 0.0}))
        coord_info = loop.run(coord.start())
        started.append(coord)
        nm = NodeManagerService(NodeManagerConfig.model_validate({
            "controller_address": fake_ctl.address, "instance_id": NM_INSTANCE, "dp_size": 2, "pod_ip": POD_IP,
            "server": {"host": POD_IP, "port": 0, "shutdown_grace_sec": 0.5},
            "engines": [{"dp_rank": 0}, {"dp_rank": 1}], "engine_command": FAKE_ENGINE,
            "dp_master_ip": POD_IP, "dp_master_port": 0, "log_dir": str(tmp / "engines"),
            "engine_request_timeout_sec": 0.5, "engine_ready_timeout_sec": 20.0, "engine_stop_grace_sec": 2.0,
            "heartbeat_interval_sec": 0.5, "controller_request_timeout_sec": 1.0,
            "fault_tolerance_config": {"enable_dp_scale_down": True, "engine_status_poll_interval_sec": 0.5},
        }), exit_request=lambda code, why: exits.append((code, why)))
        nm_info = loop.run(nm.start())
        started.append(nm)
        loop.run(asyncio.wait_for(nm.agent.engines.launched.wait(), 30))
        controller_addr = f"127.0.0.1:{ctl_info['grpc_port']}"
        coordinator_addr = f"127.0.0.1:{coord_info['grpc_port']}"
        _seed(controller_addr, coordinator_addr)
        yield Services(
            Target(controller_addr, _on_loop(loop, lambda: _controller_state(ctl)), _on_loop(loop, lambda: _controller_quiet(ctl))),
            Target(coordinator_addr, _on_loop(loop, lambda: _coordinator_state(coord)), lambda: True),
            Target(f"{POD_IP}:{nm_info['grpc_port']}", _on_loop(loop, lambda: _nodemanager_state(nm)), lambda: True),
            exits,
        )
    finally:
        for svc in reversed(started):
            try:
                loop.run(svc.stop(), 60)
            except Exception as exc:  # noqa: BLE001 - stop the others too
                print(f"stopping {type(svc).__name__} failed: {exc!r}")
        fake_ctl.stop()
        loop.close()


def _endpoint(rank: int, ip: str) -> common_pb2.Endpoint:
    return common_pb2.Endpoint(id=rank, ip=ip, business_port=9000 + rank, mgmt_port=9000 + rank,
                               device_infos=[common_pb2.DeviceInfo(device_id=f"Ascend910-{rank}")])


def _seed(controller: str, coordinator: str) -> None:
    """An assembled instance on the Controller (its NodeManager address answers nothing) and a
    published one on the Coordinator, so fuzzed ids and DEL/PAUSE have something real to hit."""
    ip = "127.0.0.5"
    with grpc.insecure_channel(controller) as ch:
        resp = controller_pb2_grpc.ControllerStub(ch).Register(controller_pb2.RegisterRequest(
            pod=common_pb2.Pod(pod_ip=ip, node_name="node-a", node_manager_address="127.0.0.1:9", endpoint_ids=[0, 1]),
            instance_id=CTL_INSTANCE, role=common_pb2.ROLE_UNION, model="m", dp_size=2,
            endpoints=[_endpoint(0, ip), _endpoint(1, ip)],
            ft_capability=common_pb2.FtCapability(engine_ft_enabled=True, scale_down_supported=True, external_lb=True,
                                                  enable_eplb=True, num_redundant_experts=2)), timeout=5)
        assert resp.accepted, resp
    with grpc.insecure_channel(coordinator) as ch:
        coordinator_pb2_grpc.CoordinatorStub(ch).Refresh(coordinator_pb2.RefreshRequest(
            event=coordinator_pb2.REFRESH_EVENT_ADD, revision=1,
            instances=[common_pb2.Instance(id=CTL_INSTANCE, model="m", dp_size=2, role=common_pb2.ROLE_UNION,
                                           endpoints=[_endpoint(0, ip), _endpoint(1, ip)])]), timeout=5)


# -- the cases -----------------------------------------------------------------------------------
def _seeds() -> dict[str, Message]:
    """One valid request per method (against the seeded state), the base of the mutated cases."""
    ip = "127.0.0.5"
    c, co, nm = controller_pb2, coordinator_pb2, node_manager_pb2
    published = common_pb2.Instance(id=CTL_INSTANCE, model="m", dp_size=2, role=common_pb2.ROLE_UNION,
                                    endpoints=[_endpoint(0, ip), _endpoint(1, ip)])
    return {
        "Register": c.RegisterRequest(
            pod=common_pb2.Pod(pod_ip="127.0.0.6", node_name="node-b", node_manager_address="127.0.0.1:9",
                               endpoint_ids=[0]),
            instance_id=11, role=common_pb2.ROLE_UNION, model="m", dp_size=1, endpoints=[_endpoint(0, "127.0.0.6")]),
        "Heartbeat": c.HeartbeatRequest(pod_ip=ip, instance_id=CTL_INSTANCE, alive_endpoint_ids=[0, 1], seq=1),
        "HeartbeatStream": c.HeartbeatStreamRequest(heartbeat=c.HeartbeatRequest(
            pod_ip=ip, instance_id=CTL_INSTANCE, alive_endpoint_ids=[0, 1], seq=1)),
        "ReportSoftwareFault": c.ReportSoftwareFaultRequest(pod_ip=ip, instance_id=CTL_INSTANCE, endpoint_id=1,
                                                            kind=c.SOFTWARE_FAULT_KIND_UNHEALTHY, evidence="fuzz"),
        "ReportSoftwareFaults": c.ReportSoftwareFaultsRequest(reports=[
            c.ReportSoftwareFaultRequest(pod_ip=ip, instance_id=CTL_INSTANCE, endpoint_id=rank,
                                         kind=c.SOFTWARE_FAULT_KIND_UNHEALTHY, evidence="fuzz") for rank in (0, 1)]),
        "ReportHardwareFault": c.ReportHardwareFaultRequest(node_name="node-a", npu_name="Ascend910-1",
                                                            fault_code="80E18402", level=c.FAULT_LEVEL_L6),
        "GetFaultToleranceStatus": c.GetFaultToleranceStatusRequest(instance_ids=[CTL_INSTANCE]),
        "WatchFaultToleranceStatus": c.WatchFaultToleranceStatusRequest(instance_ids=[CTL_INSTANCE]),
        "GetTimeline": c.GetTimelineRequest(instance_id=CTL_INSTANCE, limit=2),
        "RequestPublication": c.RequestPublicationRequest(),
        "RestoreInstance": c.RestoreInstanceRequest(instance_id=CTL_INSTANCE, request_id="fuzz-restore",
                                                    when_ready=True, deadline_sec=1.0),
        "Refresh": co.RefreshRequest(event=co.REFRESH_EVENT_PAUSE, instances=[published], revision=2**40),
        "ListInstances": co.ListInstancesRequest(),
        "SendCanary": co.SendCanaryRequest(instance_id=CTL_INSTANCE, endpoint_ids=[0, 1], timeout_sec=1.0,
                                           request_id="fuzz-canary"),
        "Guard": nm.GuardRequest(request_id="fuzz-1", lease_sec=5.0, instance_id=NM_INSTANCE),
        "Status": nm.StatusRequest(instance_id=NM_INSTANCE, endpoint_ids=[0, 1], request_id="fuzz-1"),
        "Apply": nm.ApplyRequest(instance_id=NM_INSTANCE, request_id="fuzz-1", instruction=nm.INSTRUCTION_SCALE_DOWN,
                                 removed_dp_ranks=[1], dp_master_ip=POD_IP, dp_master_rank=0, endpoint_ids=[0]),
        "Finalize": nm.FinalizeRequest(instance_id=NM_INSTANCE, request_id="fuzz-1", commit=False),
        "StartEngines": nm.StartEnginesRequest(instance_id=NM_INSTANCE, request_id="fuzz-s", dp_master_ip=POD_IP,
                                               endpoint_ids=[1]),
        "StopEngines": nm.StopEnginesRequest(instance_id=NM_INSTANCE, request_id="fuzz-s", grace_sec=0.5,
                                             endpoint_ids=[1]),
        "RelaunchEngines": nm.RelaunchEnginesRequest(instance_id=NM_INSTANCE, request_id="fuzz-r",
                                                     dp_master_ip=POD_IP, grace_sec=0.5),
        "StopPod": nm.StopPodRequest(request_id="fuzz-stop", reason="fuzz", instance_id=NM_INSTANCE, pod_ip=POD_IP),
        "DescribePod": nm.DescribePodRequest(),
    }


SEEDS = _seeds()


def _methods(service: ServiceDescriptor, last: str | None = None) -> list[tuple[str, Any]]:
    names = [m.name for m in service.methods]
    if last is not None:  # StopPod stops every engine: fuzz it after the others
        names.remove(last)
        names.append(last)
    return [(service.full_name, service.methods_by_name[n]) for n in names]


CASES = [
    ("controller", *m) for m in _methods(controller_pb2.DESCRIPTOR.services_by_name["Controller"])
] + [
    ("coordinator", *m) for m in _methods(coordinator_pb2.DESCRIPTOR.services_by_name["Coordinator"])
] + [
    ("nodemanager", *m) for m in _methods(node_manager_pb2.DESCRIPTOR.services_by_name["NodeManagerFaultTolerance"])
] + [
    ("nodemanager", *m) for m in _methods(node_manager_pb2.DESCRIPTOR.services_by_name["NodeManager"], last="StopPod")
]


def _call(channel: grpc.Channel, path: str, method, request: Message) -> tuple[grpc.StatusCode, str, int]:
    out_cls = _message_class(method.output_type)
    kwargs = {"request_serializer": lambda m: m.SerializeToString(), "response_deserializer": out_cls.FromString}
    try:
        if method.client_streaming:
            # A bidirectional stream (HeartbeatStream): the request sent twice, every answer read.
            answers = channel.stream_stream(path, **kwargs)(iter([request, request]), timeout=CALL_TIMEOUT_SEC)
            return grpc.StatusCode.OK, "", sum(1 for _ in answers)
        if method.server_streaming:
            stream = channel.unary_stream(path, **kwargs)(request, timeout=1.0)
            received = 0
            try:
                for _ in stream:
                    received += 1
                    if received >= 2:
                        break
            finally:
                stream.cancel()
            return grpc.StatusCode.OK, "", received
        channel.unary_unary(path, **kwargs)(request, timeout=CALL_TIMEOUT_SEC)
        return grpc.StatusCode.OK, "", 1
    except grpc.RpcError as exc:
        code = exc.code()
        if method.server_streaming and not method.client_streaming and code in (grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED):
            return grpc.StatusCode.OK, "", 0  # a watch that had nothing more to say within its deadline
        return code, exc.details() or "", 0


def _healthy(channel: grpc.Channel) -> int:
    return health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5).status


def _wait_quiet(target: Target, timeout_sec: float = 10.0) -> bool:
    """Whether the target went quiet (no recovery running) within the bound; a state comparison needs it."""
    try:
        return wait_for(target.quiet, timeout_sec, "the target quiet")
    except AssertionError:
        return False


@pytest.mark.parametrize(("service", "full_name", "method"), CASES, ids=[f"{c[1].rpartition('.')[2]}.{c[2].name}" for c in CASES])
def test_rpc_fuzz(services: Services, fuzz_report, service: str, full_name: str, method) -> None:
    target: Target = getattr(services, service)
    path = f"/{full_name}/{method.name}"
    outcomes: Counter[str] = Counter()
    checks: Counter[str] = Counter()
    channel = grpc.insecure_channel(target.address)

    @settings(max_examples=EXAMPLES, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example])
    @given(request=st.one_of(messages(method.input_type), mutated(SEEDS[method.name])))
    def run(request: Message) -> None:
        quiet_before = _wait_quiet(target)
        before = target.fingerprint()
        code, details, _ = _call(channel, path, method, request)
        after = target.fingerprint()
        quiet_after = target.quiet()
        outcomes[code.name] += 1
        assert code not in UNCLEAR, f"{path} answered {code.name}: {details} for {request}"[:2000]
        assert code == grpc.StatusCode.OK or details, f"{path} refused with {code.name} but no message"
        assert _healthy(channel) == health_pb2.HealthCheckResponse.SERVING
        if code in REFUSED:
            if quiet_before and quiet_after:
                assert after == before, f"{path} refused with {code.name} ({details}) but changed the state"
                checks["state unchanged"] += 1
            else:
                checks["state not compared (recovery running)"] += 1

    try:
        run()
    finally:
        channel.close()
        total = sum(outcomes.values())
        fuzz_report(f"{path}: {total} cases {dict(sorted(outcomes.items()))} {dict(checks)}")
    assert total >= (1 if not method.input_type.fields else min(EXAMPLES, 10))


BIG = "m" * (5 * 1024 * 1024)  # above the 4 MiB server.max_receive_message_bytes default
OVERSIZED = {
    "controller": ("/motor.v1.Controller/Register", controller_pb2.RegisterRequest(model=BIG)),
    "coordinator": ("/motor.v1.Coordinator/Refresh",
                    coordinator_pb2.RefreshRequest(instances=[common_pb2.Instance(model=BIG)])),
    "nodemanager": ("/motor.v1.NodeManagerFaultTolerance/Guard", node_manager_pb2.GuardRequest(request_id=BIG)),
}


@pytest.mark.parametrize("service", sorted(OVERSIZED))
def test_request_above_the_receive_limit_is_refused_before_any_handler(services: Services, service: str) -> None:
    target: Target = getattr(services, service)
    path, request = OVERSIZED[service]
    before = target.fingerprint()
    with grpc.insecure_channel(target.address) as channel:
        with pytest.raises(grpc.RpcError) as info:
            channel.unary_unary(path, request_serializer=lambda m: m.SerializeToString())(request, timeout=10)
        assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, info.value
        assert _healthy(channel) == health_pb2.HealthCheckResponse.SERVING
    assert target.fingerprint() == before
