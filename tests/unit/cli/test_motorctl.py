"""motorctl against grpc_testing channels: the CLI's requests and its rendering of real responses."""

from __future__ import annotations

import io
import json
import threading

import grpc
import grpc_testing
import pytest

from gen.motor.v1 import common_pb2, controller_pb2, coordinator_pb2
from motor.cli.motorctl import run

CONTROLLER = controller_pb2.DESCRIPTOR.services_by_name["Controller"]
COORDINATOR = coordinator_pb2.DESCRIPTOR.services_by_name["Coordinator"]


def _runtime() -> controller_pb2.InstanceFtRuntime:
    rt = controller_pb2.InstanceFtRuntime(
        instance_id=7, phase=controller_pb2.FT_PHASE_SCALED_DOWN_RUNNING, original_dp_ranks=[0, 1, 2, 3],
        request_id="sd-7-abc", dead_committed=[1], alive_dp_ranks=[0, 2, 3], fallback_strategy="instance_reconfiguration",
        gate=controller_pb2.Gate(allowed=True), serving_published=True, can_serve=True, generation=5,
    )
    return rt


class Harness:
    """Runs motorctl in a thread against a testing channel; the test plays the server."""

    def __init__(self, service) -> None:
        self.channel = grpc_testing.channel([service], grpc_testing.strict_real_time())
        self.out = io.StringIO()
        self.code: int | None = None
        self.addresses: list[str] = []

    def start(self, argv: list[str]) -> threading.Thread:
        def factory(address: str) -> grpc.Channel:
            self.addresses.append(address)
            return self.channel

        def target() -> None:
            self.code = run(argv, out=self.out, channel_factory=factory)

        thread = threading.Thread(target=target, daemon=True)
        thread.start()
        return thread


def test_status_table_and_request() -> None:
    h = Harness(CONTROLLER)
    thread = h.start(["--controller", "10.0.0.1:1", "status", "7"])
    _, request, rpc = h.channel.take_unary_unary(CONTROLLER.methods_by_name["GetFaultToleranceStatus"])
    assert list(request.instance_ids) == [7]
    rpc.terminate(controller_pb2.GetFaultToleranceStatusResponse(instances=[_runtime()]), (), grpc.StatusCode.OK, "")
    thread.join(10)
    assert h.code == 0 and h.addresses == ["10.0.0.1:1"]
    lines = h.out.getvalue().splitlines()
    assert lines[0].split()[:3] == ["INSTANCE", "PHASE", "ALIVE"]
    assert lines[1].split()[:5] == ["7", "SCALED_DOWN_RUNNING", "{0,2,3}", "{1}", "{}"]


def test_status_json_is_the_rfc_shape() -> None:
    h = Harness(CONTROLLER)
    thread = h.start(["status", "--json"])
    _, _, rpc = h.channel.take_unary_unary(CONTROLLER.methods_by_name["GetFaultToleranceStatus"])
    rpc.terminate(controller_pb2.GetFaultToleranceStatusResponse(instances=[_runtime()]), (), grpc.StatusCode.OK, "")
    thread.join(10)
    body = json.loads(h.out.getvalue())["instances"][0]
    assert body["phase"] == "SCALED_DOWN_RUNNING" and body["dead_committed"] == [1]
    assert body["alive_dp_ranks"] == [0, 2, 3] and body["pending_removed_ranks"] == []
    assert body["gate"] == {"allowed": True, "reason_codes": []} and body["last_error"] is None
    assert body["can_serve"] is True and body["serving_published"] is True


def test_status_error_is_reported_with_code() -> None:
    h = Harness(CONTROLLER)
    thread = h.start(["status", "9"])
    _, _, rpc = h.channel.take_unary_unary(CONTROLLER.methods_by_name["GetFaultToleranceStatus"])
    rpc.terminate(controller_pb2.GetFaultToleranceStatusResponse(), (), grpc.StatusCode.NOT_FOUND, "unknown instance_ids [9]")
    thread.join(10)
    assert h.code == 1


def test_timeline_renders_stages() -> None:
    h = Harness(CONTROLLER)
    thread = h.start(["timeline", "7"])
    _, request, rpc = h.channel.take_unary_unary(CONTROLLER.methods_by_name["GetTimeline"])
    assert request.instance_id == 7
    txn = controller_pb2.Transaction(request_id="sd-7-abc", strategy="dp_scale_down", started_at_unix_sec=100.0,
                                     ended_at_unix_sec=103.5, outcome="succeeded")
    txn.events.add(at_unix_sec=100.0, event_kind=controller_pb2.TIMELINE_EVENT_KIND_PHASE, name="DECIDING")
    txn.events.add(at_unix_sec=101.0, event_kind=controller_pb2.TIMELINE_EVENT_KIND_CALL, name="apply", target="127.0.0.2:1", outcome="ok", duration_sec=0.004,
                   detail="rank 0: HTTP 202")
    rpc.terminate(controller_pb2.GetTimelineResponse(transactions=[txn]), (), grpc.StatusCode.OK, "")
    thread.join(10)
    text = h.out.getvalue()
    assert "dp_scale_down request_id=sd-7-abc succeeded (3.500s)" in text
    assert "+   1.000s call     apply -> 127.0.0.2:1 [ok, 4.0 ms] rank 0: HTTP 202" in text


