"""A fleet for the scale benchmark: real Controller, Coordinator and NodeManagers over light fake
engines (`motor.testing.fake_engine --group`: every rank of one instance in one helper process,
speaking the reference engine's FT protocol, `diagnosing` included).

Pods get their own loopback address (127.{100+i}.{p//200}.{p%200+2} for pod p of instance i, so
nothing collides with LocalCluster's 127.0.0.x); each rank's fake API listens on its pod's address.
A NodeManager supervises one placeholder process per rank (``sleep``: the NodeManager still
launches, watches and health-checks it); ``kill_process`` kills the placeholder *and* the rank's
fake API, so the NodeManager's process watch sees the death at once, as for a real engine.

NodeManagers run as one process each (``hosted=False``), or many per process
(`motor.testing.nodemanager_host`) when there are too many pods for this machine's memory. Every
process logs to a file in the run directory and is torn down by pid (process groups, and the
placeholders, found as descendants) even when the benchmark fails.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from gen.motor.v1 import controller_pb2, controller_pb2_grpc, node_manager_pb2, node_manager_pb2_grpc
from motor.common.config.loader import set_dotted
from motor.common.process import ManagedProcess, signal_group, start_process
from motor.common.text import rank_ranges
from motor.launch.cluster import descendant_pids, spawn_service
from motor.launch.shutdown import sigterm_deferred

log = logging.getLogger(__name__)

ENGINE_PORT_BASE = 18000
STORE_PORT_BASE = 21000


@dataclass
class FleetSpec:
    instances: int = 1
    dp_size: int = 16
    ranks_per_pod: int = 8
    # Many NodeManagers per process (motor.testing.nodemanager_host), pods_per_host each.
    hosted: bool = False
    pods_per_host: int = 64
    diagnosing_sec: float = 1.5
    rebuild_sec: float = 0.05
    detect_sec: float = 0.0
    per_token_latency_sec: float = 0.0
    engine_poll_interval_sec: float = 1.0
    heartbeat_interval_sec: float = 1.0
    controller_overrides: dict[str, Any] = field(default_factory=dict)
    log_level: str = "INFO"

    @property
    def pods_per_instance(self) -> int:
        if self.dp_size % self.ranks_per_pod:
            raise ValueError(f"dp_size {self.dp_size} is not a multiple of ranks_per_pod {self.ranks_per_pod}")
        return self.dp_size // self.ranks_per_pod

    def instance_ids(self) -> list[int]:
        return list(range(1, self.instances + 1))

    def pod_ip(self, instance_id: int, pod: int) -> str:
        return f"127.{99 + instance_id}.{pod // 200}.{pod % 200 + 2}"

    def pod_of(self, rank: int) -> int:
        return rank // self.ranks_per_pod

    def engine_address(self, instance_id: int, rank: int) -> tuple[str, int]:
        return self.pod_ip(instance_id, self.pod_of(rank)), ENGINE_PORT_BASE + rank % self.ranks_per_pod


@dataclass
class NodeManagerRef:
    instance_id: int
    pod_ip: str
    ranks: list[int]
    grpc_port: int = 0
    proc: ManagedProcess | None = None  # its own process, or its host's


class Fleet:
    def __init__(self, spec: FleetSpec, run_dir: Path) -> None:
        self.spec = spec
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.controller: ManagedProcess | None = None
        self.coordinator: ManagedProcess | None = None
        self.controller_info: dict[str, Any] = {}
        self.coordinator_info: dict[str, Any] = {}
        self.engines: dict[int, ManagedProcess] = {}
        self.nm_procs: list[ManagedProcess] = []
        self.nodemanagers: dict[tuple[int, int], NodeManagerRef] = {}
        self._descendants: set[int] = set()

    # ---- start -----------------------------------------------------------------------------------
    def _service(self, name: str, script: str, config: dict[str, Any], keys: list[str],
                 timeout_sec: float = 60.0) -> tuple[ManagedProcess, dict[str, Any]]:
        proc, _, ready = spawn_service(self.run_dir, name, script, config, ["--log-level", self.spec.log_level])
        return proc, proc.wait_ready_file(ready, timeout_sec, required_keys=keys)

    def start(self, ready_timeout_sec: float = 300.0) -> Fleet:
        try:
            self._start(ready_timeout_sec)
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self, ready_timeout_sec: float) -> None:
        spec = self.spec
        started = time.monotonic()
        self.coordinator, self.coordinator_info = self._service(
            "coordinator", "motor-coordinator",
            {"server": {"host": "127.0.0.1", "port": 0}, "http": {"host": "127.0.0.1", "port": 0}},
            ["grpc_port", "http_port"])
        ctl: dict[str, Any] = {
            "server": {"host": "127.0.0.1", "port": 0},
            "status_http": {"host": "127.0.0.1", "port": 0},
            "coordinator_address": f"127.0.0.1:{self.coordinator_info['grpc_port']}",
            "fault_tolerance_config": {"enable_fault_tolerance": True, "enable_dp_scale_down": True},
            "heartbeat_interval_sec": spec.heartbeat_interval_sec,
        }
        for key, value in spec.controller_overrides.items():
            set_dotted(ctl, key, value)
        self.controller, self.controller_info = self._service("controller", "motor-controller", ctl,
                                                              ["grpc_port", "http_port"])
        for iid in spec.instance_ids():
            self._start_engines(iid)
        for iid, proc in self.engines.items():
            proc.wait_ready_file(self.run_dir / f"engines-{iid}.ready.json", 120, required_keys=["ranks"])
        configs = [self._nm_config(iid, pod) for iid in spec.instance_ids() for pod in range(spec.pods_per_instance)]
        if spec.hosted:
            self._start_hosts(configs, ready_timeout_sec)
        else:
            self._start_nm_processes(configs, ready_timeout_sec)
        log.info("fleet: every process up after %.1fs; waiting for %d instances to serve", time.monotonic() - started,
                 spec.instances)
        self.wait_serving(spec.instance_ids(), ready_timeout_sec)
        self._collect_descendants()
        log.info("fleet serving after %.1fs", time.monotonic() - started)

    def _start_engines(self, iid: int) -> None:
        spec = self.spec
        endpoints = ",".join(f"{h}:{p}" for h, p in (spec.engine_address(iid, r) for r in range(spec.dp_size)))
        ready = self.run_dir / f"engines-{iid}.ready.json"
        ready.unlink(missing_ok=True)
        argv = [sys.executable, "-m", "motor.testing.fake_engine", "--group", "--endpoints", endpoints,
                "--ranks", ",".join(str(r) for r in range(spec.dp_size)),
                "--diagnosing-sec", str(spec.diagnosing_sec), "--rebuild-sec", str(spec.rebuild_sec),
                "--detect-sec", str(spec.detect_sec), "--per-token-latency-sec", str(spec.per_token_latency_sec),
                "--ready-file", str(ready)]
        self.engines[iid] = start_process(argv, log_path=self.run_dir / f"engines-{iid}.log", name=f"engines-{iid}")

    def _nm_config(self, iid: int, pod: int) -> dict[str, Any]:
        spec = self.spec
        ip = spec.pod_ip(iid, pod)
        ranks = list(range(pod * spec.ranks_per_pod, (pod + 1) * spec.ranks_per_pod))
        self.nodemanagers[(iid, pod)] = NodeManagerRef(iid, ip, ranks)
        return {
            "server": {"host": ip, "port": 0},
            "metrics_http": {"host": ip, "port": 0},
            "pod_ip": ip,
            "node_name": f"node-{ip}",
            "controller_address": f"127.0.0.1:{self.controller_info['grpc_port']}",
            "instance_id": iid,
            "model": "motor-sim",
            "dp_size": spec.dp_size,
            "engines": [{"dp_rank": r, "port": spec.engine_address(iid, r)[1],
                         "device_infos": [{"device_id": f"Ascend910-{r % spec.ranks_per_pod}"}]} for r in ranks],
            "engine_command": [shutil.which("sleep") or "/bin/sleep", "infinity"],
            "dp_master_ip": spec.pod_ip(iid, 0),
            "dp_master_port": STORE_PORT_BASE - 1 - iid,
            "dp_store_port_base": STORE_PORT_BASE + (iid - 1) * (spec.dp_size + 8),
            "ft_capability": {"engine_ft_enabled": True, "scale_down_supported": True, "external_lb": True,
                              "auto_recovery": False, "enable_eplb": True, "num_redundant_experts": 16},
            "fault_tolerance_config": {"enable_fault_tolerance": True, "enable_dp_scale_down": True,
                                       "engine_status_poll_interval_sec": spec.engine_poll_interval_sec},
            "heartbeat_interval_sec": spec.heartbeat_interval_sec,
            "engine_stop_grace_sec": 2.0,
            "engine_ready_timeout_sec": 120.0,
            "log_dir": str(self.run_dir / "engines" / ip),
        }

    def _start_nm_processes(self, configs: list[dict[str, Any]], timeout_sec: float) -> None:
        pending = []
        for cfg in configs:
            proc, _, ready = spawn_service(self.run_dir, f"nodemanager-{cfg['pod_ip']}", "motor-nodemanager", cfg,
                                           ["--log-level", self.spec.log_level])
            self.nm_procs.append(proc)
            pending.append((cfg, proc, ready))
        for cfg, proc, ready in pending:
            info = proc.wait_ready_file(ready, timeout_sec, required_keys=["grpc_port"])
            ref = self._ref(cfg["instance_id"], cfg["pod_ip"])
            ref.grpc_port, ref.proc = info["grpc_port"], proc

    def _start_hosts(self, configs: list[dict[str, Any]], timeout_sec: float) -> None:
        per = self.spec.pods_per_host
        hosts = []
        for n, first in enumerate(range(0, len(configs), per)):
            batch = configs[first:first + per]
            path = self.run_dir / f"nm-host-{n}.configs.json"
            path.write_text(json.dumps(batch))
            ready = self.run_dir / f"nm-host-{n}.ready.json"
            ready.unlink(missing_ok=True)
            proc = start_process([sys.executable, "-m", "motor.testing.nodemanager_host", "--configs", str(path),
                                  "--ready-file", str(ready), "--log-level", self.spec.log_level],
                                 log_path=self.run_dir / f"nm-host-{n}.log", name=f"nm-host-{n}")
            self.nm_procs.append(proc)
            hosts.append((batch, proc, ready))
        for batch, proc, ready in hosts:
            info = proc.wait_ready_file(ready, timeout_sec, required_keys=["nodemanagers"])
            for cfg, nm in zip(batch, info["nodemanagers"], strict=True):
                ref = self._ref(cfg["instance_id"], cfg["pod_ip"])
                ref.grpc_port, ref.proc = nm["grpc_port"], proc

    def _ref(self, iid: int, pod_ip: str) -> NodeManagerRef:
        return next(r for r in self.nodemanagers.values() if r.instance_id == iid and r.pod_ip == pod_ip)

    # ---- observe ---------------------------------------------------------------------------------
    @property
    def controller_http(self) -> str:
        return f"http://127.0.0.1:{self.controller_info['http_port']}"

    @property
    def controller_address(self) -> str:
        return f"127.0.0.1:{self.controller_info['grpc_port']}"

    @property
    def coordinator_http(self) -> str:
        return f"http://127.0.0.1:{self.coordinator_info['http_port']}"

    def _get(self, url: str, timeout_sec: float = 10.0) -> Any:
        with urllib.request.urlopen(url, timeout=timeout_sec) as resp:
            return json.load(resp)

    def _post(self, url: str, body: dict[str, Any], timeout_sec: float = 10.0) -> Any:
        req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=timeout_sec) as resp:
            return json.load(resp)

    def runtime(self, iid: int) -> dict[str, Any] | None:
        try:
            doc = self._get(f"{self.controller_http}/controller/fault_tolerance/status?instance_id={iid}")
        except (urllib.error.URLError, OSError, ValueError):
            return None
        return doc["instances"][0] if doc.get("instances") else None

    def timeline(self, iid: int) -> list[dict[str, Any]]:
        return self._get(f"{self.controller_http}/controller/fault_tolerance/timeline?instance_id={iid}")["transactions"]

    def finished_round(self, iid: int, before: int,
                       timeout_sec: float = 30.0) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """The timeline and its newest transaction once one after the first `before` has ended: the
        survivors are published before the round's last steps (its re-inference count), so serving
        can be seen a moment before the transaction says how it ended."""
        deadline = time.monotonic() + timeout_sec
        while True:
            txns = self.timeline(iid)
            if (len(txns) > before and txns[-1]["outcome"] != "running") or time.monotonic() > deadline:
                return txns, txns[-1]
            time.sleep(0.2)

    def engine_url(self, iid: int, rank: int) -> str:
        host, port = self.spec.engine_address(iid, rank)
        return f"http://{host}:{port}"

    def journal(self, iid: int, since: int = 0) -> tuple[int, list[dict[str, Any]]]:
        """The fake group's transitions after index `since` (read through any live rank)."""
        last: Exception | None = None
        for rank in range(self.spec.dp_size):
            try:
                doc = self._get(f"{self.engine_url(iid, rank)}/fake/journal?since={since}", 10)
                return doc["next"], doc["events"]
            except (urllib.error.URLError, OSError) as exc:
                last = exc
        raise RuntimeError(f"instance {iid}: no rank answers /fake/journal: {last}")

    def journal_length(self, iid: int) -> int:
        return self.journal(iid, 1 << 30)[0]

    def engine_pid(self, iid: int, rank: int) -> int:
        ref = self.nodemanagers[(iid, self.spec.pod_of(rank))]
        with grpc.insecure_channel(f"{ref.pod_ip}:{ref.grpc_port}") as channel:
            pod = node_manager_pb2_grpc.NodeManagerStub(channel).DescribePod(node_manager_pb2.DescribePodRequest(),
                                                                              timeout=10)
        return next(e.pid for e in pod.engines if e.endpoint.id == rank)

    def inject(self, iid: int, rank: int, fault: str, pid: int = 0) -> float:
        """The fault on one rank; returns the wall time just before it. `kill_process` also SIGKILLs the
        rank's placeholder process (`pid` from engine_pid, looked up first when 0)."""
        if fault == "kill_process":
            pid = pid or self.engine_pid(iid, rank)
            at = time.time()
            os.kill(pid, signal.SIGKILL)
        else:
            at = time.time()
        self._post(f"{self.engine_url(iid, rank)}/fake/inject", {"fault": fault})
        return at

    def runtimes_brief(self, iids: list[int]) -> dict[int, dict[str, Any]]:
        """phase, alive_dp_ranks, serving_published, last_error of each instance, in one gRPC
        GetFaultToleranceStatus (far lighter on the Controller than the JSON page: a benchmark that
        polls must not be what it measures)."""
        try:
            with grpc.insecure_channel(self.controller_address) as channel:
                resp = controller_pb2_grpc.ControllerStub(channel).GetFaultToleranceStatus(
                    controller_pb2.GetFaultToleranceStatusRequest(instance_ids=iids), timeout=10)
        except grpc.RpcError:
            return {}
        phase = controller_pb2.DESCRIPTOR.enum_types_by_name["FtPhase"]
        return {r.instance_id: {"instance_id": r.instance_id, "alive_dp_ranks": list(r.alive_dp_ranks),
                                "phase": phase.values_by_number[r.phase].name.removeprefix("FT_PHASE_"),
                                "serving_published": r.serving_published,
                                "last_error": r.last_error if r.HasField("last_error") else None}
                for r in resp.instances}

    def wait_until(self, iids: list[int], predicate, timeout_sec: float, what: str,
                   poll_sec: float = 0.1) -> dict[int, dict[str, Any]]:
        deadline = time.monotonic() + timeout_sec
        pending = set(iids)
        done: dict[int, dict[str, Any]] = {}
        last: dict[int, Any] = {}
        while pending:
            self._check_alive()
            brief = self.runtimes_brief(sorted(pending))
            for iid in sorted(pending):
                rt = last[iid] = brief.get(iid)
                if rt is not None and predicate(rt):
                    done[iid] = rt
                    pending.discard(iid)
            if not pending:
                break
            if time.monotonic() >= deadline:
                sample = {i: last.get(i) and {**{k: last[i].get(k) for k in ("phase", "serving_published", "last_error")},
                                              "alive_dp_ranks": rank_ranges(last[i]["alive_dp_ranks"])}
                          for i in sorted(pending)[:3]}
                raise TimeoutError(f"{what} not reached within {timeout_sec:g}s for instances {sorted(pending)}: "
                                   f"{json.dumps(sample)}")
            time.sleep(poll_sec)
        return done

    def wait_serving(self, iids: list[int], timeout_sec: float, alive: dict[int, list[int]] | None = None,
                     poll_sec: float = 0.2) -> dict[int, dict[str, Any]]:
        def ok(rt: dict[str, Any]) -> bool:
            if not rt["serving_published"] or rt["phase"] not in ("NORMAL", "SCALED_DOWN_RUNNING"):
                return False
            return alive is None or rt["alive_dp_ranks"] == alive[rt["instance_id"]]
        return self.wait_until(iids, ok, timeout_sec, "serving", poll_sec)

    def _check_alive(self) -> None:
        for proc in self.processes():
            if proc.returncode is not None:
                raise RuntimeError(f"{proc.name} exited with {proc.returncode}; log tail:\n{proc.log_tail()}")

    def processes(self) -> list[ManagedProcess]:
        return [p for p in (self.coordinator, self.controller, *self.engines.values(), *self.nm_procs) if p is not None]

    def _collect_descendants(self) -> None:
        for proc in self.nm_procs:
            self._descendants.update(descendant_pids(proc.pid))

    def log_bytes(self) -> dict[str, int]:
        """Bytes in each service's log now (the Controller, the Coordinator, NodeManagers summed)."""
        def size(p: ManagedProcess | None) -> int:
            try:
                return p.log_path.stat().st_size if p is not None else 0
            except OSError:
                return 0
        return {"controller": size(self.controller), "coordinator": size(self.coordinator),
                "nodemanagers": sum(size(p) for p in self.nm_procs)}

    # ---- stop ------------------------------------------------------------------------------------
    def stop(self) -> None:
        with sigterm_deferred():
            self._collect_descendants()
            for proc in self.processes():  # every process starts stopping at once; then each is waited for
                signal_group(proc.pid, signal.SIGTERM)
            for proc in reversed(self.processes()):
                try:
                    proc.stop(grace_sec=15)
                except Exception as exc:  # noqa: BLE001 - tear the rest down
                    log.warning("stopping %s failed: %s", proc.name, exc)
            for pid in sorted(self._descendants):
                signal_group(pid, signal.SIGKILL)

    def __enter__(self) -> Fleet:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
