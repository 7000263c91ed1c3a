"""The local cluster: controller, coordinator, NodeManagers on distinct loopback IPs and their
reference engines, as real processes on this machine.

`motor demo`, the e2e tests and the benchmarks all start clusters through `LocalCluster`. Every
process logs to a file in the run directory; everything is torn down by pid (process groups, and the
engines the NodeManagers started, found as their descendants) even when a test fails, and, in a
holder inside `motor.launch.shutdown.exit_on_sigterm()`, when the holder gets SIGTERM. A cluster
starts once.

With `ClusterSpec(tls=True)` a development PKI is written to <run dir>/pki (one certificate per
role, pod IPs in the SANs) and every process gets its `security` block: mTLS and roles on every
gRPC contract, HTTPS on the controller's status page (operator certificate) and the coordinator's
OpenAI front, TLS with client certificates to the cluster's etcd (`start_etcd=True`). The launcher
itself observes and injects as the operator role.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import ssl
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import psutil

from gen.motor.v1 import (
    coordinator_pb2,
    coordinator_pb2_grpc,
    node_manager_pb2,
    node_manager_pb2_grpc,
)
from motor.common.config import ClientTlsConfig, set_dotted
from motor.common.grpc_server import open_sync_channel
from motor.common.pki import ETCD, DevPki, create_dev_pki
from motor.common.ports import free_port, port_free
from motor.common.process import ManagedProcess, signal_group, start_process
from motor.common.security import Role, http_client_context
from motor.launch.etcd import EtcdServer, EtcdTls, start_etcd
from motor.launch.load import LoadGenerator
from motor.launch.shutdown import sigterm_deferred
from motor.sim.client import SimClient, inject_fault

log = logging.getLogger(__name__)

BIN = Path(sys.executable).parent


@dataclass
class ClusterSpec:
    """What to start. Pods get 127.0.0.2, .3, ... and `ranks_per_pod` consecutive ranks each."""

    dp_size: int = 4
    ranks_per_pod: int = 2
    instance_id: int = 1
    model: str = "motor-sim"
    enable_dp_scale_down: bool = True
    enable_dp_scale_up: bool = False
    enable_fault_tolerance: bool = True
    # 4 logical experts in 16 slots: every rank holds every expert, so consecutive rounds down to a
    # single survivor stay feasible for the engine.
    num_experts: int = 4
    num_redundant_experts: int = 12
    per_token_latency_sec: float = 0.005
    collective_timeout_sec: float = 5.0
    engine_recovery_timeout_sec: float = 30.0
    model_load_sec: float = 0.0
    etcd_endpoints: list[str] = field(default_factory=list)
    # Extra dotted overrides, e.g. {"fault_tolerance_config.software_status_collection_timeout_sec": 8}.
    controller_overrides: dict[str, Any] = field(default_factory=dict)
    nodemanager_overrides: dict[str, Any] = field(default_factory=dict)
    # More reference-engine flags for every rank (e.g. ["--ft-dialect", "rfc"]).
    engine_args: list[str] = field(default_factory=list)
    # Overrides of one pod's NodeManager only, by pod IP (applied after nodemanager_overrides).
    pod_overrides: dict[str, dict[str, Any]] = field(default_factory=dict)
    coordinator_overrides: dict[str, Any] = field(default_factory=dict)
    # FtCapability the NodeManagers report (the gate's input).
    capability: dict[str, Any] = field(default_factory=dict)
    # The argv template of every engine instead of motor-engine-sim (NodeManagerConfig.engine_command,
    # same {placeholders}); the reference engine's own flags are then not appended.
    engine_command: list[str] | None = None
    first_pod_ip: int = 2
    # mTLS on every contract (certificates generated into <run dir>/pki).
    tls: bool = False
    # Start a private etcd in the run dir (TLS with client certificates when tls) and persist there.
    start_etcd: bool = False
    # Controller replicas on the cluster's etcd (more than one needs etcd_endpoints or start_etcd):
    # one leads, the others stand by; every NodeManager is given every replica's address.
    controller_replicas: int = 1
    # leader_election.lease_ttl_sec of every replica (None: the Controller's default, 5 s).
    leader_lease_ttl_sec: int | None = None

    def pods(self) -> list[tuple[str, list[int]]]:
        if self.dp_size % self.ranks_per_pod:
            raise ValueError(f"dp_size {self.dp_size} is not a multiple of ranks_per_pod {self.ranks_per_pod}")
        return [
            (f"127.0.0.{self.first_pod_ip + i}", list(range(i * self.ranks_per_pod, (i + 1) * self.ranks_per_pod)))
            for i in range(self.dp_size // self.ranks_per_pod)
        ]

    def fault_tolerance(self) -> dict[str, Any]:
        return {
            "enable_fault_tolerance": self.enable_fault_tolerance,
            "enable_dp_scale_down": self.enable_dp_scale_down,
            "enable_dp_scale_up": self.enable_dp_scale_up,
        }


@dataclass
class ServiceProc:
    name: str
    proc: ManagedProcess
    info: dict[str, Any]
    config_path: Path
    argv: list[str]
    # Set when a test expects the process to exit (a recycled pod), so waits do not fail on it.
    expected_exit: bool = False


def store_port_base(dp_size: int, ip: str, attempts: int = 64) -> int:
    """A base for the per-round store ports (base + the ranks removed so far) below the kernel's ephemeral range
    (32768+ on Linux), so no outgoing connection can be holding one when a round binds it; the
    whole block must be free now. Spread by pid so parallel clusters rarely probe the same block."""
    first = 20000 + (os.getpid() * 97) % 10000
    for i in range(attempts):
        base = 20000 + (first - 20000 + i * 131) % (32768 - 20000 - dp_size)
        if all(port_free(ip, base + r, ignore_time_wait=False) for r in range(dp_size)):
            return base
    raise RuntimeError(f"no block of {dp_size} free ports below 32768 on {ip} after {attempts} tries")


def spawn_service(run_dir: Path, name: str, script: str, config: dict[str, Any],
                  extra_args: Sequence[str] = ()) -> tuple[ManagedProcess, Path, Path]:
    """Starts the Motor service `script` on <name>.config.json (written from `config`), logging to
    <name>.log; returns (process, config path, ready file). The ready file is removed first, so one
    left by an earlier run is never taken for this process's."""
    config_path = run_dir / f"{name}.config.json"
    config_path.write_text(json.dumps(config, indent=2))
    ready = run_dir / f"{name}.ready.json"
    ready.unlink(missing_ok=True)
    argv = [str(BIN / script), "--config", str(config_path), "--ready-file", str(ready), *extra_args]
    return start_process(argv, log_path=run_dir / f"{name}.log", name=name), config_path, ready


