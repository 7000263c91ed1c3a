"""Red team against a live mTLS cluster: with pod A's own NodeManager certificate (the dev PKI
issues one per pod), register as pod B, report pod B's ranks dead, and call StopPod and Guard on
pod B's NodeManager. Every attempt is refused, counted in /metrics and logged, and the instance
keeps serving on all its ranks."""

from __future__ import annotations

import grpc
import pytest

from gen.motor.v1 import common_pb2, controller_pb2, controller_pb2_grpc
from gen.motor.v1 import node_manager_pb2 as nm
from gen.motor.v1 import node_manager_pb2_grpc
from motor.common.config.tls import ClientTlsConfig
from motor.common.grpc_server import open_sync_channel
from motor.launch.cluster import pod_cert_name

from .service_metrics import get, nm_total, scrape_all

pytestmark = pytest.mark.timeout(120)


def _refused(call, request) -> grpc.RpcError:  # noqa: ANN001
    try:
        answer = call(request, timeout=5)
    except grpc.RpcError as exc:
        return exc
    raise AssertionError(f"accepted: {answer}")


def test_red_team_pod_a_certificate_speaks_for_pod_a_only(start_cluster) -> None:  # noqa: ANN001
    cluster = start_cluster(engines="light", tls=True)
    cluster.wait_serving(60)
    pod_a, pod_b = cluster.spec.all_pods()[:2]
    name = f"nodemanager-{pod_cert_name(pod_a)}"
    as_a = ClientTlsConfig(ca_file=cluster.pki.ca_file, cert_file=cluster.pki.cert_file(name),
                           key_file=cluster.pki.key_file(name))
    a_address = f"{pod_a.ip}:{cluster.nodemanagers[pod_a.ip].info['grpc_port']}"
    b_address = f"{pod_b.ip}:{cluster.nodemanagers[pod_b.ip].info['grpc_port']}"
    iid = cluster.spec.instance_id
    dead = controller_pb2.SOFTWARE_FAULT_KIND_ENGINE_DEAD

    with open_sync_channel(cluster.controller_address, as_a) as channel:
        ctl = controller_pb2_grpc.ControllerStub(channel)
        register_as_b = controller_pb2.RegisterRequest(
            pod=common_pb2.Pod(pod_ip=pod_b.ip, node_name="node-x", node_manager_address=a_address,
                               endpoint_ids=pod_b.ranks),
            instance_id=iid, role=common_pb2.ROLE_UNION, model=cluster.spec.model, dp_size=cluster.spec.dp_size,
            endpoints=[common_pb2.Endpoint(id=r, ip=pod_b.ip, business_port=18000 + r) for r in pod_b.ranks])
        codes = [_refused(ctl.Register, register_as_b).code()]
        for pod_ip in (pod_a.ip, pod_b.ip):  # B's rank in A's own name, then in B's
            codes.append(_refused(ctl.ReportSoftwareFault, controller_pb2.ReportSoftwareFaultRequest(
                pod_ip=pod_ip, instance_id=iid, endpoint_id=pod_b.ranks[0], kind=dead, evidence="forged")).code())
    with open_sync_channel(b_address, as_a) as channel:
        codes.append(_refused(node_manager_pb2_grpc.NodeManagerStub(channel).StopPod, nm.StopPodRequest(
            request_id="forged", reason="forged", instance_id=iid, pod_ip=pod_b.ip)).code())
        codes.append(_refused(node_manager_pb2_grpc.NodeManagerFaultToleranceStub(channel).Guard,
                              nm.GuardRequest(request_id="forged", lease_sec=5.0, instance_id=iid)).code())
    assert codes == [grpc.StatusCode.PERMISSION_DENIED] * 5

    scrapes = scrape_all(cluster)
    refusals = "motor_controller_identity_refusals_total"
    assert get(scrapes["controller"], refusals, method="Register", reason="pod_ip") == 1
    assert get(scrapes["controller"], refusals, method="ReportSoftwareFault", reason="rank") == 1
    assert get(scrapes["controller"], refusals, method="ReportSoftwareFault", reason="pod_ip") == 1
    for method in ("/motor.v1.NodeManager/StopPod", "/motor.v1.NodeManagerFaultTolerance/Guard"):
        assert nm_total(scrapes, "motor_nodemanager_authz_refusals_total", method=method, role="nodemanager") == 1
    log = cluster.controller.proc.log_path.read_text()
    assert f"identity: instance={iid} pod={pod_b.ip} Register refused (pod_ip)" in log
    assert f"identity: instance={iid} pod={pod_a.ip} ReportSoftwareFault refused (rank)" in log

    runtime = cluster.runtime()
    assert runtime["phase"] == "NORMAL" and runtime["dead_committed"] == [], runtime
    assert sorted(runtime["alive_dp_ranks"]) == list(range(cluster.spec.dp_size)), runtime
    answer = cluster.load_generator().send_one("still serving?")
    assert answer.status == 200, answer
