"""What a running local cluster says about itself: the Controller's runtime and timeline, etcd's own
record, metrics scrapes, the Coordinator's published view, the engines' journals, and the waits
built on them. Read-only; `LocalCluster` mixes it in.

Every read speaks TLS as the operator when the cluster runs with a PKI. The per-instance waits
(`wait_instances`) read the Controller's compact gRPC status, far lighter than the JSON page for
fleets: a benchmark that polls must not be what it measures.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc

from gen.motor.v1 import (
    controller_pb2,
    controller_pb2_grpc,
    coordinator_pb2,
    coordinator_pb2_grpc,
    node_manager_pb2,
    node_manager_pb2_grpc,
)
from motor.common.config.tls import ClientTlsConfig
from motor.common.pki import DevPki
from motor.common.security import Role
from motor.common.text import rank_ranges
from motor.launch.engines import EngineBackend, LightEngines
from motor.launch.etcd import EtcdServer
from motor.launch.processes import ServiceProc
from motor.launch.spec import ClusterSpec
from motor.sim.client import SimClient

SERVING_PHASES = ("NORMAL", "SCALED_DOWN_RUNNING")


class ClusterObservation:
    spec: ClusterSpec
    run_dir: Path
    engines: EngineBackend
    pki: DevPki | None
    etcd: EtcdServer | None
    coordinator: ServiceProc | None
    controllers: list[ServiceProc]
    nodemanagers: dict[str, ServiceProc]
    engine_processes: dict[str, Any]
    _primary: int
    _frozen: set[int]

    def http_context(self) -> ssl.SSLContext | None: ...
    def client_tls(self, role: Role = Role.OPERATOR) -> ClientTlsConfig | None: ...
    def grpc_channel(self, address: str, role: Role = Role.OPERATOR) -> grpc.Channel: ...
    def _check_alive(self) -> None: ...
    def _collect_engine_pids(self) -> None: ...

    # ---- addresses ---------------------------------------------------------------------------

    @property
    def _scheme(self) -> str:
        return "https" if self.pki is not None else "http"

    @property
    def coordinator_http(self) -> str:
        assert self.coordinator is not None
        return f"{self._scheme}://127.0.0.1:{self.coordinator.info['http_port']}"

    @property
    def coordinator_address(self) -> str:
        assert self.coordinator is not None
        return f"127.0.0.1:{self.coordinator.info['grpc_port']}"

    @property
    def controller(self) -> ServiceProc | None:
        """The Controller replica believed to lead (the only one without replicas)."""
        return self.controllers[self._primary] if self.controllers else None

    @property
    def controller_http(self) -> str:
        assert self.controller is not None
        return f"{self._scheme}://127.0.0.1:{self.controller.info['http_port']}"

    @property
    def controller_address(self) -> str:
        assert self.controller is not None
        return f"127.0.0.1:{self.controller.info['grpc_port']}"

    @property
    def controller_addresses(self) -> list[str]:
        """Every replica's gRPC address, in start order."""
        return [f"127.0.0.1:{svc.info['grpc_port']}" for svc in self.controllers]

    # ---- the Controller ----------------------------------------------------------------------

    def _get_json(self, url: str, timeout_sec: float) -> Any:
        with urllib.request.urlopen(url, timeout=timeout_sec, context=self.http_context()) as resp:
            return json.load(resp)

    def controller_status(self, svc: ServiceProc, timeout_sec: float = 2.0) -> dict[str, Any] | None:
        """One replica's whole status page (instances and leadership), or None when it does not answer."""
        if not svc.proc.running or svc.proc.pid in self._frozen:
            return None
        url = f"{self._scheme}://127.0.0.1:{svc.info['http_port']}/controller/fault_tolerance/status"
        try:
            doc = self._get_json(url, timeout_sec)
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

    def runtime(self, timeout_sec: float = 5.0, *, instance_id: int | None = None) -> dict[str, Any] | None:
        """An instance's RFC §7 runtime from the controller's JSON page, or None when not there yet.
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
        iid = self.spec.instance_id if instance_id is None else instance_id
        try:
            return self._get_json(f"{self.controller_http}/controller/fault_tolerance/status?instance_id={iid}",
                                  timeout_sec)["instances"][0]
        except (urllib.error.URLError, OSError, KeyError, IndexError, ValueError):
            return None

    def timeline(self, timeout_sec: float = 5.0, *, instance_id: int | None = None) -> list[dict[str, Any]]:
        iid = self.spec.instance_id if instance_id is None else instance_id
        return self._get_json(f"{self.controller_http}/controller/fault_tolerance/timeline?instance_id={iid}",
                              timeout_sec)["transactions"]

    def finished_round(self, before: int, *, instance_id: int | None = None,
                       timeout_sec: float = 30.0) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """The timeline and its newest transaction once one after the first `before` has ended: the
        survivors are published before the round's last steps (its re-inference count), so serving
        can be seen a moment before the transaction says how it ended."""
        deadline = time.monotonic() + timeout_sec
        while True:
            txns = self.timeline(10.0, instance_id=instance_id)
            if (len(txns) > before and txns[-1]["outcome"] != "running") or time.monotonic() > deadline:
                return txns, txns[-1]
            time.sleep(0.2)

    def runtimes_brief(self, instance_ids: list[int]) -> dict[int, dict[str, Any]]:
        """phase, alive_dp_ranks, serving_published, last_error of each instance, in one gRPC
        GetFaultToleranceStatus."""
        try:
            with self.grpc_channel(self.controller_address) as channel:
                resp = controller_pb2_grpc.ControllerStub(channel).GetFaultToleranceStatus(
                    controller_pb2.GetFaultToleranceStatusRequest(instance_ids=instance_ids), timeout=10)
        except grpc.RpcError:
            return {}
        phase = controller_pb2.DESCRIPTOR.enum_types_by_name["FtPhase"]
        return {r.instance_id: {"instance_id": r.instance_id, "alive_dp_ranks": list(r.alive_dp_ranks),
                                "phase": phase.values_by_number[r.phase].name.removeprefix("FT_PHASE_"),
                                "serving_published": r.serving_published,
                                "last_error": r.last_error if r.HasField("last_error") else None}
                for r in resp.instances}

    # ---- waits -------------------------------------------------------------------------------

    def wait_until(self, predicate: Callable[[dict[str, Any]], bool], timeout_sec: float, what: str,
                   poll_sec: float = 0.2) -> dict[str, Any]:
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
            if rt["phase"] not in (*SERVING_PHASES, "DISABLED"):
                return False
            return alive is None or rt["alive_dp_ranks"] == alive
        rt = self.wait_until(ok, timeout_sec, f"instance {self.spec.instance_id} serving ranks {alive or 'all'}")
        self._collect_engine_pids()
        return rt

    def wait_instances(self, instance_ids: list[int], predicate: Callable[[dict[str, Any]], bool],
                       timeout_sec: float, what: str, poll_sec: float = 0.1) -> dict[int, dict[str, Any]]:
        """Polls every instance's brief status until `predicate` holds for each; instance → status."""
        deadline = time.monotonic() + timeout_sec
        pending = set(instance_ids)
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

    def wait_instances_serving(self, instance_ids: list[int], timeout_sec: float,
                               alive: dict[int, list[int]] | None = None,
                               poll_sec: float = 0.2) -> dict[int, dict[str, Any]]:
        def ok(rt: dict[str, Any]) -> bool:
            if not rt["serving_published"] or rt["phase"] not in SERVING_PHASES:
                return False
            return alive is None or rt["alive_dp_ranks"] == alive[rt["instance_id"]]
        done = self.wait_instances(instance_ids, ok, timeout_sec, "serving", poll_sec)
        self._collect_engine_pids()
        return done

    # ---- etcd, metrics, the Coordinator --------------------------------------------------------

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

    # ---- engines -----------------------------------------------------------------------------

    def describe_pod(self, rank: int, instance_id: int | None = None) -> Any:
        """DescribePod of the NodeManager that runs `rank`."""
        iid = self.spec.instance_id if instance_id is None else instance_id
        pod_ip = self.spec.pod_ip(iid, self.spec.pod_of(rank))
        svc = self.nodemanagers[pod_ip]
        with self.grpc_channel(f"{pod_ip}:{svc.info['grpc_port']}") as channel:
            return node_manager_pb2_grpc.NodeManagerStub(channel).DescribePod(
                node_manager_pb2.DescribePodRequest(), timeout=10)

    def _described(self, rank: int, instance_id: int | None) -> Any:
        for engine in self.describe_pod(rank, instance_id).engines:
            if engine.endpoint.id == rank:
                return engine
        raise KeyError(f"no pod describes rank {rank}")

    def engine_url(self, rank: int, instance_id: int | None = None) -> str:
        """The HTTP base URL of a rank's engine."""
        iid = self.spec.instance_id if instance_id is None else instance_id
        address = self.engines.engine_address(self.spec, iid, rank)
        if address is None:
            endpoint = self._described(rank, iid).endpoint
            address = (endpoint.ip, endpoint.business_port)
        return f"http://{address[0]}:{address[1]}"

    def engine_pid(self, rank: int, instance_id: int | None = None) -> int:
        """The pid the rank's NodeManager supervises (a light engine's placeholder)."""
        return self._described(rank, instance_id).pid

    def engine_client(self, rank: int) -> SimClient:
        """The rank's reference engine, directly (its FT API and admin routes)."""
        return SimClient(self.engine_url(rank), timeout_sec=10)

    def engine_applies(self, rank: int) -> list[dict[str, Any]]:
        """Every apply the rank's engines were sent in this cluster's life, oldest first: the
        reference engines' own journal (it outlives a relaunch), or the light group's (its
        ``received`` transitions)."""
        if isinstance(self.engines, LightEngines):
            return [{"instruction": e["instruction"], "request_id": e["request_id"]} for e in self.journal()[1]
                    if e["event"] == "received" and e["rank"] == rank]
        path = self.run_dir / f"engine-applies-rank{rank}.jsonl"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def journal(self, since: int = 0, *, instance_id: int | None = None) -> tuple[int, list[dict[str, Any]]]:
        """A light engine group's transitions after index `since` (read through any live rank)."""
        last: Exception | None = None
        for rank in range(self.spec.dp_size):
            try:
                doc = self._get_json(f"{self.engine_url(rank, instance_id)}/fake/journal?since={since}", 10)
                return doc["next"], doc["events"]
            except (urllib.error.URLError, OSError) as exc:
                last = exc
        raise RuntimeError(f"instance {instance_id}: no rank answers /fake/journal: {last}")

    def journal_length(self, *, instance_id: int | None = None) -> int:
        return self.journal(1 << 30, instance_id=instance_id)[0]

    def log_bytes(self) -> dict[str, int]:
        """Bytes in each service's log now (the Controller, the Coordinator, NodeManagers summed)."""
        def size(svc: ServiceProc | None) -> int:
            try:
                return svc.proc.log_path.stat().st_size if svc is not None else 0
            except OSError:
                return 0
        hosts = {svc.proc.pid: svc for svc in self.nodemanagers.values()}
        return {"controller": size(self.controller), "coordinator": size(self.coordinator),
                "nodemanagers": sum(size(svc) for svc in hosts.values())}
