"""What a local cluster is made of: `ClusterSpec` (instances, pods, control-plane settings) and the
plans derived from it without touching the machine (pod addresses, ranks per pod, fixed port plans).

Two address plans: ``shared`` puts the pods of one instance on 127.0.0.{first_pod_ip + i} (the
e2e, demo and chaos clusters); ``per_instance`` gives pod p of instance i the address
127.{99+i}.{p//200}.{p%200+2}, so many instances of hundreds of pods fit on loopback and nothing
collides with a ``shared`` cluster running beside it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

# Fixed per-instance master and store ports of a `fixed_ports` plan (the light engines bind none of
# them: the fake group only carries them in its apply bodies).
FIXED_STORE_PORT_BASE = 21000


@dataclass
class ClusterSpec:
    """What to start. Pods get `ranks_per_pod` consecutive ranks each, addresses by `address_plan`."""

    dp_size: int = 4
    ranks_per_pod: int = 2
    instance_id: int = 1
    # More than one: instances instance_id, instance_id + 1, ... (needs address_plan "per_instance").
    instances: int = 1
    address_plan: Literal["shared", "per_instance"] = "shared"
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
    # Control-plane timing; None leaves the service's own default.
    heartbeat_interval_sec: float = 1.0
    heartbeat_timeout_sec: float | None = 6.0
    publish_interval_sec: float | None = 3.0
    reconfiguration_timeout_sec: float | None = 120.0
    engine_poll_interval_sec: float | None = None
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
    # NodeManagers per process: 1 runs each as its own service; more host that many per process
    # (motor.testing.nodemanager_host), for fleets too large for one process per pod.
    nodemanagers_per_process: int = 1
    # --log-level of every service (None: their default).
    log_level: str | None = None

    def __post_init__(self) -> None:
        if self.dp_size % self.ranks_per_pod:
            raise ValueError(f"dp_size {self.dp_size} is not a multiple of ranks_per_pod {self.ranks_per_pod}")
        if self.instances < 1:
            raise ValueError(f"instances {self.instances} must be >= 1")
        if self.instances > 1 and self.address_plan != "per_instance":
            raise ValueError(f"{self.instances} instances need address_plan 'per_instance'")
        if self.controller_replicas < 1:
            raise ValueError(f"controller_replicas {self.controller_replicas} must be >= 1")
        if self.controller_replicas > 1 and not (self.start_etcd or self.etcd_endpoints):
            raise ValueError(f"controller_replicas {self.controller_replicas} needs etcd (start_etcd or etcd_endpoints)")
        if self.nodemanagers_per_process < 1:
            raise ValueError(f"nodemanagers_per_process {self.nodemanagers_per_process} must be >= 1")

    @property
    def pods_per_instance(self) -> int:
        return self.dp_size // self.ranks_per_pod

    @property
    def hosted(self) -> bool:
        """NodeManagers share host processes."""
        return self.nodemanagers_per_process > 1

    def instance_ids(self) -> list[int]:
        return list(range(self.instance_id, self.instance_id + self.instances))

    def pod_ip(self, instance_id: int, pod: int) -> str:
        if self.address_plan == "shared":
            return f"127.0.0.{self.first_pod_ip + pod}"
        return f"127.{99 + instance_id}.{pod // 200}.{pod % 200 + 2}"

    def pod_of(self, rank: int) -> int:
        return rank // self.ranks_per_pod

    def pod_ranks(self, pod: int) -> list[int]:
        return list(range(pod * self.ranks_per_pod, (pod + 1) * self.ranks_per_pod))

    def pods(self, instance_id: int | None = None) -> list[tuple[str, list[int]]]:
        """(pod IP, ranks) of every pod of one instance (by default the first)."""
        iid = self.instance_id if instance_id is None else instance_id
        return [(self.pod_ip(iid, p), self.pod_ranks(p)) for p in range(self.pods_per_instance)]

    def all_pods(self) -> list[PodPlan]:
        return [PodPlan(iid, p, self.pod_ip(iid, p), self.pod_ranks(p))
                for iid in self.instance_ids() for p in range(self.pods_per_instance)]

    def fault_tolerance(self) -> dict[str, Any]:
        return {
            "enable_fault_tolerance": self.enable_fault_tolerance,
            "enable_dp_scale_down": self.enable_dp_scale_down,
            "enable_dp_scale_up": self.enable_dp_scale_up,
        }

    def replica_name(self, index: int) -> str:
        return "controller" if self.controller_replicas == 1 else f"controller-{index}"


@dataclass(frozen=True)
class PodPlan:
    instance_id: int
    index: int
    ip: str
    ranks: list[int]

    @property
    def name(self) -> str:
        return f"nodemanager-{self.ip}"


@dataclass(frozen=True)
class PortsPlan:
    """Per instance: the DP master's port and the base of the per-round store ports."""

    dp_master_port: dict[int, int]
    dp_store_port_base: dict[int, int]


def fixed_ports(spec: ClusterSpec) -> PortsPlan:
    """A plan of fixed ports below the ephemeral range, one disjoint block per instance."""
    return PortsPlan(
        dp_master_port={iid: FIXED_STORE_PORT_BASE - 1 - (iid - spec.instance_id + 1) for iid in spec.instance_ids()},
        dp_store_port_base={iid: FIXED_STORE_PORT_BASE + (iid - spec.instance_id) * (spec.dp_size + 8)
                            for iid in spec.instance_ids()},
    )
