"""Instance assembly from NodeManager registrations, and the heartbeat contract (RFC §6). Pure.

An instance is assembled once its pods together report every rank 0..dp_size-1; from then on its
rank set is immutable (`original_dp_ranks`). A re-registration may refresh addresses and ports of the
ranks a pod already had, never change which ranks it has; no two pods of an instance share a
NodeManager address. Every pod must report the same
FtCapability; a missing or inconsistent one fails closed (no scale-down, reason recorded).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from gen.motor.v1 import common_pb2, controller_pb2
from motor.controller.model.capability import Capability
from motor.controller.model.placement import EndpointInfo, PodInfo


class RegistrationError(ValueError):
    """Refused registration; `precondition` tells a conflict with known state from a malformed request."""

    def __init__(self, message: str, precondition: bool = False) -> None:
        super().__init__(message)
        self.precondition = precondition


@dataclass
class PodRecord:
    pod_ip: str
    node_name: str
    node_manager_address: str
    endpoints: dict[int, common_pb2.Endpoint]
    capability: common_pb2.FtCapability | None
    last_heartbeat_sec: float
    alive: frozenset[int] = frozenset()
    heartbeat_seen: bool = False
    # Ranks the pod says it retired in committed rounds (kept with the pod until assembly decides).
    retired: frozenset[int] = frozenset()
    dp_store_port_base: int = 0
    # Told to stop (StopPod) since it registered: it hosts nothing until it registers again.
    stop_requested: bool = False
    # The pod URI of the certificate that registered the pod ("" when unknown: plaintext, or a
    # certificate without one). Persisted with the topology, so a restart keeps the binding.
    identity: str = ""

    @property
    def ranks(self) -> tuple[int, ...]:
        return tuple(sorted(self.endpoints))


@dataclass
class InstanceRecord:
    instance_id: int
    role: int
    model: str
    dp_size: int
    pods: dict[str, PodRecord] = field(default_factory=dict)
    assembled: bool = False

    @property
    def original_dp_ranks(self) -> tuple[int, ...]:
        return tuple(sorted(r for pod in self.pods.values() for r in pod.endpoints))

    def capability(self) -> tuple[Capability | None, str]:
        """The shared capability, or None with the reason it is unusable."""
        caps = {ip: pod.capability for ip, pod in self.pods.items()}
        missing = sorted(ip for ip, cap in caps.items() if cap is None)
        if missing:
            return None, f"pods {missing} reported no FT capability"
        distinct = {cap.SerializeToString(deterministic=True) for cap in caps.values() if cap is not None}
        if len(distinct) != 1:
            return None, "pods reported different FT capabilities: " + "; ".join(
                f"{ip}={_cap_text(cap)}" for ip, cap in sorted(caps.items())
            )
        cap = next(iter(caps.values()))
        assert cap is not None
        return (
            Capability(
                engine_ft_enabled=cap.engine_ft_enabled,
                scale_down_supported=cap.scale_down_supported,
                external_lb=cap.external_lb,
                auto_recovery=cap.auto_recovery,
                enable_eplb=cap.enable_eplb,
                num_redundant_experts=cap.num_redundant_experts,
                retry_supported=cap.retry_supported,
                supports_scale_up=cap.supports_scale_up,
            ),
            "",
        )

    def endpoint_infos(self) -> dict[int, EndpointInfo]:
        return {
            rank: EndpointInfo(rank, ep.ip, ep.headless) for pod in self.pods.values() for rank, ep in pod.endpoints.items()
        }

    def pod_infos(self) -> list[PodInfo]:
        return [PodInfo(p.pod_ip, p.node_manager_address, p.ranks) for p in self.pods.values()]

    def store_port(self, master_rank: int, removed_cumulative: int) -> int:
        """The TCPStore port of a round whose new master is `master_rank` and after which
        `removed_cumulative` ranks are removed (0: let the NodeManagers choose).

        The new master's pod base plus that count: it grows every round since the last rebuild, so no
        round binds a port an earlier round's store server may still hold, even under the same
        master; at most dp_size - 1 ranks are ever removed, so the port stays within the
        base + dp_size - 1 the NodeManager's config checks."""
        pod = next((p for p in self.pods.values() if master_rank in p.endpoints), None)
        return pod.dp_store_port_base + removed_cumulative if pod is not None and pod.dp_store_port_base else 0

    def bindings(self) -> dict[str, str]:
        """Each bound pod's pod URI, by pod IP."""
        return {ip: pod.identity for ip, pod in self.pods.items() if pod.identity}

    def topology(self, with_bindings: bool = False) -> common_pb2.Instance:
        """The authoritative topology as a motor.v1.Instance; `with_bindings` (the persisted copy
        only) adds each pod's bound pod URI."""
        inst = common_pb2.Instance(id=self.instance_id, role=self.role, model=self.model, dp_size=self.dp_size)
        for pod in sorted(self.pods.values(), key=lambda p: p.pod_ip):
            inst.pods.add(
                pod_ip=pod.pod_ip, node_name=pod.node_name, node_manager_address=pod.node_manager_address,
                endpoint_ids=list(pod.ranks), dp_store_port_base=pod.dp_store_port_base,
                bound_pod_uri=pod.identity if with_bindings else "",
            )
            inst.endpoints.extend(pod.endpoints[r] for r in pod.ranks)
        inst.endpoints.sort(key=lambda e: e.id)
        cap, _ = self.capability()
        if cap is not None:
            inst.ft_capability.CopyFrom(next(iter(self.pods.values())).capability)
        return inst


