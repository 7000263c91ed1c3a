"""motor-nodemanager: the per-pod agent that supervises local engines and proxies their FT API."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from gen.motor.v1 import node_manager_pb2_grpc
from motor.common.config import NodeManagerConfig
from motor.common.grpc_server import GrpcServer, ServiceBinding
from motor.common.service import base_arg_parser, config_from_args, run_service


class NodeManagerService:
    def __init__(self, config: NodeManagerConfig) -> None:
        self.config = config
        lifecycle = node_manager_pb2_grpc.NodeManagerServicer()
        ft = node_manager_pb2_grpc.NodeManagerFaultToleranceServicer()
        self._grpc = GrpcServer(
            config.server,
            [
                ServiceBinding(
                    "motor.v1.NodeManager",
                    lambda server: node_manager_pb2_grpc.add_NodeManagerServicer_to_server(lifecycle, server),
                ),
                ServiceBinding(
                    "motor.v1.NodeManagerFaultTolerance",
                    lambda server: node_manager_pb2_grpc.add_NodeManagerFaultToleranceServicer_to_server(ft, server),
                ),
            ],
            f"nodemanager pod={config.pod_ip}",
        )

    async def start(self) -> dict[str, Any]:
        return {"grpc_port": await self._grpc.start()}

    async def stop(self) -> None:
        await self._grpc.stop()


def main(argv: Sequence[str] | None = None) -> int:
    parser = base_arg_parser("motor-nodemanager", __doc__ or "")

    def build(args: argparse.Namespace) -> NodeManagerService:
        return NodeManagerService(config_from_args(NodeManagerConfig, args))

    return run_service("motor-nodemanager", build, parser, argv)


if __name__ == "__main__":
    sys.exit(main())
