"""A recording Controller peer on a real gRPC server (thread pool, so it serves whatever event loop
the caller runs): records Register / Heartbeat / ReportSoftwareFault(s) and answers with a settable
NodeManagerFtConfig. Not a Controller: no decisions, only what a NodeManager test needs to observe.
"""

from __future__ import annotations

import threading
from concurrent import futures
from typing import Any

import grpc

from gen.motor.v1 import controller_pb2, controller_pb2_grpc


class FakeController(controller_pb2_grpc.ControllerServicer):
    def __init__(self, *, proxy_enabled: bool = True, heartbeat_interval_sec: float = 0.2,
                 send_config: bool = True, known_pods: tuple[str, ...] = ()) -> None:
        """`known_pods`: pods known without registering (a Controller restarted from its store)."""
        self.lock = threading.Lock()
        self.proxy_enabled = proxy_enabled
        self.heartbeat_interval_sec = heartbeat_interval_sec
        self.send_config = send_config
        self.refuse_registrations = 0
        self.registers: list[controller_pb2.RegisterRequest] = []
        self.heartbeats: list[controller_pb2.HeartbeatRequest] = []
        self.reports: list[controller_pb2.ReportSoftwareFaultRequest] = []
        self._known: set[str] = set(known_pods)
        self._server: grpc.Server | None = None
        self.port = 0
        self.host = "127.0.0.1"

    # -- control ----------------------------------------------------------------------------
    def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=8), options=[("grpc.so_reuseport", 0)])
        controller_pb2_grpc.add_ControllerServicer_to_server(self, server)
        self.host = host
        self.port = server.add_insecure_port(f"{host}:{port}")
        server.start()
        self._server = server
        return self.address

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop(grace=0).wait(5)
            self._server = None

    def forget(self, pod_ip: str) -> None:
        """The next heartbeat of this pod gets known=false."""
        with self.lock:
            self._known.discard(pod_ip)

    def _config(self) -> controller_pb2.NodeManagerFtConfig:
        return controller_pb2.NodeManagerFtConfig(
            enable_dp_scale_down_proxy=self.proxy_enabled, heartbeat_interval_sec=self.heartbeat_interval_sec
        )

    # -- servicer ---------------------------------------------------------------------------
    def Register(self, request: controller_pb2.RegisterRequest, context: Any) -> controller_pb2.RegisterResponse:
        with self.lock:
            self.registers.append(request)
            if self.refuse_registrations > 0:
                self.refuse_registrations -= 1
                return controller_pb2.RegisterResponse(accepted=False, message="refused by the test")
            self._known.add(request.pod.pod_ip)
            resp = controller_pb2.RegisterResponse(accepted=True, message="ok")
            if self.send_config:
                resp.config.CopyFrom(self._config())
            return resp

    def HeartbeatStream(self, request_iterator: Any, context: Any) -> Any:
        # A Controller from before the stream: NodeManagers send it unary heartbeats.
        context.abort(grpc.StatusCode.UNIMPLEMENTED, "this Controller has no HeartbeatStream")

    def Heartbeat(self, request: controller_pb2.HeartbeatRequest, context: Any) -> controller_pb2.HeartbeatResponse:
        with self.lock:
            self.heartbeats.append(request)
            resp = controller_pb2.HeartbeatResponse(known=request.pod_ip in self._known)
            if self.send_config:
                resp.config.CopyFrom(self._config())
            return resp

    def ReportSoftwareFault(self, request: controller_pb2.ReportSoftwareFaultRequest,
                            context: Any) -> controller_pb2.ReportSoftwareFaultResponse:
        with self.lock:
            self.reports.append(request)
        return controller_pb2.ReportSoftwareFaultResponse(accepted=True)

    def ReportSoftwareFaults(self, request: controller_pb2.ReportSoftwareFaultsRequest,
                             context: Any) -> controller_pb2.ReportSoftwareFaultsResponse:
        with self.lock:
            self.reports.extend(request.reports)
        return controller_pb2.ReportSoftwareFaultsResponse(
            results=[controller_pb2.ReportSoftwareFaultResult(accepted=True) for _ in request.reports])

    # -- observation ------------------------------------------------------------------------
    def reports_of(self, endpoint_id: int, kind: int | None = None) -> list[controller_pb2.ReportSoftwareFaultRequest]:
        with self.lock:
            return [r for r in self.reports if r.endpoint_id == endpoint_id and (kind is None or r.kind == kind)]

    def last_heartbeat(self) -> controller_pb2.HeartbeatRequest | None:
        with self.lock:
            return self.heartbeats[-1] if self.heartbeats else None

    def heartbeats_since(self, index: int) -> list[controller_pb2.HeartbeatRequest]:
        """Heartbeats received after the first ``index`` ones (use ``len(heartbeats)`` as a mark)."""
        with self.lock:
            return self.heartbeats[index:]
