"""The one client wrapper for the Controller peer: Register, Heartbeat, ReportSoftwareFault.

Every call carries the configured deadline; failures surface as ``grpc.aio.AioRpcError`` to the
caller, which decides about retries (registration: forever; heartbeat: next period; fault report:
a bounded number of attempts).
"""

from __future__ import annotations

import grpc

from gen.motor.v1 import controller_pb2, controller_pb2_grpc
from motor.common.config import ClientTlsConfig
from motor.common.grpc_server import open_channel


class ControllerClient:
    def __init__(self, address: str, *, timeout_sec: float, tls: ClientTlsConfig | None = None) -> None:
        self.address = address
        self.timeout_sec = timeout_sec
        self._tls = tls
        self._channel: grpc.aio.Channel | None = None
        self._stub: controller_pb2_grpc.ControllerStub | None = None

    def _ensure(self) -> controller_pb2_grpc.ControllerStub:
        # Opened lazily inside the running event loop.
        if self._stub is None:
            self._channel = open_channel(self.address, self._tls)
            self._stub = controller_pb2_grpc.ControllerStub(self._channel)
        return self._stub

    async def register(self, request: controller_pb2.RegisterRequest) -> controller_pb2.RegisterResponse:
        return await self._ensure().Register(request, timeout=self.timeout_sec)

    async def heartbeat(self, request: controller_pb2.HeartbeatRequest) -> controller_pb2.HeartbeatResponse:
        return await self._ensure().Heartbeat(request, timeout=self.timeout_sec)

    async def report_software_fault(
        self, request: controller_pb2.ReportSoftwareFaultRequest
    ) -> controller_pb2.ReportSoftwareFaultResponse:
        return await self._ensure().ReportSoftwareFault(request, timeout=self.timeout_sec)

    async def close(self) -> None:
        if self._channel is not None:
            await self._channel.close(grace=None)
        self._channel = None
        self._stub = None


def rpc_error_text(exc: BaseException) -> str:
    if isinstance(exc, grpc.aio.AioRpcError):
        return f"{exc.code().name}: {exc.details()}"
    return f"{type(exc).__name__}: {exc}"
