"""A real Controller on port 0 and the registration of a two-rank pod, for the Controller's gRPC tests."""

from __future__ import annotations

from gen.motor.v1 import common_pb2, controller_pb2
from motor.controller.config import ControllerConfig
from motor.controller.main import ControllerService


def controller_service(shutdown_grace_sec: float = 0.5, **settings: object) -> ControllerService:
    """`settings`: further top-level keys of the Controller's configuration."""
    return ControllerService(ControllerConfig.model_validate({
        "server": {"host": "127.0.0.1", "port": 0, "shutdown_grace_sec": shutdown_grace_sec},
        "status_http": {"host": "127.0.0.1", "port": 0},
        "hardware_monitor": {"kubernetes": "off"},
        **settings,
    }))


def register_request(pod_ip: str, instance_id: int) -> controller_pb2.RegisterRequest:
    """The pod `pod_ip` hosting ranks 0 and 1, the whole of a DP 2 instance."""
    return controller_pb2.RegisterRequest(
        pod=common_pb2.Pod(pod_ip=pod_ip, node_name="node-1", node_manager_address=f"{pod_ip}:50061",
                           endpoint_ids=[0, 1]),
        instance_id=instance_id, role=common_pb2.ROLE_UNION, model="motor-sim", dp_size=2,
        endpoints=[common_pb2.Endpoint(id=r, ip=pod_ip, business_port=18000 + r) for r in (0, 1)])