def descendant_pids(pid: int) -> list[int]:
    """Every process below `pid` (the engines a NodeManager started, and theirs); [] once it is gone."""
    try:
        return [child.pid for child in psutil.Process(pid).children(recursive=True)]
    except psutil.Error:
        return []


def _sigkill_engine(pid: int) -> None:
    # An engine leads its own process group, the processes it forked do not: the group takes the
    # former with everything in it, the pid the latter.
    signal_group(pid, signal.SIGKILL)
    try:
        os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


class LocalCluster:
    def __init__(self, spec: ClusterSpec, run_dir: Path) -> None:
        self.spec = spec
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.coordinator: ServiceProc | None = None
        # Every Controller replica, in start order; `controller` is the one believed to lead.
        self.controllers: list[ServiceProc] = []
        self._primary = 0
        self._frozen: set[int] = set()
        self.nodemanagers: dict[str, ServiceProc] = {}
        self._engine_pids: set[int] = set()
        self._started = False
        self.etcd: EtcdServer | None = None
        self.dp_master_port = free_port("127.0.0.2")
        self.dp_store_port_base = store_port_base(spec.dp_size, spec.pods()[0][0])
        self.pki: DevPki | None = None
        self._http_ctx: ssl.SSLContext | None = None
        if spec.tls:
            hosts = ["localhost", "127.0.0.1", *(ip for ip, _ in spec.pods())]
            self.pki = create_dev_pki(self.run_dir / "pki", hosts, force=True)

    # ---- security ----------------------------------------------------------------------------

    def _security(self, role: Role) -> dict[str, Any] | None:
        return self.pki.security(role) if self.pki is not None else None

    def client_tls(self, role: Role = Role.OPERATOR) -> ClientTlsConfig | None:
        """What the launcher (and a test) presents to the services: the operator certificate, or the
        one of the role a test plays."""
        if self.pki is None:
            return None
        return ClientTlsConfig(ca_file=self.pki.ca_file, cert_file=self.pki.cert_file(role),
                               key_file=self.pki.key_file(role))

    def http_context(self) -> ssl.SSLContext | None:
        """HTTPS to the status page and the OpenAI front, as the operator."""
        if self.pki is None:
            return None
        if self._http_ctx is None:
            self._http_ctx = http_client_context(self.pki.ca_file, self.pki.cert_file(Role.OPERATOR),
                                                 self.pki.key_file(Role.OPERATOR))
        return self._http_ctx

    def grpc_channel(self, address: str, role: Role = Role.OPERATOR) -> grpc.Channel:
        """A blocking channel to one of the cluster's services, as `role` (operator) when tls is on."""
        return open_sync_channel(address, self.client_tls(role))

    def load_generator(self, **kwargs: Any) -> LoadGenerator:
        """Completions through the Coordinator (https when tls is on)."""
        return LoadGenerator(self.coordinator_http, ssl_context=self.http_context(), **kwargs)

    # ---- start -------------------------------------------------------------------------------

    def _start_service(self, name: str, script: str, config: dict[str, Any], ready_keys: list[str],
                       timeout_sec: float = 60.0) -> ServiceProc:
        proc, config_path, ready = spawn_service(self.run_dir, name, script, config)
        info = proc.wait_ready_file(ready, timeout_sec, required_keys=ready_keys)
        log.info("%s ready: %s", name, info)
        return ServiceProc(name, proc, info, config_path, proc.argv)

    def _relaunch(self, svc: ServiceProc, timeout_sec: float, ports: dict[str, str],
                  **settings: Any) -> ServiceProc:
        """Stops `svc` and runs its command line again on its own ports (`ports`: config section →
        ready-file key of the port it bound), with top-level `settings` changed; the new ServiceProc.

        Peers know a service by address, so it keeps its ports; its argv is reused as it is (a
        subclass may have started it another way than `spawn_service`)."""
        svc.proc.stop(grace_sec=5)
        ready = self.run_dir / f"{svc.name}.ready.json"
        ready.unlink(missing_ok=True)
        cfg = json.loads(svc.config_path.read_text())
        for section, key in ports.items():
            cfg[section]["port"] = svc.info[key]
        cfg.update(settings)
        svc.config_path.write_text(json.dumps(cfg, indent=2))
        proc = start_process(svc.argv, log_path=self.run_dir / f"{svc.name}.log", name=svc.name)
        info = proc.wait_ready_file(ready, timeout_sec, required_keys=list(ports.values()))
        return ServiceProc(svc.name, proc, info, svc.config_path, svc.argv)

    def start(self, ready_timeout_sec: float = 180.0) -> LocalCluster:
        """Starts every process and waits until the instance serves; once per LocalCluster (a second
        start would orphan the first one's processes, and the ports chosen at construction)."""
        if self._started:
            pids = [svc.proc.pid for svc in self.services()]
            raise RuntimeError(f"LocalCluster in {self.run_dir} was already started (service pids {pids}); "
                               "a cluster starts once: stop() it and create a new LocalCluster")
        self._started = True
        try:
            self._start(ready_timeout_sec)
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self, ready_timeout_sec: float) -> None:
        spec = self.spec
        if spec.start_etcd:
            tls = None
            if self.pki is not None:
                tls = EtcdTls(self.pki.ca_file, self.pki.cert_file(ETCD), self.pki.key_file(ETCD),
                              self.pki.cert_file(Role.CONTROLLER), self.pki.key_file(Role.CONTROLLER))
            self.etcd = start_etcd(self.run_dir, name="etcd", tls=tls)
        coord_cfg: dict[str, Any] = {"server": {"host": "127.0.0.1", "port": 0}, "http": {"host": "127.0.0.1", "port": 0}}
        if self.pki is not None:
            coord_cfg["security"] = self._security(Role.COORDINATOR)
        for key, value in spec.coordinator_overrides.items():
            set_dotted(coord_cfg, key, value)
        self.coordinator = self._start_service("coordinator", "motor-coordinator", coord_cfg, ["grpc_port", "http_port"])
        if spec.controller_replicas < 1:
            raise ValueError(f"controller_replicas {spec.controller_replicas} must be >= 1")
        if spec.controller_replicas > 1 and not (spec.start_etcd or spec.etcd_endpoints):
            raise ValueError(f"controller_replicas {spec.controller_replicas} needs etcd (start_etcd or etcd_endpoints)")
        for index in range(spec.controller_replicas):
            self.controllers.append(self._start_service(self.replica_name(index), "motor-controller",
                                                        self.controller_config(index), ["grpc_port", "http_port"]))
        if spec.controller_replicas > 1:
            self.leader()
        for pod_ip, ranks in spec.pods():
            name = f"nodemanager-{pod_ip}"
            self.nodemanagers[pod_ip] = self._start_service(
                name, "motor-nodemanager", self.nodemanager_config(pod_ip, ranks), ["grpc_port", "metrics_port"],
                ready_timeout_sec,
            )
        self.wait_serving(ready_timeout_sec)

    def replica_name(self, index: int) -> str:
        return "controller" if self.spec.controller_replicas == 1 else f"controller-{index}"

    def controller_config(self, index: int = 0) -> dict[str, Any]:
        spec = self.spec
        assert self.coordinator is not None
        cfg: dict[str, Any] = {
            "server": {"host": "127.0.0.1", "port": 0},
            "status_http": {"host": "127.0.0.1", "port": 0},
            "coordinator_address": f"127.0.0.1:{self.coordinator.info['grpc_port']}",
            "fault_tolerance_config": spec.fault_tolerance(),
            "heartbeat_interval_sec": 1.0,
            "heartbeat_timeout_sec": 6.0,
            "publish_interval_sec": 3.0,
            "reconfiguration_timeout_sec": 120.0,
        }
        endpoints = [self.etcd.endpoint] if self.etcd is not None else spec.etcd_endpoints
        if endpoints:
            cfg["store"] = {"etcd_endpoints": endpoints, "key_prefix": f"/motor-{self.run_dir.name}"}
        if self.pki is not None:
            cfg["security"] = self._security(Role.CONTROLLER)
        if spec.controller_replicas > 1 or spec.leader_lease_ttl_sec is not None:
            cfg["leader_election"] = {"replica_id": self.replica_name(index)}
            if spec.leader_lease_ttl_sec is not None:
                cfg["leader_election"]["lease_ttl_sec"] = spec.leader_lease_ttl_sec
        for key, value in spec.controller_overrides.items():
            set_dotted(cfg, key, value)
        return cfg

    def nodemanager_config(self, pod_ip: str, ranks: list[int]) -> dict[str, Any]:
        spec = self.spec
        assert self.controller is not None
        cap = {
            "engine_ft_enabled": True, "scale_down_supported": True, "external_lb": True, "auto_recovery": False,
            "enable_eplb": True, "num_redundant_experts": spec.num_redundant_experts, **spec.capability,
        }
        cfg: dict[str, Any] = {
            "server": {"host": pod_ip, "port": 0},
            "metrics_http": {"host": pod_ip, "port": 0},
            "pod_ip": pod_ip,
            "node_name": f"node-{pod_ip}",
            "controller_address": self.controller_addresses[0],
            "controller_addresses": self.controller_addresses[1:],
            "instance_id": spec.instance_id,
            "model": spec.model,
            "dp_size": spec.dp_size,
            "engines": [{"dp_rank": r, "device_infos": [{"device_id": f"Ascend910-{r % spec.ranks_per_pod}"}]} for r in ranks],
            "dp_master_ip": spec.pods()[0][0],
            "dp_master_port": self.dp_master_port,
            "dp_store_port_base": self.dp_store_port_base,
            "ft_capability": cap,
            "fault_tolerance_config": {k: v for k, v in spec.fault_tolerance().items()},
            "heartbeat_interval_sec": 1.0,
            "log_dir": str(self.run_dir / f"engines-{pod_ip}"),
            "engine_extra_args": [
                # --num-redundant-experts comes from ft_capability through the default command.
                "--num-experts", str(spec.num_experts),
                "--per-token-latency-sec", str(spec.per_token_latency_sec),
                "--collective-timeout-sec", str(spec.collective_timeout_sec),
                "--engine-recovery-timeout-sec", str(spec.engine_recovery_timeout_sec),
                "--model-load-sec", str(spec.model_load_sec),
                "--enable-fault-injection",
                "--apply-journal", str(self.run_dir / "engine-applies-rank{dp_rank}.jsonl"),
                *spec.engine_args,
            ],
        }
        if spec.engine_command is not None:
            cfg["engine_command"] = list(spec.engine_command)
            cfg["engine_extra_args"] = []
        if self.pki is not None:
            cfg["security"] = self._security(Role.NODEMANAGER)
        for key, value in [*spec.nodemanager_overrides.items(), *spec.pod_overrides.get(pod_ip, {}).items()]:
            set_dotted(cfg, key, value)
        return cfg

    # ---- observe -----------------------------------------------------------------------------

    @property
    def _scheme(self) -> str:
        return "https" if self.pki is not None else "http"

    @property
    def coordinator_http(self) -> str:
        assert self.coordinator is not None
        return f"{self._scheme}://127.0.0.1:{self.coordinator.info['http_port']}"

    @property
    def controller_http(self) -> str:
        assert self.controller is not None
        return f"{self._scheme}://127.0.0.1:{self.controller.info['http_port']}"

    @property
    def controller(self) -> ServiceProc | None:
        """The Controller replica believed to lead (the only one without replicas)."""
        return self.controllers[self._primary] if self.controllers else None

    @property
    def controller_address(self) -> str:
        assert self.controller is not None
        return f"127.0.0.1:{self.controller.info['grpc_port']}"

    @property
    def controller_addresses(self) -> list[str]:
        """Every replica's gRPC address, in start order."""
        return [f"127.0.0.1:{svc.info['grpc_port']}" for svc in self.controllers]

    def _status_url(self, svc: ServiceProc) -> str:
        return f"{self._scheme}://127.0.0.1:{svc.info['http_port']}/controller/fault_tolerance/status"

    def controller_status(self, svc: ServiceProc, timeout_sec: float = 2.0) -> dict[str, Any] | None:
        """One replica's whole status page (instances and leadership), or None when it does not answer."""
        if not svc.proc.running or svc.proc.pid in self._frozen:
            return None
        try:
            with urllib.request.urlopen(self._status_url(svc), timeout=timeout_sec, context=self.http_context()) as resp:
                doc = json.load(resp)
        except (urllib.error.URLError, OSError, ValueError):
            return None
        doc["instances"] = [i for i in doc.get("instances", []) if i.get("instance_id") == self.spec.instance_id]
        return doc

    def leader(self, timeout_sec: float = 60.0, exclude: ServiceProc | None = None) -> ServiceProc:
        """Waits until one running replica (not `exclude`) says it leads and acts; it becomes `controller`."""
        deadline = time.monotonic() + timeout_sec
        while True:
            for index, svc in enumerate(self.controllers):
                if svc is exclude:
                    continue
                doc = self.controller_status(svc)
                if doc is not None and (doc.get("leadership") or {}).get("is_leader"):
                    self._primary = index
                    return svc
            if time.monotonic() >= deadline:
                seen = {svc.name: (self.controller_status(svc) or {}).get("leadership") for svc in self.controllers}
                raise TimeoutError(f"no controller replica leads within {timeout_sec:g}s: {json.dumps(seen)}")
            self._check_alive()
            time.sleep(0.1)

    @property
    def coordinator_address(self) -> str:
        assert self.coordinator is not None
        return f"127.0.0.1:{self.coordinator.info['grpc_port']}"

    def runtime(self, timeout_sec: float = 5.0) -> dict[str, Any] | None:
        """The instance's RFC §7 runtime from the controller's JSON page, or None when not there yet.
        With replicas: the leader's (it becomes `controller`), else a standby's read-only view."""
        if len(self.controllers) > 1:
            fallback = None
            for index in [self._primary, *(i for i in range(len(self.controllers)) if i != self._primary)]:
                doc = self.controller_status(self.controllers[index], timeout_sec)
                if not doc or not doc.get("instances"):
                    continue
                if (doc.get("leadership") or {}).get("is_leader"):
                    self._primary = index
                    return doc["instances"][0]
                fallback = fallback or doc["instances"][0]
            return fallback
        url = f"{self.controller_http}/controller/fault_tolerance/status?instance_id={self.spec.instance_id}"
        try:
            with urllib.request.urlopen(url, timeout=timeout_sec, context=self.http_context()) as resp:
                return json.load(resp)["instances"][0]
        except (urllib.error.URLError, OSError, KeyError, IndexError, ValueError):
            return None

    def timeline(self, timeout_sec: float = 5.0) -> list[dict[str, Any]]:
        url = f"{self.controller_http}/controller/fault_tolerance/timeline?instance_id={self.spec.instance_id}"
        with urllib.request.urlopen(url, timeout=timeout_sec, context=self.http_context()) as resp:
            return json.load(resp)["transactions"]

    def etcd_view(self, timeout_sec: float = 5.0) -> dict[str, Any]:
        """What etcd itself holds, read directly: the instance's persisted record (phase, generation,
        dead_committed) and the leader key (replica, address, term), each None when absent."""
        endpoints = [self.etcd.endpoint] if self.etcd is not None else list(self.spec.etcd_endpoints)
        if not endpoints:
            raise RuntimeError("this cluster persists nothing (no etcd)")
        tls = self.client_tls(Role.CONTROLLER) if self.etcd is not None and self.etcd.tls is not None else None

        async def read() -> dict[str, Any]:
            from motor.controller.persistence.etcd import EtcdRuntimeStore

            store = EtcdRuntimeStore(endpoints, key_prefix=f"/motor-{self.run_dir.name}",
                                     request_timeout_sec=timeout_sec, tls=tls)
            conn = store.connection()
            try:
                record = await store.load(self.spec.instance_id)

                async def get(client: Any) -> Any:
                    return await client.get(store.leader_key.encode())

                leader = await conn.call("read leader key", store.leader_key, get, write=False)
            finally:
                await conn.close()
                await store.close()
            out: dict[str, Any] = {"record": None, "leader": None}
            if record is not None:
                out["record"] = {"phase": record.phase, "generation": record.generation,
                                 "dead_committed": list(record.dead_committed)}
            if leader is not None:
                out["leader"] = {**json.loads(leader.value), "term": leader.create_revision}
            return out

        return asyncio.run(read())

    def metrics_urls(self) -> dict[str, str]:
        """GET /metrics of every service by its name: the Controller's and Coordinator's HTTP ports, each
        NodeManager's own listener (metrics_port in its ready file); https when tls is on."""
        urls = {"controller": f"{self.controller_http}/metrics", "coordinator": f"{self.coordinator_http}/metrics"}
        for pod_ip, svc in self.nodemanagers.items():
            urls[svc.name] = f"{self._scheme}://{pod_ip}:{svc.info['metrics_port']}/metrics"
        return urls

    def scrape(self, name: str, timeout_sec: float = 5.0) -> str:
        """The Prometheus text one service (a name of `metrics_urls`) exports now."""
        url = self.metrics_urls()[name]
        context = self.http_context() if url.startswith("https:") else None
        with urllib.request.urlopen(url, timeout=timeout_sec, context=context) as resp:
            return resp.read().decode()

    def published(self, timeout_sec: float = 5.0) -> dict[int, list[int]]:
        """Instance id → endpoint ids the Coordinator routes to (its own answer, via gRPC)."""
        with self.grpc_channel(self.coordinator_address) as channel:
            resp = coordinator_pb2_grpc.CoordinatorStub(channel).ListInstances(
                coordinator_pb2.ListInstancesRequest(), timeout=timeout_sec)
        return {p.instance.id: sorted(e.id for e in p.instance.endpoints) for p in resp.instances}

    def wait_until(self, predicate, timeout_sec: float, what: str, poll_sec: float = 0.2) -> dict[str, Any]:
        """Polls the runtime until `predicate(runtime)` holds; the error names what was awaited."""
        deadline = time.monotonic() + timeout_sec
        last: dict[str, Any] | None = None
        while time.monotonic() < deadline:
            self._check_alive()
            last = self.runtime()
            if last is not None and predicate(last):
                return last
            time.sleep(poll_sec)
        raise TimeoutError(f"{what} not reached within {timeout_sec:g}s; last runtime: {json.dumps(last)}")

    def wait_serving(self, timeout_sec: float, alive: list[int] | None = None) -> dict[str, Any]:
        def ok(rt: dict[str, Any]) -> bool:
            if not rt["serving_published"]:
                return False
            if rt["phase"] not in ("NORMAL", "SCALED_DOWN_RUNNING", "DISABLED"):
                return False
            return alive is None or rt["alive_dp_ranks"] == alive
        rt = self.wait_until(ok, timeout_sec, f"instance {self.spec.instance_id} serving ranks {alive or 'all'}")
        self._collect_engine_pids()
        return rt

    def _check_alive(self) -> None:
        for svc in self.services():
            code = svc.proc.returncode
            if code is not None and not svc.expected_exit:
                raise RuntimeError(f"{svc.name} exited with {code}; log tail:\n{svc.proc.log_tail()}")

    def services(self) -> list[ServiceProc]:
        return [s for s in (self.coordinator, *self.controllers, *self.nodemanagers.values()) if s is not None]

    def _collect_engine_pids(self) -> None:
        for svc in self.nodemanagers.values():
            self._engine_pids.update(descendant_pids(svc.proc.pid))

    # ---- act ---------------------------------------------------------------------------------

    def kill_controller(self, svc: ServiceProc | None = None) -> ServiceProc:
        """SIGKILL, as a crash: of `svc`, by default the replica believed to lead; returns it."""
        svc = svc or self.controller
        assert svc is not None
        svc.expected_exit = True
        self.thaw_controller(svc)
        svc.proc.kill()
        return svc

    def freeze_controller(self, svc: ServiceProc | None = None) -> ServiceProc:
        """SIGSTOP the replica's process group: it is cut off from etcd and everyone while time goes on."""
        svc = svc or self.controller
        assert svc is not None
        os.killpg(svc.proc.pid, signal.SIGSTOP)
        self._frozen.add(svc.proc.pid)
        return svc

    def thaw_controller(self, svc: ServiceProc) -> None:
        """SIGCONT a frozen replica (no-op otherwise)."""
        if svc.proc.pid in self._frozen:
            self._frozen.discard(svc.proc.pid)
            try:
                os.killpg(svc.proc.pid, signal.SIGCONT)
            except ProcessLookupError:
                pass

    def restart_controller(self, timeout_sec: float = 60.0, svc: ServiceProc | None = None) -> ServiceProc:
        """Stops (if still running) and starts again one replica (by default the one believed to lead)
        on its own ports; returns the new process's ServiceProc, which takes the old one's place."""
        svc = svc or self.controller
        assert svc is not None
        index = self.controllers.index(svc)
        self.thaw_controller(svc)
        self.controllers[index] = self._relaunch(svc, timeout_sec, {"server": "grpc_port", "status_http": "http_port"})
        return self.controllers[index]

    def kill_nodemanager(self, pod_ip: str) -> list[int]:
        """SIGKILL a pod: its NodeManager and every engine it runs (as a node or container loss would);
        returns the engine pids killed."""
        svc = self.nodemanagers[pod_ip]
        engines = descendant_pids(svc.proc.pid)
        svc.expected_exit = True
        svc.proc.kill()
        for pid in engines:
            _sigkill_engine(pid)
        return engines

    def restart_nodemanager(self, pod_ip: str, timeout_sec: float = 180.0) -> ServiceProc:
        """Starts a pod's NodeManager again on its own gRPC and metrics ports (the Controller knows it
        by address); it launches its engines anew and registers."""
        self.nodemanagers[pod_ip] = self._relaunch(self.nodemanagers[pod_ip], timeout_sec,
                                                   {"server": "grpc_port", "metrics_http": "metrics_port"})
        return self.nodemanagers[pod_ip]

    def _own_etcd(self) -> EtcdServer:
        if self.etcd is None:
            raise RuntimeError("this cluster runs no etcd of its own (start_etcd=False)")
        return self.etcd

    def restart_etcd(self, ready_timeout_sec: float = 30.0) -> None:
        """Stops the cluster's own etcd and starts it again on its data (start_etcd=True clusters)."""
        self._own_etcd().restart(ready_timeout_sec)

    def stop_etcd(self) -> None:
        """Stops the cluster's own etcd (SIGTERM); start_etcd_again() brings it back on its data."""
        self._own_etcd().stop()

    def start_etcd_again(self, ready_timeout_sec: float = 30.0) -> None:
        self._own_etcd().start_again(ready_timeout_sec)

    def kill_coordinator(self) -> None:
        """SIGKILL the Coordinator, as a crash."""
        assert self.coordinator is not None
        self.coordinator.expected_exit = True
        self.coordinator.proc.kill()

    def restart_coordinator(self, timeout_sec: float = 60.0) -> ServiceProc:
        """Starts the Coordinator again on its ports, knowing every Controller replica: it asks their
        leader for the serving view (a SET) as soon as it serves."""
        assert self.coordinator is not None
        self.coordinator = self._relaunch(self.coordinator, timeout_sec, {"server": "grpc_port", "http": "http_port"},
                                          controller_addresses=self.controller_addresses)
        return self.coordinator

    def engine_url(self, rank: int) -> str:
        """The HTTP base URL of a rank's engine, as its NodeManager describes it."""
        pod_ip = next(ip for ip, ranks in self.spec.pods() if rank in ranks)
        svc = self.nodemanagers[pod_ip]
        with self.grpc_channel(f"{pod_ip}:{svc.info['grpc_port']}") as channel:
            pod = node_manager_pb2_grpc.NodeManagerStub(channel).DescribePod(node_manager_pb2.DescribePodRequest(), timeout=5)
        for engine in pod.engines:
            if engine.endpoint.id == rank:
                return f"http://{engine.endpoint.ip}:{engine.endpoint.business_port}"
        raise KeyError(f"pod {pod_ip} does not describe rank {rank}")

    def engine_client(self, rank: int) -> SimClient:
        """The rank's reference engine, directly (its FT API and admin routes)."""
        return SimClient(self.engine_url(rank), timeout_sec=10)

    def engine_applies(self, rank: int) -> list[dict[str, Any]]:
        """Every apply the rank's engines were sent in this cluster's life (their own journal: it
        outlives a relaunch), oldest first."""
        path = self.run_dir / f"engine-applies-rank{rank}.jsonl"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def inject(self, rank: int, fault: str, **params: Any) -> dict[str, Any]:
        """An engine fault through the reference engine's admin route (as `motorctl inject` does)."""
        return inject_fault(self.engine_url(rank), fault, params)

    # ---- stop --------------------------------------------------------------------------------

    def stop(self) -> None:
        """Tears every process down by pid (idempotent); a SIGTERM meanwhile waits until it is done."""
        with sigterm_deferred():
            self._collect_engine_pids()
            for svc in self.controllers:
                self.thaw_controller(svc)  # a stopped process would only die at the SIGKILL after the grace
            # NodeManagers first, then the standbys, the leader last (a standby stopped after the
            # leader resigned would take over a cluster being torn down), then the Coordinator.
            leader = self.controller
            order = [*reversed(list(self.nodemanagers.values())), *(c for c in self.controllers if c is not leader),
                     *([leader] if leader is not None else []), *([self.coordinator] if self.coordinator else [])]
            for svc in order:
                try:
                    svc.proc.stop(grace_sec=10)
                except Exception as exc:  # noqa: BLE001 - keep tearing the rest down
                    log.warning("stopping %s failed: %s", svc.name, exc)
            for pid in sorted(self._engine_pids):
                _sigkill_engine(pid)
            if self.etcd is not None:
                try:
                    self.etcd.stop()
                except Exception as exc:  # noqa: BLE001 - teardown goes on
                    log.warning("stopping etcd failed: %s", exc)

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
