"""A NodeManager speaks for its own pod only: each claim another pod's certificate could make,
tried against a real mTLS Controller (and a real NodeManager for StopPod) with certificates of the
development PKI, one per pod. Pod A (127.0.0.2) hosts rank 0 and pod B (127.0.0.3) rank 1 of
instance 7; every attack uses pod A's certificate and must be refused and counted."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from gen.motor.v1 import common_pb2, controller_pb2, controller_pb2_grpc
from gen.motor.v1 import node_manager_pb2 as nm
from gen.motor.v1 import node_manager_pb2_grpc
from motor.common.config.tls import ClientTlsConfig
from motor.common.grpc_server import open_channel
from motor.common.pki import DevPki, create_dev_pki
from motor.controller.main import ControllerService
from motor.testing.waits import async_wait_for
from nodemanager.main import NodeManagerService

from ..nodemanager.nm_helpers import nm_config, rpc_error
from .mtls_controller import mtls_controller

pytestmark = pytest.mark.timeout(60)

A_IP, B_IP = "127.0.0.2", "127.0.0.3"
INSTANCE = 7
A_ADDRESS, B_ADDRESS = f"{A_IP}:50061", f"{B_IP}:50062"


@pytest.fixture
def pki(tmp_path: Path) -> DevPki:
    # "b-twin" also covers B's IP (a certificate issued for a recreated pod B, or misissued): it is
    # another identity, so it may not take over the pod B registered.
    return create_dev_pki(tmp_path / "pki", ["localhost", "127.0.0.1"],
                          pods=[("a", A_IP), ("b", B_IP), ("b-twin", B_IP)])


def _tls(pki: DevPki, name: str) -> ClientTlsConfig:
    return ClientTlsConfig(ca_file=pki.ca_file, cert_file=pki.cert_file(name), key_file=pki.key_file(name))


def register_request(pod_ip: str, rank: int, address: str, instance_id: int = INSTANCE) -> controller_pb2.RegisterRequest:
    return controller_pb2.RegisterRequest(
        pod=common_pb2.Pod(pod_ip=pod_ip, node_name="node-1", node_manager_address=address, endpoint_ids=[rank]),
        instance_id=instance_id, role=common_pb2.ROLE_UNION,
        model="motor-sim", dp_size=2, endpoints=[common_pb2.Endpoint(id=rank, ip=pod_ip, business_port=18000 + rank)])


@dataclass
class World:
    pki: DevPki
    address: str
    service: ControllerService

    def refusals(self, method: str, reason: str) -> float:
        assert self.service.core is not None
        return self.service.core.metrics.registry.get_sample_value(
            "motor_controller_identity_refusals_total", {"method": method, "reason": reason}) or 0.0

    def pod(self, ip: str):  # noqa: ANN201
        assert self.service.core is not None
        record = self.service.core.registry.get(INSTANCE)
        return record.pods.get(ip) if record is not None else None


@pytest.fixture
async def world(pki: DevPki) -> AsyncIterator[World]:
    async with mtls_controller(pki, max_instances=2) as (service, info):
        address = f"127.0.0.1:{info['grpc_port']}"
        for name, ip, rank, nm_address in (("a", A_IP, 0, A_ADDRESS), ("b", B_IP, 1, B_ADDRESS)):
            async with open_channel(address, _tls(pki, f"nodemanager-{name}")) as channel:
                resp = await controller_pb2_grpc.ControllerStub(channel).Register(
                    register_request(ip, rank, nm_address), timeout=5)
                assert resp.accepted
        yield World(pki, address, service)


async def _as(world: World, name: str, call: str, request) -> grpc.aio.AioRpcError:  # noqa: ANN001
    async with open_channel(world.address, _tls(world.pki, name)) as channel:
        return await rpc_error(getattr(controller_pb2_grpc.ControllerStub(channel), call)(request, timeout=5))


async def test_pod_a_cannot_register_as_pod_b(world: World) -> None:
    err = await _as(world, "nodemanager-a", "Register", register_request(B_IP, 1, A_ADDRESS))
    assert err.code() == grpc.StatusCode.PERMISSION_DENIED and f"pod_ip {B_IP}" in err.details()
    assert world.refusals("Register", "pod_ip") == 1
    assert world.pod(B_IP).node_manager_address == B_ADDRESS  # B's registration stands


async def test_pod_a_cannot_heartbeat_as_pod_b(world: World) -> None:
    req = controller_pb2.HeartbeatRequest(pod_ip=B_IP, instance_id=INSTANCE, alive_endpoint_ids=[1], seq=1)
    err = await _as(world, "nodemanager-a", "Heartbeat", req)
    assert err.code() == grpc.StatusCode.PERMISSION_DENIED and "Heartbeat" in err.details()
    assert world.refusals("Heartbeat", "pod_ip") == 1


async def test_pod_a_cannot_heartbeat_as_pod_b_on_its_own_heartbeat_stream(world: World) -> None:
    # The stream is checked message by message: A's own heartbeat is answered, B's ends the stream.
    own = controller_pb2.HeartbeatRequest(pod_ip=A_IP, instance_id=INSTANCE, alive_endpoint_ids=[0], seq=1)
    forged = controller_pb2.HeartbeatRequest(pod_ip=B_IP, instance_id=INSTANCE, alive_endpoint_ids=[1], seq=2)
    async with open_channel(world.address, _tls(world.pki, "nodemanager-a")) as channel:
        call = controller_pb2_grpc.ControllerStub(channel).HeartbeatStream(timeout=10)
        await call.write(controller_pb2.HeartbeatStreamRequest(heartbeat=own))
        assert (await call.read()).heartbeat.known
        await call.write(controller_pb2.HeartbeatStreamRequest(heartbeat=forged))
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await call.read()
    assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED and f"pod_ip {B_IP}" in info.value.details()
    assert world.refusals("Heartbeat", "pod_ip") == 1


async def test_pod_a_cannot_report_pod_bs_rank_dead(world: World) -> None:
    dead = controller_pb2.SOFTWARE_FAULT_KIND_ENGINE_DEAD
    # In its own name: rank 1 is not its pod's.
    own = controller_pb2.ReportSoftwareFaultRequest(pod_ip=A_IP, instance_id=INSTANCE, endpoint_id=1, kind=dead,
                                                    evidence="forged")
    err = await _as(world, "nodemanager-a", "ReportSoftwareFault", own)
    assert err.code() == grpc.StatusCode.PERMISSION_DENIED and "rank 1 is not hosted by pod 127.0.0.2" in err.details()
    # In B's name.
    err = await _as(world, "nodemanager-a", "ReportSoftwareFault",
                    controller_pb2.ReportSoftwareFaultRequest(pod_ip=B_IP, instance_id=INSTANCE, endpoint_id=1,
                                                              kind=dead, evidence="forged"))
    assert err.code() == grpc.StatusCode.PERMISSION_DENIED
    assert (world.refusals("ReportSoftwareFault", "rank"), world.refusals("ReportSoftwareFault", "pod_ip")) == (1, 1)
    assert world.service.core.faults.running(INSTANCE) is None  # no recovery started


async def test_a_call_of_several_reports_with_one_forged_is_refused_whole(world: World) -> None:
    dead = controller_pb2.SOFTWARE_FAULT_KIND_ENGINE_DEAD
    reports = [controller_pb2.ReportSoftwareFaultRequest(pod_ip=A_IP, instance_id=INSTANCE, endpoint_id=rank,
                                                         kind=dead, evidence="forged" if rank else "own")
               for rank in (0, 1)]
    err = await _as(world, "nodemanager-a", "ReportSoftwareFaults", controller_pb2.ReportSoftwareFaultsRequest(
        reports=reports))
    assert err.code() == grpc.StatusCode.PERMISSION_DENIED and "rank 1 is not hosted by pod 127.0.0.2" in err.details()
    assert world.refusals("ReportSoftwareFault", "rank") == 1
    # A's own report in the same call was not taken either.
    assert world.service.core.metrics.registry.get_sample_value(
        "motor_fault_reports_total", {"kind": "ENGINE_DEAD"}) is None
    assert world.service.core.faults.running(INSTANCE) is None


async def test_pod_a_cannot_register_pod_bs_nodemanager_address(world: World) -> None:
    # Its own pod, in an instance of its own, with B's address: Guard, Apply and StopPod would go to B.
    err = await _as(world, "nodemanager-a", "Register", register_request(A_IP, 0, B_ADDRESS, instance_id=8))
    assert err.code() == grpc.StatusCode.PERMISSION_DENIED and f"node_manager_address {B_ADDRESS}" in err.details()
    assert world.refusals("Register", "nodemanager_address") == 1
    assert world.service.core.registry.get(8) is None


async def test_a_pod_stays_bound_to_the_identity_that_registered_it(world: World) -> None:
    # A certificate that covers B's IP but is another pod's identity: refused for B's registration
    # and heartbeat; B itself re-registers.
    err = await _as(world, "nodemanager-b-twin", "Register", register_request(B_IP, 1, B_ADDRESS))
    assert err.code() == grpc.StatusCode.PERMISSION_DENIED and "spiffe://motor/ns/motor/pod/b" in err.details()
    err = await _as(world, "nodemanager-b-twin", "Heartbeat",
                    controller_pb2.HeartbeatRequest(pod_ip=B_IP, instance_id=INSTANCE, alive_endpoint_ids=[1]))
    assert err.code() == grpc.StatusCode.PERMISSION_DENIED
    assert (world.refusals("Register", "other_identity"), world.refusals("Heartbeat", "other_identity")) == (1, 1)
    async with open_channel(world.address, _tls(world.pki, "nodemanager-b")) as channel:
        assert (await controller_pb2_grpc.ControllerStub(channel).Register(
            register_request(B_IP, 1, B_ADDRESS), timeout=5)).accepted


async def test_instances_per_controller_are_capped(world: World) -> None:
    async with open_channel(world.address, _tls(world.pki, "nodemanager-a")) as channel:
        stub = controller_pb2_grpc.ControllerStub(channel)
        assert (await stub.Register(register_request(A_IP, 0, A_ADDRESS, instance_id=8), timeout=5)).accepted
        err = await rpc_error(stub.Register(register_request(A_IP, 0, A_ADDRESS, instance_id=9), timeout=5))
    assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and "max_instances=2" in err.details()
    assert world.refusals("Register", "instance_cap") == 1


async def test_stop_pod_naming_another_pod_is_not_obeyed(world: World, tmp_path: Path) -> None:
    """Pod A's real NodeManager (its own certificate, registered with the mTLS Controller): a StopPod
    naming pod B or another instance is refused; with pod A's certificate it is refused by role; the
    one naming pod A is obeyed."""
    config = nm_config(world.address, tmp_path, ranks=(0,), security=world.pki.pod_security("a"),
                       server={"host": A_IP, "port": 0, "shutdown_grace_sec": 1.0})
    exits: list[tuple[int, str]] = []
    service = NodeManagerService(config, exit_request=lambda code, why: exits.append((code, why)))
    info = await service.start()
    try:
        target = f"{A_IP}:{info['grpc_port']}"
        await async_wait_for(lambda: world.pod(A_IP) is not None and world.pod(A_IP).node_manager_address == target,
                             20, "pod A's NodeManager registered with its own certificate")
        async with open_channel(target, _tls(world.pki, "controller")) as channel:
            stub = node_manager_pb2_grpc.NodeManagerStub(channel)
            for instance_id, pod_ip in ((INSTANCE, B_IP), (INSTANCE + 1, A_IP), (INSTANCE, "")):
                err = await rpc_error(stub.StopPod(nm.StopPodRequest(request_id="sd-x", reason="forged",
                                                                     instance_id=instance_id, pod_ip=pod_ip),
                                                   timeout=5))
                assert err.code() == grpc.StatusCode.FAILED_PRECONDITION, err.details()
        async with open_channel(target, _tls(world.pki, "nodemanager-a")) as channel:
            err = await rpc_error(node_manager_pb2_grpc.NodeManagerStub(channel).StopPod(
                nm.StopPodRequest(request_id="sd-x", reason="forged", instance_id=INSTANCE, pod_ip=A_IP), timeout=5))
            assert err.code() == grpc.StatusCode.PERMISSION_DENIED
        registry = service.agent.metrics.registry
        assert [registry.get_sample_value("motor_nodemanager_stop_pod_refusals_total", {"reason": r})
                for r in ("pod", "instance")] == [2, 1]
        assert exits == []
        async with open_channel(target, _tls(world.pki, "controller")) as channel:
            assert (await node_manager_pb2_grpc.NodeManagerStub(channel).StopPod(
                nm.StopPodRequest(request_id="sd-a", reason="every DP rank of the pod is committed dead",
                                  instance_id=INSTANCE, pod_ip=A_IP), timeout=5)).accepted
        await async_wait_for(lambda: exits, 5, "pod A's NodeManager exits after the stop naming it")
    finally:
        await service.stop()
