"""One client wrapper per peer: every remote call of the Controller goes through here, with a
deadline, and fails with PeerCallError naming the peer, the call and the gRPC status.

With a `Leadership` (replicas electing a leader) every call is first checked against this
replica's fence and refused locally when it does not lead now (`NotLeaderCallError`, nothing is
sent), and carries the leader term in its metadata so a receiver refuses a deposed leader's call
(`motor.common.term_fence`)."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import grpc

from gen.motor.v1 import common_pb2, coordinator_pb2, coordinator_pb2_grpc, node_manager_pb2, node_manager_pb2_grpc
from motor.common.cert_reload import client_files, close_later
from motor.common.config.tls import ClientTlsConfig
from motor.common.grpc_server import open_channel
from motor.common.metadata import MANAGEMENT_KEY_METADATA
from motor.common.security import client_tls, read_key_file
from motor.controller.config import ControllerConfig
from motor.controller.fencing import Leadership, NotLeaderError
from motor.controller.router_client import VllmRouterClient

log = logging.getLogger(__name__)


class PeerCallError(RuntimeError):
    def __init__(self, call: str, target: str, code: grpc.StatusCode | None, details: str) -> None:
        self.call, self.target, self.code, self.details = call, target, code, details
        code_name = code.name if code is not None else "ERROR"
        super().__init__(f"{call} to {target} failed: {code_name}: {details}")


class NotLeaderCallError(PeerCallError):
    """Refused before sending: this replica does not lead now."""

    def __init__(self, call: str, target: str, reason: str) -> None:
        super().__init__(call, target, None, reason)
        self.args = (reason,)

    def __str__(self) -> str:
        return self.args[0]


async def _invoke(call: str, target: str, method, request, timeout_sec: float, metadata=None,
                  leadership: Leadership | None = None):
    if leadership is not None:
        try:
            fence = leadership.check(f"{call} to {target} not sent:")
        except NotLeaderError as exc:
            raise NotLeaderCallError(call, target, str(exc)) from None
        metadata = (*(metadata or ()), *leadership.call_metadata(fence)) or None
    try:
        return await method(request, timeout=timeout_sec, metadata=metadata)
    except grpc.aio.AioRpcError as exc:
        raise PeerCallError(call, target, exc.code(), exc.details() or "") from None


class NodeManagerClient:
    """The Controller's view of one NodeManager (FT proxy + lifecycle)."""

    def __init__(self, address: str, tls: ClientTlsConfig | None, request_timeout_sec: float,
                 leadership: Leadership | None = None) -> None:
        self.address = address
        self._timeout = request_timeout_sec
        self._leadership = leadership
        self._channel = open_channel(address, tls)
        self._ft = node_manager_pb2_grpc.NodeManagerFaultToleranceStub(self._channel)
        self._life = node_manager_pb2_grpc.NodeManagerStub(self._channel)

    async def guard(self, instance_id: int, request_id: str, lease_sec: float,
                    then_status: node_manager_pb2.StatusRead | None = None) -> node_manager_pb2.GuardResponse:
        """`then_status`: a status read once the guard holds, in the answer's `status` (unset from a
        NodeManager that predates it); the deadline grows by its settle_sec."""
        req = node_manager_pb2.GuardRequest(instance_id=instance_id, request_id=request_id, lease_sec=lease_sec,
                                            then_status=then_status)
        return await _invoke("guard", self.address, self._ft.Guard, req, self._with_read(then_status),
                             leadership=self._leadership)

    def _with_read(self, then_status: node_manager_pb2.StatusRead | None) -> float:
        return self._timeout + (then_status.settle_sec if then_status is not None else 0.0)

    async def status(self, instance_id: int, request_id: str, endpoint_ids: Sequence[int],
                     wait_while: Iterable[tuple[int, int]] = (), settle_sec: float = 0.0,
                     taken_as_evidence: bool = False, reread_max_sec: float = 0.0) -> list[common_pb2.EngineFtStatus]:
        """With `wait_while` and `settle_sec`, a long poll (the NodeManager answers once no engine is in
        one of those (status, ft_state) pairs, or after settle_sec, reading a waiting engine again at
        least every `reread_max_sec`, 0: its own cadence); the deadline grows by settle_sec.
        `taken_as_evidence`: the caller records the UNHEALTHY and DEAD entries as evidence, so the
        NodeManager does not report them again."""
        req = node_manager_pb2.StatusRequest(
            instance_id=instance_id, request_id=request_id, endpoint_ids=list(endpoint_ids), settle_sec=settle_sec,
            taken_as_evidence=taken_as_evidence, reread_max_sec=reread_max_sec,
            wait_while=[node_manager_pb2.EngineState(status=s, ft_state=f) for s, f in sorted(wait_while)])
        resp = await _invoke("status", self.address, self._ft.Status, req, self._timeout + settle_sec,
                             leadership=self._leadership)
        return list(resp.engines)

    async def apply(
        self,
        instance_id: int,
        request_id: str,
        removed_dp_ranks: Sequence[int],
        dp_master_ip: str,
        dp_master_rank: int,
        endpoint_ids: Sequence[int],
        dp_store_port: int = 0,
        instruction: int = node_manager_pb2.INSTRUCTION_SCALE_DOWN,
        added_dp_ranks: Sequence[int] = (),
        round_removed_dp_ranks: Sequence[int] = (),
        then_status: node_manager_pb2.StatusRead | None = None,
    ) -> node_manager_pb2.ApplyResponse:
        """`then_status`: a status read once every target accepted, in the answer's `status`
        (unset when not accepted, or from a NodeManager that predates it)."""
        req = node_manager_pb2.ApplyRequest(
            then_status=then_status,
            added_dp_ranks=list(added_dp_ranks),
            round_removed_dp_ranks=list(round_removed_dp_ranks),
            instance_id=instance_id,
            request_id=request_id,
            instruction=instruction,
            removed_dp_ranks=list(removed_dp_ranks),
            dp_master_ip=dp_master_ip,
            dp_master_rank=dp_master_rank,
            endpoint_ids=list(endpoint_ids),
            dp_store_port=dp_store_port,
        )
        return await _invoke("apply", self.address, self._ft.Apply, req, self._with_read(then_status),
                             leadership=self._leadership)

    async def finalize(
        self, instance_id: int, request_id: str, commit: bool, retired_ids: Iterable[int]
    ) -> node_manager_pb2.FinalizeResponse:
        req = node_manager_pb2.FinalizeRequest(
            instance_id=instance_id, request_id=request_id, commit=commit, retired_ids=list(retired_ids)
        )
        return await _invoke("finalize", self.address, self._ft.Finalize, req, self._timeout, leadership=self._leadership)

    async def stop_engines(self, instance_id: int, request_id: str, timeout_sec: float) -> node_manager_pb2.StopEnginesResponse:
        req = node_manager_pb2.StopEnginesRequest(instance_id=instance_id, request_id=request_id)
        return await _invoke("stop_engines", self.address, self._life.StopEngines, req, timeout_sec,
                             leadership=self._leadership)

    async def start_engines(
        self, instance_id: int, request_id: str, dp_master_ip: str, dp_master_port: int, timeout_sec: float,
        endpoint_ids: Sequence[int] = (), join: bool = False,
    ) -> node_manager_pb2.StartEnginesResponse:
        """`join`: `endpoint_ids` start as joiners of the scale-up `request_id` (the others run on)."""
        req = node_manager_pb2.StartEnginesRequest(
            instance_id=instance_id, request_id=request_id, dp_master_ip=dp_master_ip, dp_master_port=dp_master_port,
            endpoint_ids=list(endpoint_ids), join=join,
        )
        return await _invoke("start_engines", self.address, self._life.StartEngines, req, timeout_sec,
                             leadership=self._leadership)

    async def stop_pod(self, request_id: str, reason: str, instance_id: int, pod_ip: str
                       ) -> node_manager_pb2.StopPodResponse:
        """`instance_id` and `pod_ip` name the pod meant: the NodeManager refuses a stop of another."""
        req = node_manager_pb2.StopPodRequest(request_id=request_id, reason=reason, instance_id=instance_id,
                                              pod_ip=pod_ip)
        return await _invoke("stop_pod", self.address, self._life.StopPod, req, self._timeout, leadership=self._leadership)

    async def close(self) -> None:
        await self._channel.close()