def _cap_text(cap: common_pb2.FtCapability | None) -> str:
    if cap is None:
        return "none"
    return (
        f"(ft={cap.engine_ft_enabled} scale_down={cap.scale_down_supported} external_lb={cap.external_lb} "
        f"auto_recovery={cap.auto_recovery} eplb={cap.enable_eplb} redundant={cap.num_redundant_experts} "
        f"retry={cap.retry_supported})"
    )


def _validate(req: controller_pb2.RegisterRequest) -> None:
    pod = req.pod
    if not pod.pod_ip:
        raise RegistrationError("pod.pod_ip is empty")
    if not pod.node_manager_address:
        raise RegistrationError(f"pod {pod.pod_ip}: node_manager_address is empty")
    if req.instance_id < 0:
        raise RegistrationError(f"instance_id {req.instance_id} is negative")
    if req.dp_size < 1:
        raise RegistrationError(f"instance {req.instance_id}: dp_size {req.dp_size} must be >= 1")
    if not req.endpoints:
        raise RegistrationError(f"pod {pod.pod_ip}: no endpoints")
    ids = [e.id for e in req.endpoints]
    if len(set(ids)) != len(ids):
        raise RegistrationError(f"pod {pod.pod_ip}: endpoint ids {ids} repeat")
    bad = [i for i in ids if not 0 <= i < req.dp_size]
    if bad:
        raise RegistrationError(f"pod {pod.pod_ip}: endpoint ids {bad} outside 0..{req.dp_size - 1}")
    for ep in req.endpoints:
        if ep.ip != pod.pod_ip:
            raise RegistrationError(f"pod {pod.pod_ip}: endpoint {ep.id} has ip {ep.ip!r}, not the pod ip")
        if not ep.headless and not 0 < ep.business_port <= 65535:
            raise RegistrationError(f"pod {pod.pod_ip}: endpoint {ep.id} business_port {ep.business_port} invalid")
        if ep.HasField("instance_route"):
            route = ep.instance_route
            if ep.headless:
                raise RegistrationError(f"pod {pod.pod_ip}: endpoint {ep.id} is headless but has an instance_route")
            if not route.host or any(ch.isspace() for ch in route.host) or not 0 < route.port <= 65535:
                raise RegistrationError(f"pod {pod.pod_ip}: endpoint {ep.id} instance_route {route.host!r}:"
                                        f"{route.port} is not host:port")
    if pod.endpoint_ids and sorted(pod.endpoint_ids) != sorted(ids):
        raise RegistrationError(f"pod {pod.pod_ip}: pod.endpoint_ids {list(pod.endpoint_ids)} != endpoints {ids}")


class InstanceCapError(RegistrationError):
    """A registration of a new instance beyond `max_instances`."""


