"""The engine backends a `LocalCluster` runs its instances on.

* `ReferenceEngines`: every NodeManager launches `motor-engine-sim` per rank (real gloo groups over
  TCPStores, the reference engine's FT API and `/motor/admin/inject`). Ports are probed free on the
  machine, since the engines bind their stores.
* `LightEngines`: every rank of one instance is a fake API in one `motor.testing.fake_engine --group`
  process the launcher starts itself, on the rank's pod address and a fixed port; the NodeManagers
  supervise one placeholder process per rank (``sleep``: launched, watched and health-checked like
  an engine). `kill_process` kills the placeholder *and* the rank's fake API, so the NodeManager's
  process watch sees the death at once, as for a real engine. Hundreds of ranks per process.

Both take the same fault names (`motor.sim.injection.FAULTS`) on the same admin route
(``POST /motor/admin/inject``, what `motorctl inject` calls), so a test injects the same way on either.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from motor.common.ports import ephemeral_range, free_port, port_free
from motor.common.process import ManagedProcess, start_process
from motor.launch.render import device_infos
from motor.launch.spec import ClusterSpec, PodPlan, PortsPlan, fixed_ports
from motor.sim.client import inject_fault
from motor.sim.zygote import start_zygote

LIGHT_ENGINE_PORT_BASE = 18000


class EngineBackend(Protocol):
    def plan_ports(self, spec: ClusterSpec) -> PortsPlan: ...

    def nodemanager_keys(self, spec: ClusterSpec, pod: PodPlan, run_dir: Path) -> dict[str, Any]: ...

    def start(self, spec: ClusterSpec, run_dir: Path, timeout_sec: float) -> dict[str, ManagedProcess]: ...

    def engine_address(self, spec: ClusterSpec, instance_id: int, rank: int) -> tuple[str, int] | None: ...

    def inject(self, url: str, fault: str, params: dict[str, Any],
               placeholder_pid: Callable[[], int]) -> dict[str, Any]: ...


def store_port_base(dp_size: int, ip: str, attempts: int = 64) -> int:
    """A base for the per-round store ports (base + the ranks removed so far) below the kernel's ephemeral range,
    so no outgoing connection can be holding one when a round binds it; the whole block must be
    free now. Spread by pid so parallel clusters rarely probe the same block."""
    top = ephemeral_range().start
    first = 20000 + (os.getpid() * 97) % 10000
    for i in range(attempts):
        base = 20000 + (first - 20000 + i * 131) % (top - 20000 - dp_size)
        if all(port_free(ip, base + r, ignore_time_wait=False) for r in range(dp_size)):
            return base
    raise RuntimeError(f"no block of {dp_size} free ports below {top} on {ip} after {attempts} tries")


class ReferenceEngines:
    """motor-engine-sim per rank, started by the NodeManagers (flags from the ClusterSpec); their
    executors fork from one zygote (torch imported once): the cluster's own, or the running one at
    ``zygote_address`` (a test session's), unless ``executor_zygote`` is off, as for engines in
    containers of their own."""

    def __init__(self, *, executor_zygote: bool = True, zygote_address: str | None = None) -> None:
        self.executor_zygote = executor_zygote
        self._zygote_address = zygote_address if executor_zygote else None

    def use_zygote(self, address: str) -> None:
        """Fork from the running zygote at ``address`` instead of starting one (unless the executors
        are to spawn, or a zygote was given already)."""
        if self.executor_zygote and self._zygote_address is None:
            self._zygote_address = address

    def plan_ports(self, spec: ClusterSpec) -> PortsPlan:
        masters, bases = {}, {}
        for iid in spec.instance_ids():
            ip = spec.pod_ip(iid, 0)
            masters[iid] = free_port(ip)
            bases[iid] = store_port_base(spec.dp_size, ip)
        return PortsPlan(masters, bases)

    def nodemanager_keys(self, spec: ClusterSpec, pod: PodPlan, run_dir: Path) -> dict[str, Any]:
        keys: dict[str, Any] = {"engines": [{"dp_rank": r, "device_infos": device_infos(spec, r)} for r in pod.ranks]}
        if spec.engine_command is not None:
            keys["engine_command"] = list(spec.engine_command)
            keys["engine_extra_args"] = []
            return keys
        keys["engine_extra_args"] = [
            # --num-redundant-experts comes from ft_capability through the default command.
            "--num-experts", str(spec.num_experts),
            "--per-token-latency-sec", str(spec.per_token_latency_sec),
            "--collective-timeout-sec", str(spec.collective_timeout_sec),
            "--engine-recovery-timeout-sec", str(spec.engine_recovery_timeout_sec),
            "--model-load-sec", str(spec.model_load_sec),
            "--enable-fault-injection",
            "--apply-journal", str(run_dir / "engine-applies-rank{dp_rank}.jsonl"),
            *(["--executor-zygote", self._zygote_address] if self._zygote_address is not None else []),
            *spec.engine_args,
        ]
        return keys

    def start(self, spec: ClusterSpec, run_dir: Path, timeout_sec: float) -> dict[str, ManagedProcess]:
        """The executor zygote, unless there is one already (the NodeManagers start the engines)."""
        if not self.executor_zygote or self._zygote_address is not None:
            return {}
        proc, self._zygote_address = start_zygote(run_dir, timeout_sec)
        return {"executor-zygote": proc}

    def engine_address(self, spec: ClusterSpec, instance_id: int, rank: int) -> tuple[str, int] | None:
        return None  # chosen at launch: the NodeManager describes it

    def inject(self, url: str, fault: str, params: dict[str, Any],
               placeholder_pid: Callable[[], int]) -> dict[str, Any]:
        """Through the reference engine's admin route (as `motorctl inject` does)."""
        return inject_fault(url, fault, params)


class LightEngines:
    """One fake group process per instance (`motor.testing.fake_engine --group`)."""

    def __init__(self, *, diagnosing_sec: float = 1.5, rebuild_sec: float = 0.05, detect_sec: float = 0.0,
                 checkin_sec: float = 10.0, per_token_latency_sec: float = 0.0, restartable: bool = False) -> None:
        # restartable: each rank's placeholder is `motor.testing.fake_placeholder` (a small Python
        # process reporting its start and stop to the group), so a NodeManager's relaunch restarts the
        # rank (a whole-instance reconfiguration); otherwise `sleep` (fleets of hundreds of ranks).
        self.restartable = restartable
        self.diagnosing_sec = diagnosing_sec
        self.rebuild_sec = rebuild_sec
        self.detect_sec = detect_sec
        self.checkin_sec = checkin_sec
        self.per_token_latency_sec = per_token_latency_sec

    def plan_ports(self, spec: ClusterSpec) -> PortsPlan:
        return fixed_ports(spec)

    def engine_address(self, spec: ClusterSpec, instance_id: int, rank: int) -> tuple[str, int]:
        return spec.pod_ip(instance_id, spec.pod_of(rank)), LIGHT_ENGINE_PORT_BASE + rank % spec.ranks_per_pod

    def control_address(self, spec: ClusterSpec, instance_id: int) -> tuple[str, int]:
        """The group's lifecycle listener (restartable placeholders report there)."""
        return spec.pod_ip(instance_id, 0), LIGHT_ENGINE_PORT_BASE - 1

    def placeholder_command(self, spec: ClusterSpec, instance_id: int) -> list[str]:
        if not self.restartable:
            return [shutil.which("sleep") or "/bin/sleep", "infinity"]
        host, port = self.control_address(spec, instance_id)
        return [sys.executable, "-m", "motor.testing.fake_placeholder", "--control", f"http://{host}:{port}",
                "--rank", "{dp_rank}"]

    def nodemanager_keys(self, spec: ClusterSpec, pod: PodPlan, run_dir: Path) -> dict[str, Any]:
        return {
            "engines": [{"dp_rank": r, "port": self.engine_address(spec, pod.instance_id, r)[1],
                         "device_infos": device_infos(spec, r)} for r in pod.ranks],
            "engine_command": self.placeholder_command(spec, pod.instance_id),
            # Placeholders stop at once and are "ready" as soon as the fake API is.
            "engine_stop_grace_sec": 2.0,
            "engine_ready_timeout_sec": 120.0,
        }

    def group_argv(self, spec: ClusterSpec, instance_id: int, ready: Path) -> list[str]:
        endpoints = ",".join(f"{h}:{p}" for h, p in (self.engine_address(spec, instance_id, r)
                                                       for r in range(spec.dp_size)))
        return [sys.executable, "-m", "motor.testing.fake_engine", "--group", "--endpoints", endpoints,
                "--ranks", ",".join(str(r) for r in range(spec.dp_size)), "--model", spec.model,
                "--diagnosing-sec", str(self.diagnosing_sec), "--rebuild-sec", str(self.rebuild_sec),
                "--detect-sec", str(self.detect_sec), "--checkin-sec", str(self.checkin_sec),
                "--per-token-latency-sec", str(self.per_token_latency_sec), "--ready-file", str(ready),
                *self._control_argv(spec, instance_id)]

    def _control_argv(self, spec: ClusterSpec, instance_id: int) -> list[str]:
        if not self.restartable:
            return []
        host, port = self.control_address(spec, instance_id)
        return ["--control", f"{host}:{port}"]

    def start(self, spec: ClusterSpec, run_dir: Path, timeout_sec: float) -> dict[str, ManagedProcess]:
        """Every instance's group process; returned once each serves, by name."""
        started: dict[str, tuple[ManagedProcess, Path]] = {}
        for iid in spec.instance_ids():
            name = f"engines-{iid}"
            ready = run_dir / f"{name}.ready.json"
            ready.unlink(missing_ok=True)
            proc = start_process(self.group_argv(spec, iid, ready), log_path=run_dir / f"{name}.log", name=name)
            started[name] = (proc, ready)
        for proc, ready in started.values():
            proc.wait_ready_file(ready, timeout_sec, required_keys=["ranks"])
        return {name: proc for name, (proc, _) in started.items()}

    def inject(self, url: str, fault: str, params: dict[str, Any],
               placeholder_pid: Callable[[], int]) -> dict[str, Any]:
        """Through the fake's copy of the reference engine's admin route; `kill_process` first
        SIGKILLs the rank's placeholder, so its NodeManager's process watch sees the death."""
        if fault == "kill_process":
            pid = placeholder_pid()
            if pid > 0:  # 0 would signal this process's own group
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        return inject_fault(url, fault, params)