class NodeManagerClients:
    """Clients by NodeManager address, created on first use and reused."""

    def __init__(self, tls: ClientTlsConfig | None, request_timeout_sec: float,
                 leadership: Leadership | None = None) -> None:
        self._tls = tls
        self._timeout = request_timeout_sec
        self._leadership = leadership
        self._clients: dict[str, NodeManagerClient] = {}
        # Rotated certificate files reopen the channels (their credentials are fixed when opened).
        self._files = client_files(tls)
        self._stamps: dict[str, tuple] = {}

    def get(self, address: str) -> NodeManagerClient:
        client = self._clients.get(address)
        if client is not None and self._files is not None and self._files.changed_since(self._stamps[address]):
            log.warning("certificate files changed; channel to NodeManager %s reopened", address)
            close_later(self._clients.pop(address)._channel)
            client = None
        if client is None:
            if self._files is not None:
                self._stamps[address] = self._files.stamp()
            client = self._clients[address] = NodeManagerClient(address, self._tls, self._timeout, self._leadership)
        return client

    async def close(self) -> None:
        clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            await client.close()


class CoordinatorClient:
    def __init__(self, address: str, tls: ClientTlsConfig | None, request_timeout_sec: float, management_key: str | None = None,
                 leadership: Leadership | None = None) -> None:
        self.address = address
        self._tls = tls
        self._timeout = request_timeout_sec
        self._leadership = leadership
        # Rotated certificate files reopen the channel (its credentials are fixed when opened).
        self._files = client_files(tls)
        self._open()
        self._metadata = ((MANAGEMENT_KEY_METADATA, management_key),) if management_key else None

    def _open(self) -> None:
        self._stamp = self._files.stamp() if self._files is not None else None
        self._channel = open_channel(self.address, self._tls)
        self._stub_now = coordinator_pb2_grpc.CoordinatorStub(self._channel)

    @property
    def _stub(self) -> coordinator_pb2_grpc.CoordinatorStub:
        if self._files is not None and self._files.changed_since(self._stamp):
            log.warning("certificate files changed; channel to the Coordinator %s reopened", self.address)
            close_later(self._channel)
            self._open()
        return self._stub_now

    async def refresh(self, event: int, instances: Sequence[common_pb2.Instance], revision: int) -> int:
        req = coordinator_pb2.RefreshRequest(event=event, instances=list(instances), revision=revision)
        name = coordinator_pb2.RefreshEvent.Name(event).removeprefix("REFRESH_EVENT_").lower()
        resp = await _invoke(f"refresh:{name}", self.address, self._stub.Refresh, req, self._timeout, self._metadata,
                             leadership=self._leadership)
        return resp.revision

    async def list_instances(self) -> coordinator_pb2.ListInstancesResponse:
        return await _invoke(
            "list_instances", self.address, self._stub.ListInstances, coordinator_pb2.ListInstancesRequest(), self._timeout,
            leadership=self._leadership)

    async def send_canary(self, instance_id: int, endpoint_ids: Sequence[int], timeout_sec: float,
                          request_id: str) -> coordinator_pb2.SendCanaryResponse:
        """The idle-fault probe: one canary request to the first published endpoint of `endpoint_ids`."""
        req = coordinator_pb2.SendCanaryRequest(instance_id=instance_id, endpoint_ids=list(endpoint_ids),
                                                timeout_sec=timeout_sec, request_id=request_id)
        return await _invoke("send_canary", self.address, self._stub.SendCanary, req, timeout_sec + self._timeout,
                             self._metadata, leadership=self._leadership)

    async def close(self) -> None:
        await self._channel.close()


