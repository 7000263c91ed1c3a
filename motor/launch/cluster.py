"""The local cluster: controller, coordinator and NodeManagers on their own loopback addresses, over
an engine backend (`motor.launch.engines`: the reference engines, or light fake ones for fleets),
as real processes on this machine.

`motor demo`, the e2e and chaos tests and the benchmarks all start clusters through `LocalCluster`.
Every process logs to a file in the run directory; everything is torn down by pid (process groups,
and the engines the NodeManagers started, found as their descendants) even when a test fails, and,
in a holder inside `motor.launch.shutdown.exit_on_sigterm()`, when the holder gets SIGTERM. A
cluster starts once.

With `ClusterSpec(tls=True)` a development PKI is written to <run dir>/pki (one certificate per
role, pod IPs in the SANs, and every NodeManager one of its own: its pod URI and IP, see
`pod_cert_name`) and every process gets its `security` block: mTLS and roles on every
gRPC contract, HTTPS on the controller's status page (operator certificate) and the coordinator's
OpenAI front, TLS with client certificates to the cluster's etcd (`start_etcd=True`), whose RBAC
gives only the Controller's certificate a user, on the cluster's key prefix
(motor.launch.etcd_rbac). The launcher itself observes and injects as the operator role.
"""

from __future__ import annotations

import logging
import ssl
import time
from pathlib import Path
from typing import Any

import grpc

from motor.common.config.tls import ClientTlsConfig
from motor.common.grpc_server import open_sync_channel
from motor.common.pki import ETCD, DevPki, create_dev_pki
from motor.common.process import ManagedProcess
from motor.common.security import Role, http_client_context
from motor.launch import render
from motor.launch.engines import EngineBackend, ReferenceEngines
from motor.launch.etcd import EtcdServer, EtcdTls, start_etcd
from motor.launch.etcd_rbac import enable_rbac
from motor.launch.load import LoadGenerator
from motor.launch.observe import ClusterObservation
from motor.launch.processes import (
    Launch,
    ServiceProc,
    descendant_pids,
    freeze,
    hosted_services,
    relaunch,
    sigkill_engine,
    spawn_nodemanager_host,
    spawn_service,
    stop_one,
    stop_together,
    thaw,
)
from motor.launch.shutdown import sigterm_deferred
from motor.launch.spec import ClusterSpec, PodPlan

log = logging.getLogger(__name__)

_NM_READY_KEYS = ["grpc_port", "metrics_port"]


def pod_cert_name(pod: PodPlan) -> str:
    """The pod's name in its NodeManager certificate (and its pod URI): a DNS label."""
    return f"i{pod.instance_id}-p{pod.index}"


