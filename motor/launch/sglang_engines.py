"""`SglangEngines`: the reference engine in SGLang's shape (docs/engine-dialects.md). The launcher
starts one instance FT manager per instance (``motor.sim.instance_ft``, on the instance's first pod
address, a free port), the NodeManagers launch `motor-engine-sim --ft-dialect sglang` per rank as
for `ReferenceEngines`, and every NodeManager speaks the ``sglang`` dialect to that manager. As with
SGLang, inference goes through the manager's one endpoint: every NodeManager registers it as its
endpoints' ``instance_route`` (``engine_inference_address``), so the Coordinator pins each request's
rank with ``routed_dp_rank``; ``pin_ranks=False`` keeps the ranks' own ports instead."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from motor.common.ports import free_port
from motor.common.process import ManagedProcess, start_process
from motor.launch.engines import ReferenceEngines
from motor.launch.spec import ClusterSpec, PodPlan, PortsPlan


class SglangEngines(ReferenceEngines):
    def __init__(self, *, manager_args: list[str] | None = None, pin_ranks: bool = True,
                 zygote_address: str | None = None) -> None:
        super().__init__(zygote_address=zygote_address)
        self.manager_args = list(manager_args or [])
        self.pin_ranks = pin_ranks
        self.managers: dict[int, tuple[str, int]] = {}
        self._ports: PortsPlan | None = None

    def plan_ports(self, spec: ClusterSpec) -> PortsPlan:
        self._ports = super().plan_ports(spec)
        for iid in spec.instance_ids():
            ip = spec.pod_ip(iid, 0)
            self.managers[iid] = (ip, free_port(ip))
        return self._ports

    def manager_url(self, instance_id: int) -> str:
        host, port = self.managers[instance_id]
        return f"http://{host}:{port}"

    def nodemanager_keys(self, spec: ClusterSpec, pod: PodPlan, run_dir: Path) -> dict[str, Any]:
        keys = super().nodemanager_keys(spec, pod, run_dir)
        host, port = self.managers[pod.instance_id]
        keys["engine_extra_args"] += ["--ft-dialect", "sglang", "--diagnosing-sec", "0",
                                      "--ft-manager-address", f"{host}:{port}"]
        keys["engine_ft_dialect"] = "sglang"
        keys["engine_ft_manager_address"] = f"{host}:{port}"
        if self.pin_ranks:
            keys["engine_inference_address"] = f"{host}:{port}"
        return keys

    def start(self, spec: ClusterSpec, run_dir: Path, timeout_sec: float) -> dict[str, ManagedProcess]:
        assert self._ports is not None, "plan_ports first"
        processes = super().start(spec, run_dir, timeout_sec)
        started: dict[str, tuple[ManagedProcess, Path]] = {}
        for iid in spec.instance_ids():
            host, port = self.managers[iid]
            name = f"ft-manager-{iid}"
            ready = run_dir / f"{name}.ready.json"
            ready.unlink(missing_ok=True)
            argv = [sys.executable, "-m", "motor.sim.instance_ft", "--dp-size", str(spec.dp_size), "--host", host,
                    "--port", str(port), "--ready-file", str(ready), "--enable-fault-injection",
                    "--dp-store-port-base", str(self._ports.dp_store_port_base[iid]),
                    "--ft-timeout-sec", str(spec.engine_recovery_timeout_sec), *self.manager_args]
            started[name] = (start_process(argv, log_path=run_dir / f"{name}.log", name=name), ready)
        try:
            for proc, ready in started.values():
                proc.wait_ready_file(ready, timeout_sec, required_keys=["port"])
        except BaseException:
            for proc in [*processes.values(), *(proc for proc, _ in started.values())]:
                proc.stop(grace_sec=5)
            raise
        return {**processes, **{name: proc for name, (proc, _) in started.items()}}
