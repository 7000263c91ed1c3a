"""LocalCluster with every service in a container: the same configs, run directory, observation and
injection as the process launcher (motor.launch.cluster), but each of the Controller, the Coordinator
and the NodeManagers (which start their reference engines inside their own container) runs from the
image with host networking on loopback (127.0.0.1, and the spec's pod addresses)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from motor.common.ports import free_port
from motor.common.process import start_process
from motor.launch.cluster import LocalCluster
from motor.launch.engines import ReferenceEngines
from motor.launch.processes import Launch, ready_path
from motor.launch.spec import ClusterSpec

from .image_build import CONTAINER_PREFIX, Podman

# The image's user (deploy/Containerfile).
IMAGE_UID = 10001


class ContainerCluster(LocalCluster):
    def __init__(self, spec: ClusterSpec, run_dir: Path, podman: Podman, runtime_image: str, demo_image: str) -> None:
        # Each NodeManager's container starts its engines, and their executors, itself.
        super().__init__(spec, run_dir, ReferenceEngines(executor_zygote=False))
        self.podman = podman
        self.runtime_image = runtime_image
        self.demo_image = demo_image
        self.prefix = f"{CONTAINER_PREFIX}{os.getpid()}-"
        self.container_names: dict[str, str] = {}
        self.exit_codes: dict[str, int | None] = {}
        self.health_addresses: dict[str, str] = {}
        # The services write ready files and engine logs here as the image's unprivileged user.
        os.chown(self.run_dir, IMAGE_UID, IMAGE_UID)

    def _spawn(self, name: str, script: str, config: dict[str, Any]) -> Launch:
        host = config["server"]["host"]
        if not config["server"].get("port"):
            config["server"]["port"] = free_port(host)
        health = f"{host}:{config['server']['port']}"
        if script == "motor-controller":
            # The plaintext health-only listener (server.health_port) is what Kubernetes probes use.
            config["server"]["health_port"] = free_port(host)
            health = f"{host}:{config['server']['health_port']}"
        config_path = self.run_dir / f"{name}.config.json"
        config_path.write_text(json.dumps(config, indent=2))
        ready = ready_path(self.run_dir, name)
        container = self.prefix + name.replace("nodemanager-127.0.0.", "nm")
        image = self.demo_image if script == "motor-nodemanager" else self.runtime_image
        argv = self.podman.argv(
            # Read-only root (tmpfs /tmp), as the manifests' readOnlyRootFilesystem.
            "run", "--name", container, "--network", "host", "--read-only", "--init=false",
            "--health-interval", "disable",
            "--env", f"MOTOR_HEALTH_ADDRESS={health}", "--volume", f"{self.run_dir}:{self.run_dir}",
            "--stop-timeout", "20", image, script, "--config", str(config_path), "--ready-file", str(ready))
        self.container_names[name] = container
        self.health_addresses[name] = health
        proc = start_process(argv, log_path=self.run_dir / f"{name}.log", name=name, env=self.podman.env)
        return Launch(name, proc, config_path, ready, argv)

    def healthchecks(self) -> dict[str, tuple[int, float]]:
        """The image's HEALTHCHECK (grpc.health.v1) run in each container: name → (exit, seconds)."""
        out = {}
        for name, container in self.container_names.items():
            start = time.monotonic()
            proc = self.podman("healthcheck", "run", container, timeout_sec=60, check=False)
            out[name] = (proc.returncode, round(time.monotonic() - start, 3))
        return out

    def stop(self) -> None:
        """SIGTERM each container (PID 1 is tini, the service stops gracefully), keep its exit code,
        remove it; then the launcher's own teardown of whatever is left."""
        try:
            for name in reversed(list(self.container_names)):
                container = self.container_names[name]
                self.podman("stop", "-t", "20", container, timeout_sec=60, check=False)
                proc = self.podman("inspect", "--format", "{{.State.ExitCode}}", container, timeout_sec=30, check=False)
                self.exit_codes[name] = int(proc.stdout.strip()) if proc.returncode == 0 and proc.stdout.strip() else None
                self.podman("rm", "-f", "-t", "5", container, timeout_sec=60, check=False)
        finally:
            super().stop()