def test_watch_prints_phase_changes_only() -> None:
    h = Harness(CONTROLLER)
    thread = h.start(["watch", "--count", "2"])
    _, _, rpc = h.channel.take_unary_stream(CONTROLLER.methods_by_name["WatchFaultToleranceStatus"])
    normal = controller_pb2.InstanceFtRuntime(instance_id=7, phase=controller_pb2.FT_PHASE_NORMAL, alive_dp_ranks=[0, 1])
    deciding = controller_pb2.InstanceFtRuntime(instance_id=7, phase=controller_pb2.FT_PHASE_DECIDING, alive_dp_ranks=[0])
    for rt in (normal, normal, deciding):
        rpc.send_response(controller_pb2.WatchFaultToleranceStatusResponse(runtime=rt, changed_at_unix_sec=0))
    thread.join(10)
    rpc.terminate((), grpc.StatusCode.OK, "")
    lines = h.out.getvalue().splitlines()
    assert len(lines) == 2 and "NORMAL" in lines[0] and "DECIDING alive={0}" in lines[1]
    assert h.code == 0


def test_instances_lists_what_the_coordinator_routes() -> None:
    h = Harness(COORDINATOR)
    thread = h.start(["--coordinator", "127.0.0.1:9", "instances"])
    _, _, rpc = h.channel.take_unary_unary(COORDINATOR.methods_by_name["ListInstances"])
    inst = common_pb2.Instance(id=7, model="m")
    inst.endpoints.add(id=2, ip="127.0.0.3", business_port=8002)
    inst.endpoints.add(id=0, ip="127.0.0.2", business_port=8000)
    inst.endpoints.add(id=3, ip="127.0.0.3", business_port=8003, instance_route={"host": "127.0.0.2", "port": 30000})
    resp = coordinator_pb2.ListInstancesResponse(revision=42)
    resp.instances.add(instance=inst, paused=False)
    rpc.terminate(resp, (), grpc.StatusCode.OK, "")
    thread.join(10)
    assert h.out.getvalue().splitlines() == ["revision 42", "instance 7 model=m routing: 0@127.0.0.2:8000, "
                                             "2@127.0.0.3:8002, 3@127.0.0.2:30000(pinned)"]


def test_inject_refuses_malformed_params() -> None:
    with pytest.raises(SystemExit, match="not KEY=VALUE"):
        run(["inject", "http://127.0.0.1:1", "hang_status", "oops"])


def test_hw_fault_calls_report_hardware_fault() -> None:
    h = Harness(CONTROLLER)
    thread = h.start(["hw-fault", "node-a", "Ascend910-3", "--level", "L5", "--code", "80e18402"])
    _, request, rpc = h.channel.take_unary_unary(CONTROLLER.methods_by_name["ReportHardwareFault"])
    assert (request.node_name, request.npu_name, request.level) == ("node-a", "Ascend910-3", controller_pb2.FAULT_LEVEL_L5)
    assert request.fault_code.upper() == "80E18402"
    rpc.terminate(controller_pb2.ReportHardwareFaultResponse(accepted=True, message="waiting"), (), grpc.StatusCode.OK, "")
    thread.join(10)
    assert h.code == 0 and h.out.getvalue().strip() == "waiting"


def test_hw_fault_writes_a_mounted_configmap(tmp_path) -> None:
    from motor.controller.hardware.formats.configmap import parse_configmap

    assert run(["hw-fault", "node-a", "Ascend910-1", "--configmap-dir", str(tmp_path)], out=io.StringIO()) == 0
    text = (tmp_path / "mindx-dl-deviceinfo-node-a" / "DeviceInfoCfg").read_text()
    parsed = parse_configmap(text, node_name="node-a")
    assert [(f.npu_name, f.level) for f in parsed.faults] == [("Ascend910-1", 6)]


def test_hw_fault_refuses_a_bad_level() -> None:
    with pytest.raises(SystemExit, match="level='L9'"):
        run(["hw-fault", "node-a", "Ascend910-1", "--level", "L9"])


def test_restore_follows_one_request_id_until_restored() -> None:
    h = Harness(CONTROLLER)
    thread = h.start(["restore", "7", "--when-ready", "--deadline", "30", "--request-id", "op-1"])
    method = CONTROLLER.methods_by_name["RestoreInstance"]
    answers = [controller_pb2.RestoreInstanceResponse(state="restore_pending", unplaced_ranks=[0, 1],
                                                      message="ranks [0, 1] have no ready place yet"),
               controller_pb2.RestoreInstanceResponse(state="restoring", transaction_id="restore-7-abc"),
               controller_pb2.RestoreInstanceResponse(state="restored", transaction_id="restore-7-abc",
                                                      message="transaction restore-7-abc succeeded")]
    for answer in answers:
        _, request, rpc = h.channel.take_unary_unary(method)
        assert (request.instance_id, request.request_id, request.when_ready, request.deadline_sec) == (7, "op-1", True, 30)
        rpc.terminate(answer, (), grpc.StatusCode.OK, "")
    thread.join(10)
    lines = h.out.getvalue().splitlines()
    assert h.code == 0 and len(lines) == 3
    assert lines[0] == "instance 7 restore_pending: ranks [0, 1] have no ready place yet"
    assert lines[2] == "instance 7 restored (transaction restore-7-abc): transaction restore-7-abc succeeded"


def test_restore_refused_names_the_reason_and_fails() -> None:
    h = Harness(CONTROLLER)
    thread = h.start(["restore", "7"])
    _, request, rpc = h.channel.take_unary_unary(CONTROLLER.methods_by_name["RestoreInstance"])
    assert not request.when_ready and request.request_id.startswith("motorctl-restore-")
    rpc.terminate(controller_pb2.RestoreInstanceResponse(), (), grpc.StatusCode.FAILED_PRECONDITION,
                  "capacity_restore.mode is off")
    thread.join(10)
    assert h.code == 1
