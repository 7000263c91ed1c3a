"""gRPC servicer of motor.v1.NodeManager (engine lifecycle, pod stop, describe): adapts requests to
calls of the agent's parts (``EngineLifecycle``, ``ExitPolicy``); errors map to status codes through
``nodemanager.rpc``."""

from __future__ import annotations

import grpc

from gen.motor.v1 import node_manager_pb2, node_manager_pb2_grpc
from nodemanager.agent import NodeManagerAgent
from nodemanager.errors import FailedPrecondition
from nodemanager.ft_service import engine_timeout
from nodemanager.pod_stop import stop_target_mismatch
from nodemanager.rpc import rpc_method


class LifecycleServicer(node_manager_pb2_grpc.NodeManagerServicer):
    def __init__(self, agent: NodeManagerAgent) -> None:
        self._agent = agent

    @rpc_method("StartEngines")
    async def StartEngines(self, request: node_manager_pb2.StartEnginesRequest, context: grpc.aio.ServicerContext
                           ) -> node_manager_pb2.StartEnginesResponse:
        launch = await self._agent.engines.start_engines(
            instance_id=request.instance_id, request_id=request.request_id, dp_master_ip=request.dp_master_ip,
            dp_master_port=request.dp_master_port, endpoint_ids=list(request.endpoint_ids),
            timeout_sec=engine_timeout(context), join=request.join,
        )
        return node_manager_pb2.StartEnginesResponse(endpoints=[e.to_pb() for e in launch.endpoints],
                                                     launched_at_unix_sec=launch.launched_at_unix_sec)

    @rpc_method("StopEngines")
    async def StopEngines(self, request: node_manager_pb2.StopEnginesRequest, context: grpc.aio.ServicerContext
                          ) -> node_manager_pb2.StopEnginesResponse:
        stopped = await self._agent.engines.stop_engines(
            instance_id=request.instance_id, request_id=request.request_id, grace_sec=request.grace_sec,
            endpoint_ids=list(request.endpoint_ids),
        )
        return node_manager_pb2.StopEnginesResponse(stopped_ids=stopped)

    @rpc_method("RelaunchEngines")
    async def RelaunchEngines(self, request: node_manager_pb2.RelaunchEnginesRequest,
                              context: grpc.aio.ServicerContext) -> node_manager_pb2.RelaunchEnginesResponse:
        launch = await self._agent.engines.relaunch_engines(
            instance_id=request.instance_id, request_id=request.request_id, dp_master_ip=request.dp_master_ip,
            dp_master_port=request.dp_master_port, grace_sec=request.grace_sec, timeout_sec=engine_timeout(context),
        )
        return node_manager_pb2.RelaunchEnginesResponse(endpoints=[e.to_pb() for e in launch.endpoints],
                                                        launched_at_unix_sec=launch.launched_at_unix_sec)

    @rpc_method("StopPod")
    async def StopPod(self, request: node_manager_pb2.StopPodRequest, context: grpc.aio.ServicerContext
                      ) -> node_manager_pb2.StopPodResponse:
        config = self._agent.config
        why = stop_target_mismatch(request.instance_id, request.pod_ip, config.instance_id, config.pod_ip)
        if why is not None:
            self._agent.metrics.stop_pod_refusals.labels("instance" if "instance" in why.split(";")[0]
                                                         else "pod").inc()
            raise FailedPrecondition(f"StopPod {why}: not obeyed (pod {config.pod_ip})")
        self._agent.exit_policy.stop_pod(request.request_id, request.reason)
        return node_manager_pb2.StopPodResponse(accepted=True)

    @rpc_method("DescribePod")
    async def DescribePod(self, request: node_manager_pb2.DescribePodRequest, context: grpc.aio.ServicerContext
                          ) -> node_manager_pb2.DescribePodResponse:
        agent = self._agent
        holder = agent.guard.live_holder()
        return node_manager_pb2.DescribePodResponse(
            pod=agent.pod_pb(),
            instance_id=agent.config.instance_id,
            engines=[
                node_manager_pb2.EngineProcess(endpoint=v.endpoint.to_pb(), pid=v.pid, running=v.running,
                                               exit_code=v.exit_code, retired=v.retired)
                for v in agent.engines.describe()
            ],
            ft_proxy_enabled=agent.state.proxy_enabled,
            guard_request_id=holder or "",
            guard_remaining_sec=agent.guard.remaining_sec() if holder else 0.0,
        )
