"""Process lifecycle of a local cluster: spawning services on their config files, ready files,
relaunching on the same ports, and teardown by pid and process group, descendants included.

Every service runs in its own session (`motor.common.process.start_process`), logs to
<run dir>/<name>.log and announces itself in <name>.ready.json; a ready file left by an earlier run is
removed first, so it is never taken for the new process's. Engines a NodeManager started are found as
its descendants and killed by process group and pid, so nothing outlives a teardown.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from motor.common.process import ManagedProcess, signal_group, start_process

log = logging.getLogger(__name__)

BIN = Path(sys.executable).parent


@dataclass
class ServiceProc:
    name: str
    proc: ManagedProcess
    info: dict[str, Any]
    config_path: Path
    argv: list[str]
    # Set when a test expects the process to exit (a recycled pod), so waits do not fail on it.
    expected_exit: bool = False
    # Several NodeManagers share `proc` (a nodemanager host): they cannot be killed or restarted alone.
    shared: bool = False


@dataclass
class Launch:
    """A spawned service whose ready file is not read yet."""

    name: str
    proc: ManagedProcess
    config_path: Path
    ready: Path
    argv: list[str]

    def wait(self, ready_keys: Sequence[str], timeout_sec: float) -> ServiceProc:
        info = self.proc.wait_ready_file(self.ready, timeout_sec, required_keys=list(ready_keys))
        log.info("%s ready: %s", self.name, info)
        return ServiceProc(self.name, self.proc, info, self.config_path, self.argv)


def ready_path(run_dir: Path, name: str) -> Path:
    """<name>.ready.json, removed first."""
    ready = run_dir / f"{name}.ready.json"
    ready.unlink(missing_ok=True)
    return ready


def spawn_service(run_dir: Path, name: str, script: str, config: dict[str, Any],
                  extra_args: Sequence[str] = ()) -> Launch:
    """Starts the Motor service `script` on <name>.config.json (written from `config`)."""
    config_path = run_dir / f"{name}.config.json"
    config_path.write_text(json.dumps(config, indent=2))
    ready = ready_path(run_dir, name)
    argv = [str(BIN / script), "--config", str(config_path), "--ready-file", str(ready), *extra_args]
    return Launch(name, start_process(argv, log_path=run_dir / f"{name}.log", name=name), config_path, ready, argv)


def spawn_nodemanager_host(run_dir: Path, name: str, configs: list[dict[str, Any]],
                           extra_args: Sequence[str] = ()) -> Launch:
    """Many NodeManagers in one process (`motor.testing.nodemanager_host`), one config each."""
    config_path = run_dir / f"{name}.configs.json"
    config_path.write_text(json.dumps(configs))
    ready = ready_path(run_dir, name)
    argv = [sys.executable, "-m", "motor.testing.nodemanager_host", "--configs", str(config_path),
            "--ready-file", str(ready), *extra_args]
    return Launch(name, start_process(argv, log_path=run_dir / f"{name}.log", name=name), config_path, ready, argv)


def hosted_services(host: Launch, configs: list[dict[str, Any]], timeout_sec: float) -> list[ServiceProc]:
    """The host's NodeManagers once it serves, each with its own ready-file entry."""
    info = host.proc.wait_ready_file(host.ready, timeout_sec, required_keys=["nodemanagers"])
    return [ServiceProc(f"nodemanager-{cfg['pod_ip']}", host.proc, nm, host.config_path, host.argv, shared=True)
            for cfg, nm in zip(configs, info["nodemanagers"], strict=True)]


def relaunch(run_dir: Path, svc: ServiceProc, timeout_sec: float, ports: dict[str, str],
             **settings: Any) -> ServiceProc:
    """Stops `svc` and runs its command line again on its own ports (`ports`: config section →
    ready-file key of the port it bound), with top-level `settings` changed; the new ServiceProc.

    Peers know a service by address, so it keeps its ports; its argv is reused as it is (it may have
    been started another way than `spawn_service`, e.g. in a container)."""
    if svc.shared:
        raise RuntimeError(f"{svc.name} shares its process with other NodeManagers; it cannot restart alone")
    svc.proc.stop(grace_sec=5)
    ready = ready_path(run_dir, svc.name)
    cfg = json.loads(svc.config_path.read_text())
    for section, key in ports.items():
        cfg[section]["port"] = svc.info[key]
    cfg.update(settings)
    svc.config_path.write_text(json.dumps(cfg, indent=2))
    proc = start_process(svc.argv, log_path=run_dir / f"{svc.name}.log", name=svc.name)
    info = proc.wait_ready_file(ready, timeout_sec, required_keys=list(ports.values()))
    return ServiceProc(svc.name, proc, info, svc.config_path, svc.argv)


def descendant_pids(pid: int) -> list[int]:
    """Every process below `pid` (the engines a NodeManager started, and theirs); [] once it is gone."""
    try:
        return [child.pid for child in psutil.Process(pid).children(recursive=True)]
    except psutil.Error:
        return []


def sigkill_engine(pid: int) -> None:
    # An engine leads its own process group, the processes it forked do not: the group takes the
    # former with everything in it, the pid the latter.
    signal_group(pid, signal.SIGKILL)
    try:
        os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def freeze(pid: int) -> None:
    """SIGSTOP the process group: cut off from everyone while time goes on."""
    os.killpg(pid, signal.SIGSTOP)


def thaw(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGCONT)
    except ProcessLookupError:
        pass


def stop_together(procs: Iterable[ManagedProcess], grace_sec: float) -> None:
    """SIGTERM every process group at once, then wait for each (SIGKILL after the grace): many
    processes stop in one grace period rather than one after the other."""
    unique = list({p.pid: p for p in procs}.values())
    for proc in unique:
        signal_group(proc.pid, signal.SIGTERM)
    for proc in unique:
        stop_one(proc, grace_sec)


def stop_one(proc: ManagedProcess, grace_sec: float) -> None:
    try:
        proc.stop(grace_sec=grace_sec)
    except Exception as exc:  # noqa: BLE001 - keep tearing the rest down
        log.warning("stopping %s failed: %s", proc.name, exc)
