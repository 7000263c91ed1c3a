"""motor-controller: assembles instances, ingests faults, runs recovery strategies."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from gen.motor.v1 import controller_pb2_grpc
from motor.common.config import ControllerConfig
from motor.common.grpc_server import GrpcServer, ServiceBinding
from motor.common.service import base_arg_parser, config_from_args, run_service


class ControllerService:
    def __init__(self, config: ControllerConfig) -> None:
        self.config = config
        servicer = controller_pb2_grpc.ControllerServicer()
        self._grpc = GrpcServer(
            config.server,
            [
                ServiceBinding(
                    "motor.v1.Controller",
                    lambda server: controller_pb2_grpc.add_ControllerServicer_to_server(servicer, server),
                )
            ],
            "controller",
        )

    async def start(self) -> dict[str, Any]:
        return {"grpc_port": await self._grpc.start()}

    async def stop(self) -> None:
        await self._grpc.stop()


def main(argv: Sequence[str] | None = None) -> int:
    parser = base_arg_parser("motor-controller", __doc__ or "")
    parser.add_argument("--etcd", action="append", help="etcd endpoint host:port (overrides store.etcd_endpoints)")

    def build(args: argparse.Namespace) -> ControllerService:
        extra = [("store.etcd_endpoints", args.etcd)] if args.etcd else []
        return ControllerService(config_from_args(ControllerConfig, args, extra))

    return run_service("motor-controller", build, parser, argv)


if __name__ == "__main__":
    sys.exit(main())
