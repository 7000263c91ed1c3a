"""motor-coordinator: routes inference to the serving view the Controller publishes."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from gen.motor.v1 import coordinator_pb2_grpc
from motor.common.config import CoordinatorConfig
from motor.common.grpc_server import GrpcServer, ServiceBinding
from motor.common.service import base_arg_parser, config_from_args, run_service


class CoordinatorService:
    def __init__(self, config: CoordinatorConfig) -> None:
        self.config = config
        servicer = coordinator_pb2_grpc.CoordinatorServicer()
        self._grpc = GrpcServer(
            config.server,
            [
                ServiceBinding(
                    "motor.v1.Coordinator",
                    lambda server: coordinator_pb2_grpc.add_CoordinatorServicer_to_server(servicer, server),
                )
            ],
            "coordinator",
        )

    async def start(self) -> dict[str, Any]:
        return {"grpc_port": await self._grpc.start()}

    async def stop(self) -> None:
        await self._grpc.stop()


def main(argv: Sequence[str] | None = None) -> int:
    parser = base_arg_parser("motor-coordinator", __doc__ or "")

    def build(args: argparse.Namespace) -> CoordinatorService:
        return CoordinatorService(config_from_args(CoordinatorConfig, args))

    return run_service("motor-coordinator", build, parser, argv)


if __name__ == "__main__":
    sys.exit(main())