class InstanceRegistry:
    def __init__(self, max_instances: int | None = None) -> None:
        self._instances: dict[int, InstanceRecord] = {}
        # Bounds what one NodeManager certificate can make the Controller hold and publish.
        self.max_instances = max_instances

    def get(self, instance_id: int) -> InstanceRecord | None:
        return self._instances.get(instance_id)

    def all(self) -> list[InstanceRecord]:
        return [self._instances[i] for i in sorted(self._instances)]

    def clear(self) -> None:
        """Forgets every instance (a replica that stops leading re-assembles them from the store)."""
        self._instances.clear()

    def restore(self, topology: common_pb2.Instance, now_sec: float) -> InstanceRecord:
        """Re-creates an assembled instance from persisted topology (controller restart)."""
        record = InstanceRecord(topology.id, topology.role, topology.model, topology.dp_size, assembled=True)
        by_id = {e.id: e for e in topology.endpoints}
        cap = topology.ft_capability if topology.HasField("ft_capability") else None
        for pod in topology.pods:
            record.pods[pod.pod_ip] = PodRecord(
                pod.pod_ip, pod.node_name, pod.node_manager_address, {r: by_id[r] for r in pod.endpoint_ids}, cap, now_sec,
                dp_store_port_base=pod.dp_store_port_base, identity=pod.bound_pod_uri,
            )
        self._instances[topology.id] = record
        return record

    def register(self, req: controller_pb2.RegisterRequest, now_sec: float,
                 identity: str = "", dead_committed: frozenset[int] = frozenset(),
                 silent_for_sec: float = 0.0) -> tuple[InstanceRecord, bool]:
        """Records a pod (bound to `identity`, the caller's pod URI); returns the instance and whether
        this call completed its assembly. A pod at a new address that hosts exactly the ranks of a
        known pod told to stop or silent for `silent_for_sec`, every one of them in `dead_committed` and registered
        retired, replaces that pod (the orchestrator recreated it: a candidate for capacity
        restoration). A known pod still heartbeating is never replaced, so two live pods cannot take
        the ranks from each other in turn."""
        _validate(req)
        pod_ip = req.pod.pod_ip
        record = self._instances.get(req.instance_id)
        replaced = _replaced_pod(record, req, dead_committed, now_sec - silent_for_sec)
        if record is None and self.max_instances is not None and len(self._instances) >= self.max_instances:
            raise InstanceCapError(
                f"instance {req.instance_id}: pod {pod_ip} would register instance number "
                f"{len(self._instances) + 1}; this Controller holds at most max_instances={self.max_instances}",
                precondition=True,
            )
        if record is None:
            record = InstanceRecord(req.instance_id, req.role, req.model, req.dp_size)
        elif (record.dp_size, record.model, record.role) != (req.dp_size, req.model, req.role):
            raise RegistrationError(
                f"instance {req.instance_id}: pod {pod_ip} says dp_size={req.dp_size} model={req.model!r} "
                f"role={req.role}, instance has dp_size={record.dp_size} model={record.model!r} role={record.role}",
                precondition=True,
            )
        ids = sorted(e.id for e in req.endpoints)
        known = record.pods.get(pod_ip)
        if known is not None and list(known.ranks) != ids:
            raise RegistrationError(
                f"instance {req.instance_id}: pod {pod_ip} re-registered ranks {ids}, it had {list(known.ranks)}; "
                "an instance's ranks are immutable",
                precondition=True,
            )
        others = [o for o in record.pods.values() if o.pod_ip != pod_ip and o is not replaced]
        for other in others:
            clash = sorted(set(ids) & set(other.ranks))
            if clash:
                raise RegistrationError(
                    f"instance {req.instance_id}: ranks {clash} of pod {pod_ip} are already hosted by pod {other.pod_ip}",
                    precondition=True,
                )
        address = req.pod.node_manager_address
        # A round calls each pod's NodeManager by address: behind a shared one, one NodeManager
        # would answer for both pods' ranks.
        sharing = next((o for o in others if o.node_manager_address == address), None)
        if sharing is not None:
            raise RegistrationError(
                f"instance {req.instance_id}: pod {pod_ip} registered NodeManager address {address}, which pod "
                f"{sharing.pod_ip} already has; every pod needs a NodeManager address of its own",
                precondition=True,
            )
        if record.assembled and known is None and replaced is None:
            raise RegistrationError(
                f"instance {req.instance_id} is already assembled; pod {pod_ip} is not part of it", precondition=True
            )
        if replaced is not None:
            del record.pods[replaced.pod_ip]
        record.pods[pod_ip] = PodRecord(
            pod_ip=pod_ip,
            node_name=req.pod.node_name,
            node_manager_address=req.pod.node_manager_address,
            endpoints={e.id: e for e in req.endpoints},
            capability=req.ft_capability if req.HasField("ft_capability") else None,
            last_heartbeat_sec=now_sec,
            retired=frozenset(req.retired_ids),
            dp_store_port_base=req.pod.dp_store_port_base,
            identity=identity or (known.identity if known is not None else ""),
        )
        self._instances[req.instance_id] = record
        newly = False
        if not record.assembled and list(record.original_dp_ranks) == list(range(record.dp_size)):
            record.assembled = True
            newly = True
        return record, newly

    def heartbeat(self, pod_ip: str, instance_id: int, alive: Iterable[int], now_sec: float) -> PodRecord | None:
        """Records a heartbeat; None when the pod is unknown (the NodeManager must re-register)."""
        record = self._instances.get(instance_id)
        pod = record.pods.get(pod_ip) if record else None
        if pod is None:
            return None
        pod.last_heartbeat_sec = now_sec
        pod.alive = frozenset(alive)
        pod.heartbeat_seen = True
        return pod


def _replaced_pod(record: InstanceRecord | None, req: controller_pb2.RegisterRequest,
                  dead_committed: frozenset[int], silent_since_sec: float) -> PodRecord | None:
    """The known pod a registration from a new address replaces, None when it replaces none."""
    if record is None or not record.assembled or req.pod.pod_ip in record.pods:
        return None
    ids = sorted(e.id for e in req.endpoints)
    old = next((p for p in record.pods.values() if list(p.ranks) == ids), None)
    if old is None or not set(ids) <= dead_committed or not set(ids) <= set(req.retired_ids):
        return None
    if old.last_heartbeat_sec > silent_since_sec and not old.stop_requested:
        return None
    return old


def expected_alive(pod: PodRecord, dead_committed: Iterable[int], scale_down_enabled: bool) -> frozenset[int]:
    """What the pod's heartbeat must report (RFC §6): every rank with scale-down off; with it on,
    exactly the ranks not committed dead (empty only when all are)."""
    ranks = frozenset(pod.ranks)
    return ranks - frozenset(dead_committed) if scale_down_enabled else ranks
