"""The one client wrapper for the Controller peer: Register, Heartbeat, ReportSoftwareFault(s).

Heartbeats go as messages of one long-lived HeartbeatStream call, with a unary Heartbeat whenever
the stream cannot answer (`nodemanager.heartbeat_stream`).

Every call carries the configured deadline and goes to the Controller leader among the configured
replicas (`motor.common.leader_client`: a standby names the leader, a silent replica makes the next
one tried). Failures surface as ``grpc.aio.AioRpcError``, or ``LeaderUnavailable`` while no replica
leads (an election under way), to the caller, which decides about retries (registration: forever;
heartbeat: next period; fault report: a bounded number of attempts, held while no replica leads).
`term` is the leader term of the last answer; `on_term` sees every one (the NodeManager's fence).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import grpc

from gen.motor.v1 import controller_pb2
from motor.common.config.tls import ClientTlsConfig
from motor.common.leader_client import LeaderFollowingClient, LeaderUnavailable
from nodemanager.heartbeat_stream import HeartbeatStream

__all__ = ["ControllerClient", "LeaderUnavailable", "rpc_error_text"]


class ControllerClient:
    def __init__(self, address: str | Sequence[str], *, timeout_sec: float, tls: ClientTlsConfig | None = None,
                 on_term: Callable[[int], None] | None = None) -> None:
        addresses = [address] if isinstance(address, str) else list(address)
        self._leader = LeaderFollowingClient(addresses, timeout_sec=timeout_sec, tls=tls,
                                             label="nodemanager controller client", on_term=on_term)
        self.heartbeats = HeartbeatStream(self._leader)
        self.timeout_sec = timeout_sec

    @property
    def address(self) -> str:
        """The replica calls go to now (the leader, as far as this client knows)."""
        return self._leader.address

    @property
    def addresses(self) -> list[str]:
        return self._leader.addresses

    @property
    def term(self) -> int:
        return self._leader.term

    async def register(self, request: controller_pb2.RegisterRequest) -> controller_pb2.RegisterResponse:
        return await self._leader.call("Register", request)

    async def heartbeat(self, request: controller_pb2.HeartbeatRequest) -> controller_pb2.HeartbeatResponse:
        return await self.heartbeats.heartbeat(request)

    async def report_software_fault(
        self, request: controller_pb2.ReportSoftwareFaultRequest
    ) -> controller_pb2.ReportSoftwareFaultResponse:
        return await self._leader.call("ReportSoftwareFault", request)

    async def report_software_faults(
        self, request: controller_pb2.ReportSoftwareFaultsRequest
    ) -> controller_pb2.ReportSoftwareFaultsResponse:
        return await self._leader.call("ReportSoftwareFaults", request)

    async def close(self) -> None:
        self.heartbeats.close()
        await self._leader.close()


def rpc_error_text(exc: BaseException) -> str:
    if isinstance(exc, grpc.aio.AioRpcError):
        return f"{exc.code().name}: {exc.details()}"
    return f"{type(exc).__name__}: {exc}"