class LocalCluster(ClusterObservation):
    def __init__(self, spec: ClusterSpec, run_dir: Path, engines: EngineBackend | None = None) -> None:
        self.spec = spec
        self.engines = engines if engines is not None else ReferenceEngines()
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.coordinator: ServiceProc | None = None
        # Every Controller replica, in start order; `controller` is the one believed to lead.
        self.controllers: list[ServiceProc] = []
        self._primary = 0
        self._frozen: set[int] = set()
        self.nodemanagers: dict[str, ServiceProc] = {}
        # Engine processes the launcher runs itself (light engine groups), by name.
        self.engine_processes: dict[str, ManagedProcess] = {}
        self._engine_pids: set[int] = set()
        self._started = False
        self.etcd: EtcdServer | None = None
        self.ports = self.engines.plan_ports(spec)
        self.pki: DevPki | None = None
        self._http_ctx: ssl.SSLContext | None = None
        if spec.tls:
            hosts = ["localhost", "127.0.0.1", *(pod.ip for pod in spec.all_pods())]
            # Every NodeManager its own certificate: it may speak for its own pod only.
            self.pki = create_dev_pki(self.run_dir / "pki", hosts, force=True,
                                      pods=[(pod_cert_name(pod), pod.ip) for pod in spec.all_pods()])

    @property
    def dp_master_port(self) -> int:
        return self.ports.dp_master_port[self.spec.instance_id]

    @property
    def dp_store_port_base(self) -> int:
        return self.ports.dp_store_port_base[self.spec.instance_id]

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

    def _extra_args(self) -> list[str]:
        return ["--log-level", self.spec.log_level] if self.spec.log_level else []

    def _spawn(self, name: str, script: str, config: dict[str, Any]) -> Launch:
        """Starts one service (a subclass may run it elsewhere, e.g. in a container)."""
        return spawn_service(self.run_dir, name, script, config, self._extra_args())

    def _start_service(self, name: str, script: str, config: dict[str, Any], ready_keys: list[str],
                       timeout_sec: float = 60.0) -> ServiceProc:
        return self._spawn(name, script, config).wait(ready_keys, timeout_sec)

    def start(self, ready_timeout_sec: float = 180.0) -> LocalCluster:
        """Starts every process and waits until every instance serves; once per LocalCluster (a second
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
        started = time.monotonic()
        if spec.start_etcd:
            tls = None
            if self.pki is not None:
                tls = EtcdTls(self.pki.ca_file, self.pki.cert_file(ETCD), self.pki.key_file(ETCD),
                              self.pki.cert_file(Role.CONTROLLER), self.pki.key_file(Role.CONTROLLER))
            self.etcd = start_etcd(self.run_dir, name="etcd", tls=tls)
            if self.pki is not None:
                # Only the Controller's certificate may touch the cluster's keys (etcd RBAC by CN).
                enable_rbac(self.etcd, self.pki.cert_file(Role.CONTROLLER), prefix=self.store_key_prefix)
        self.coordinator = self._start_service("coordinator", "motor-coordinator",
                                               render.coordinator_config(spec, self._security(Role.COORDINATOR)),
                                               ["grpc_port", "http_port"])
        for index in range(spec.controller_replicas):
            self.controllers.append(self._start_service(spec.replica_name(index), "motor-controller",
                                                        self.controller_config(index), ["grpc_port", "http_port"]))
        if spec.controller_replicas > 1:
            self.leader()
        self.engine_processes = self.engines.start(spec, self.run_dir, min(ready_timeout_sec, 120.0))
        self._start_nodemanagers(ready_timeout_sec)
        log.info("cluster: every process up after %.1fs; waiting for %d instance(s) to serve",
                 time.monotonic() - started, spec.instances)
        # Every rank alive, not only a serving phase: a rank lost while the cluster starts would
        # otherwise pass as started (scaled down) and fail the caller's first step on that rank.
        every_rank = list(range(spec.dp_size))
        if spec.instances == 1:
            self.wait_serving(ready_timeout_sec, alive=every_rank)
        else:
            self.wait_instances_serving(spec.instance_ids(), ready_timeout_sec,
                                        alive={iid: every_rank for iid in spec.instance_ids()})
        log.info("cluster serving after %.1fs", time.monotonic() - started)

    @property
    def store_key_prefix(self) -> str:
        """Where this cluster's Controllers keep their keys in etcd."""
        return f"/motor-{self.run_dir.name}"

    def controller_config(self, index: int = 0) -> dict[str, Any]:
        endpoints = [self.etcd.endpoint] if self.etcd is not None else self.spec.etcd_endpoints
        return render.controller_config(self.spec, index, coordinator_address=self.coordinator_address,
                                        store_endpoints=endpoints, store_key_prefix=self.store_key_prefix,
                                        security=self._security(Role.CONTROLLER))

    def nodemanager_config(self, pod: PodPlan) -> dict[str, Any]:
        return render.nodemanager_config(
            self.spec, pod, controller_addresses=self.controller_addresses, ports=self.ports,
            engine_keys=self.engines.nodemanager_keys(self.spec, pod, self.run_dir),
            log_dir=str(self.run_dir / f"engines-{pod.ip}"),
            security=self.pki.pod_security(pod_cert_name(pod)) if self.pki is not None else None)

    def _start_nodemanagers(self, timeout_sec: float) -> None:
        """Every pod's NodeManager at once (each its own process, or many per host process)."""
        configs = [(pod, self.nodemanager_config(pod)) for pod in self.spec.all_pods()]
        per = self.spec.nodemanagers_per_process
        if per == 1:
            launches = [(pod, self._spawn(pod.name, "motor-nodemanager", cfg)) for pod, cfg in configs]
            for pod, launch in launches:
                self.nodemanagers[pod.ip] = launch.wait(_NM_READY_KEYS, timeout_sec)
            return
        hosts = []
        for n, first in enumerate(range(0, len(configs), per)):
            batch = [cfg for _, cfg in configs[first:first + per]]
            hosts.append((batch, spawn_nodemanager_host(self.run_dir, f"nm-host-{n}", batch, self._extra_args())))
        for batch, host in hosts:
            for cfg, svc in zip(batch, hosted_services(host, batch, timeout_sec), strict=True):
                self.nodemanagers[cfg["pod_ip"]] = svc

    def services(self) -> list[ServiceProc]:
        return [s for s in (self.coordinator, *self.controllers, *self.nodemanagers.values()) if s is not None]

    def nodemanager_processes(self) -> list[ManagedProcess]:
        """The processes the NodeManagers run in (hosts counted once)."""
        return list({svc.proc.pid: svc.proc for svc in self.nodemanagers.values()}.values())

    def _check_alive(self) -> None:
        for svc in self.services():
            code = svc.proc.returncode
            if code is not None and not svc.expected_exit:
                raise RuntimeError(f"{svc.name} exited with {code}; log tail:\n{svc.proc.log_tail()}")
        for name, proc in self.engine_processes.items():
            if proc.returncode is not None:
                raise RuntimeError(f"{name} exited with {proc.returncode}; log tail:\n{proc.log_tail()}")

    def _collect_engine_pids(self) -> None:
        for proc in self.nodemanager_processes():
            self._engine_pids.update(descendant_pids(proc.pid))

    # ---- act ---------------------------------------------------------------------------------

    def inject(self, rank: int, fault: str, *, instance_id: int | None = None, engine_pid: int = 0,
               **params: Any) -> dict[str, Any]:
        """An engine fault (`motor.sim.injection.FAULTS`) on one rank, on either engine backend.
        `engine_pid`: the light engine's placeholder pid when already looked up (so simultaneous
        faults are not spread apart by the look-ups)."""
        return self.engines.inject(self.engine_url(rank, instance_id), fault, params,
                                   lambda: engine_pid or self.engine_pid(rank, instance_id))

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
        freeze(svc.proc.pid)
        self._frozen.add(svc.proc.pid)
        return svc

    def thaw_controller(self, svc: ServiceProc) -> None:
        """SIGCONT a frozen replica (no-op otherwise)."""
        if svc.proc.pid in self._frozen:
            self._frozen.discard(svc.proc.pid)
            thaw(svc.proc.pid)

    def restart_controller(self, timeout_sec: float = 60.0, svc: ServiceProc | None = None) -> ServiceProc:
        """Stops (if still running) and starts again one replica (by default the one believed to lead)
        on its own ports; returns the new process's ServiceProc, which takes the old one's place."""
        svc = svc or self.controller
        assert svc is not None
        index = self.controllers.index(svc)
        self.thaw_controller(svc)
        self.controllers[index] = relaunch(self.run_dir, svc, timeout_sec,
                                           {"server": "grpc_port", "status_http": "http_port"})
        return self.controllers[index]

    def kill_nodemanager(self, pod_ip: str) -> list[int]:
        """SIGKILL a pod: its NodeManager and every engine it runs (as a node or container loss would);
        returns the engine pids killed."""
        svc = self.nodemanagers[pod_ip]
        if svc.shared:
            raise RuntimeError(f"{svc.name} shares its process with other NodeManagers; it cannot be killed alone")
        engines = descendant_pids(svc.proc.pid)
        svc.expected_exit = True
        svc.proc.kill()
        for pid in engines:
            sigkill_engine(pid)
        return engines

    def restart_nodemanager(self, pod_ip: str, timeout_sec: float = 180.0) -> ServiceProc:
        """Starts a pod's NodeManager again on its own gRPC and metrics ports (the Controller knows it
        by address); it launches its engines anew and registers."""
        self.nodemanagers[pod_ip] = relaunch(self.run_dir, self.nodemanagers[pod_ip], timeout_sec,
                                             {"server": "grpc_port", "metrics_http": "metrics_port"})
        return self.nodemanagers[pod_ip]

    def replace_pod(self, old_ip: str, new_ip: str, timeout_sec: float = 180.0) -> ServiceProc:
        """MindCluster's replacement of a stopped pod: a NodeManager at `new_ip` for the same ranks,
        with a fresh log_dir and `replacement_pod` (it launches nothing until the Controller starts
        the ranks); it takes the old pod's place in `nodemanagers`."""
        old = next(p for p in self.spec.all_pods() if p.ip == old_ip)
        pod = PodPlan(old.instance_id, old.index, new_ip, list(old.ranks))
        config = {**self.nodemanager_config(pod), "replacement_pod": True}
        svc = self._spawn(pod.name, "motor-nodemanager", config).wait(_NM_READY_KEYS, timeout_sec)
        gone = self.nodemanagers.pop(old_ip)
        gone.expected_exit = True
        self.nodemanagers[new_ip] = svc
        return svc

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
        self.coordinator = relaunch(self.run_dir, self.coordinator, timeout_sec,
                                    {"server": "grpc_port", "http": "http_port"},
                                    controller_addresses=self.controller_addresses)
        return self.coordinator

    # ---- stop --------------------------------------------------------------------------------

    def stop(self) -> None:
        """Tears every process down by pid (idempotent); a SIGTERM meanwhile waits until it is done."""
        with sigterm_deferred():
            self._collect_engine_pids()
            for svc in self.controllers:
                self.thaw_controller(svc)  # a stopped process would only die at the SIGKILL after the grace
            # NodeManagers first (all at once), then the engines the launcher runs itself, then the
            # standbys, the leader last (a standby stopped after the leader resigned would take over a
            # cluster being torn down), then the Coordinator.
            stop_together(self.nodemanager_processes(), grace_sec=10)
            stop_together(self.engine_processes.values(), grace_sec=10)
            leader = self.controller
            for svc in [*(c for c in self.controllers if c is not leader), *([leader] if leader else []),
                        *([self.coordinator] if self.coordinator else [])]:
                stop_one(svc.proc, grace_sec=10)
            for pid in sorted(self._engine_pids):
                sigkill_engine(pid)
            if self.etcd is not None:
                try:
                    self.etcd.stop()
                except Exception as exc:  # noqa: BLE001 - teardown goes on
                    log.warning("stopping etcd failed: %s", exc)

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