@dataclass
class ControllerPeers:
    """The Controller's clients of its peers, built once by the process and injected (tests pass doubles)."""

    nodemanagers: NodeManagerClients
    coordinator: CoordinatorClient | None
    # vllm-router worker-API clients (motor.controller.publishers.vllm_router), one per router.
    routers: list[VllmRouterClient] = field(default_factory=list)

    @classmethod
    def from_config(cls, config: ControllerConfig, leadership: Leadership | None = None) -> ControllerPeers:
        """`leadership`: every call checked against this replica's fence and carrying its term."""
        timeout = config.fault_tolerance_config.dp_scale_down_config.request_timeout_sec
        tls = client_tls(config.client_tls, config.security)
        key = config.coordinator_management_key or (
            read_key_file(config.coordinator_management_key_file, "coordinator_management_key_file")
            if config.coordinator_management_key_file else None)
        publication = config.publication
        coordinator = (
            CoordinatorClient(config.coordinator_address, tls, timeout, key, leadership)
            if config.coordinator_address and "coordinator" in publication.publishers
            else None
        )
        routers = ([VllmRouterClient(router, leadership) for router in publication.vllm_routers]
                   if "vllm_router" in publication.publishers else [])
        return cls(NodeManagerClients(tls, timeout, leadership), coordinator, routers)
