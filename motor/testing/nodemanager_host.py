"""Many real NodeManagers in one process, for fleet-scale benchmarks on one small machine.

Each entry of the configs file is one pod's complete NodeManagerConfig; every pod gets the real
`nodemanager.main.NodeManagerService` (its own gRPC server on its pod IP, metrics listener,
supervisor, FT poller, fault reporter, registration and heartbeat loop), only the event loop and the
interpreter are shared. 512 NodeManager processes (4,096 ranks at 8 per pod) would need ~40 GB and
more CPU than a 2-core machine has; the Controller cannot tell them apart from processes.

    python -m motor.testing.nodemanager_host --configs pods.json --ready-file ready.json

Ready file: ``{"pid", "nodemanagers": [{"pod_ip", "grpc_port", "metrics_port"}]}`` once every pod
serves. SIGTERM/SIGINT stop every pod (their engines with them). A pod asking to exit (StopPod,
``exit_when_all_engines_dead``) is stopped alone; the host goes on.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from motor.common.service import configure_logging, write_ready_file
from nodemanager.config import NodeManagerConfig
from nodemanager.main import NodeManagerService

log = logging.getLogger("motor.testing.nodemanager_host")

# Pods started at once (each spawns its engines and binds two listeners).
_START_BATCH = 16


async def _run(configs: list[NodeManagerConfig], ready_file: Path | None) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    services: list[NodeManagerService] = []
    stopping: set[asyncio.Task[None]] = set()

    def exit_request(service_index: int):
        def request(code: int, reason: str) -> None:
            log.warning("pod %s asks to exit with %d (%s): stopping that pod only",
                        configs[service_index].pod_ip, code, reason)
            task = asyncio.create_task(services[service_index].stop())
            stopping.add(task)
            task.add_done_callback(stopping.discard)
        return request

    infos = []
    try:
        for index, config in enumerate(configs):
            services.append(NodeManagerService(config, exit_request=exit_request(index)))
        for first in range(0, len(services), _START_BATCH):
            batch = services[first:first + _START_BATCH]
            infos.extend(await asyncio.gather(*(s.start() for s in batch)))
        doc = [{"pod_ip": c.pod_ip, "grpc_port": i["grpc_port"], "metrics_port": i["metrics_port"]}
               for c, i in zip(configs, infos)]
        if ready_file is not None:
            write_ready_file(ready_file, {"nodemanagers": doc})
        log.info("nodemanager host: %d pods serving", len(services))
        await stop.wait()
    finally:
        await asyncio.gather(*stopping, return_exceptions=True)
        await asyncio.gather(*(s.stop() for s in services[:len(infos)]), return_exceptions=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="nodemanager-host", description=__doc__.splitlines()[0])
    parser.add_argument("--configs", type=Path, required=True, help="JSON list of NodeManagerConfig objects")
    parser.add_argument("--ready-file", type=Path)
    parser.add_argument("--log-level", default=os.environ.get("MOTOR_LOG_LEVEL", "INFO"))
    args = parser.parse_args(argv)
    configure_logging(args.log_level)
    raw = json.loads(args.configs.read_text())
    if not isinstance(raw, list) or not raw:
        parser.error(f"{args.configs}: expected a non-empty JSON list of NodeManager configs")
    configs = [NodeManagerConfig.model_validate(item) for item in raw]
    asyncio.run(_run(configs, args.ready_file))
    return 0


if __name__ == "__main__":
    sys.exit(main())
