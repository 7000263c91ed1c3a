"""motor-controller's configuration: its servers, the runtime store, hardware fault sources, leader
election, and the timers of heartbeats, publication and reconfiguration."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from motor.common.config.addresses import check_host_ports
from motor.common.config.base import ConfigModel, PositiveSec
from motor.common.config.capacity_restore import CapacityRestoreConfig
from motor.common.config.fault_tolerance import FaultToleranceConfig
from motor.common.config.listeners import HttpListenConfig, ServerConfig
from motor.common.config.posture import PostureConfig, check_posture
from motor.common.config.publication import PublicationConfig
from motor.common.config.tls import ClientTlsConfig, SecurityConfig, security_exclusive

# DevicePublicNamePre as the device plugin accepts it (customname.deviceNamePattern).
_CARD_NAME_PREFIX_RE = re.compile(r"^[a-zA-Z][a-zA-Z0-9-]{1,15}$")


class StoreConfig(ConfigModel):
    """Runtime state store. No etcd endpoints means the in-memory store (state lost on restart)."""

    etcd_endpoints: list[str] = Field(
        default=[], description="etcd members (host:port); empty: the in-memory store, lost on restart.")
    key_prefix: str = Field(
        default="/motor/v1", description="Prefix of every key Motor writes in etcd ('/…', no trailing '/').")
    request_timeout_sec: PositiveSec = Field(default=5.0, description="Deadline of one etcd request, in seconds.")
    tls: ClientTlsConfig | None = Field(
        default=None,
        description="TLS towards etcd (cert+key: client certificate); unset with `security`: the security files.")

    _check_endpoints = field_validator("etcd_endpoints")(check_host_ports)

    @field_validator("key_prefix")
    @classmethod
    def _check_prefix(cls, value: str) -> str:
        if not value.startswith("/") or value.endswith("/") or len(value) < 2:
            raise ValueError(f"key_prefix {value!r} must start with '/' and not end with '/'")
        return value


class HardwareMonitorConfig(ConfigModel):
    """ResourceMonitor sources of MindCluster hardware faults (the RPC source is always on)."""

    configmap_dir: str | None = Field(
        default=None, description="Directory of mounted `mindx-dl-deviceinfo-<node>` ConfigMaps; unset: not watched.")
    poll_interval_sec: PositiveSec = Field(default=2.0, description="Seconds between reads of configmap_dir.")
    kubernetes: Literal["auto", "off", "on"] = Field(
        default="auto",
        description="List+watch ConfigMaps and Nodes: auto when a kube config loads, on refuses to start "
                    "without one, off never.")
    card_name_prefixes: list[str] = Field(
        default=[],
        description="DevicePublicNamePre of an operator's deviceNameCustomization.json (e.g. 'custom910-'), "
                    "known beside MindCluster's own.")

    @field_validator("card_name_prefixes")
    @classmethod
    def _check_card_name_prefixes(cls, value: list[str]) -> list[str]:
        for prefix in value:
            if not _CARD_NAME_PREFIX_RE.match(prefix):
                raise ValueError(f"card name prefix {prefix!r} is not a DevicePublicNamePre "
                                 f"({_CARD_NAME_PREFIX_RE.pattern})")
        return value

    @field_validator("configmap_dir")
    @classmethod
    def _check_dir(cls, value: str | None) -> str | None:
        if value is not None and (not value.strip() or "\0" in value):
            raise ValueError(f"configmap_dir {value!r} is blank or holds a NUL byte; omit it to watch no directory")
        return value


class LeaderElectionConfig(ConfigModel):
    """Controller replicas on one etcd: one leader by an etcd lease (motor.controller.election).

    "auto" elects whenever store.etcd_endpoints is set (so a rolling update's two overlapping
    replicas never both act), "on" refuses to start without etcd, "off" acts without electing
    (one replica only). The leader key is `{store.key_prefix}/leader`."""

    mode: Literal["auto", "on", "off"] = Field(
        default="auto",
        description="auto: elect when etcd is configured; on: require etcd; off: one replica, no election.")
    # etcd's own floor is about 2 s; a leader that cannot renew stops acting before its lease ends.
    lease_ttl_sec: Annotated[int, Field(ge=2, le=300)] = Field(
        default=5, description="etcd lease TTL in whole seconds: a crashed leader is replaced within it.")
    advertise_address: str | None = Field(
        default=None,
        description="host:port other replicas and NodeManagers are told to call; unset: server.host and the "
                    "bound port.")
    replica_id: str | None = Field(
        default=None, description="This replica's name in the leader key and on the status page; unset: hostname-pid.")
    standby_refresh_interval_sec: PositiveSec = Field(
        default=1.0, description="Seconds between a standby's reloads of the persisted runtime (its read-only view).")
    # Replicas cannot find one another without etcd, so the count is declared (the manifests' replicas).
    expected_replicas: Annotated[int, Field(ge=1, le=16)] = Field(
        default=1, description="How many Controller replicas run; above 1, start is refused unless they elect "
                    "(store.etcd_endpoints set, mode not off).")

    _check_advertise = field_validator("advertise_address")(check_host_ports)

    @field_validator("replica_id")
    @classmethod
    def _check_replica_id(cls, value: str | None) -> str | None:
        if value is not None and (not value.strip() or len(value) > 128):
            raise ValueError(f"replica_id {value!r} is blank or longer than 128 characters")
        return value


class ControllerConfig(PostureConfig):
    """The Controller's settings. Across keys: heartbeat_timeout_sec must exceed heartbeat_interval_sec,
    leader_election.mode "on" needs store.etcd_endpoints, and `security` excludes server.tls and
    client_tls."""

    server: ServerConfig = Field(
        default=ServerConfig(), description="The gRPC server (NodeManagers, the Coordinator, motorctl).")
    status_http: HttpListenConfig = Field(
        default=HttpListenConfig(), description="The HTTP status, timeline and /metrics pages.")
    store: StoreConfig = Field(default=StoreConfig(), description="Where the runtime is persisted.")
    fault_tolerance_config: FaultToleranceConfig = Field(
        default=FaultToleranceConfig(), description="RFC §7 fault-tolerance switches and timers.")
    hardware_monitor: HardwareMonitorConfig = Field(
        default=HardwareMonitorConfig(), description="Sources of MindCluster hardware faults.")
    leader_election: LeaderElectionConfig = Field(
        default=LeaderElectionConfig(), description="One acting leader among Controller replicas.")
    capacity_restore: CapacityRestoreConfig = Field(
        default=CapacityRestoreConfig(), description="Capacity restoration of scaled-down instances (off by default).")
    coordinator_address: str | None = Field(
        default=None, description="host:port of the Coordinator's gRPC server; unset: nothing is published.")
    publication: PublicationConfig = Field(
        default=PublicationConfig(),
        description="Where the serving view is published: the Coordinator and/or vllm-router processes.")
    coordinator_management_key: str | None = Field(
        default=None, description="Sent as gRPC metadata x-motor-key when the Coordinator requires a management key.")
    coordinator_management_key_file: str | None = Field(
        default=None, description="File holding that key (instead of coordinator_management_key).")
    client_tls: ClientTlsConfig | None = Field(
        default=None, description="TLS of calls to NodeManagers and the Coordinator; unset: plaintext.")
    security: SecurityConfig | None = Field(
        default=None, description="mTLS everywhere with role checks; excludes server.tls and client_tls.")
    max_instances: Annotated[int, Field(ge=1, le=4096)] = Field(
        default=256, description="Instances this Controller holds at most; a Register of one more is refused "
                                 "RESOURCE_EXHAUSTED naming the value.")
    heartbeat_interval_sec: PositiveSec = Field(
        default=2.0, description="Seconds between NodeManager heartbeats (told to them at registration).")
    heartbeat_timeout_sec: PositiveSec = Field(
        default=10.0, description="Seconds of silence after which a pod is considered lost.")
    # At fleet size the heartbeats that only repeat what the Controller holds are most of its work
    # (docs/benchmarks.md); a changed alive set still goes at the next period, so only the liveness
    # signal of an unchanged pod is sent less often: a third of the timeout, as etcd's clients renew
    # their leases and ZooKeeper's ping their sessions.
    heartbeat_quiet_interval_sec: Annotated[float, Field(ge=0.0, le=300.0)] | None = Field(
        default=None,
        description="Longest time between heartbeats of a NodeManager whose alive endpoints have not changed, in "
                    "seconds (a change goes at the next heartbeat_interval_sec); at least heartbeat_interval_sec "
                    "and at most half of heartbeat_timeout_sec. Unset: the larger of heartbeat_interval_sec and "
                    "heartbeat_timeout_sec / 3; 0: a heartbeat every heartbeat_interval_sec.")
    publish_interval_sec: PositiveSec = Field(
        default=10.0,
        description="Seconds between full-view SETs, so the Coordinator converges after a lost publication.")
    reconfiguration_timeout_sec: PositiveSec = Field(
        default=300.0, description="Bound of one whole-instance reconfiguration, in seconds.")
    # Retries wait strategy_center_check_interval, doubling up to the cap; after the last attempt the
    # instance waits (RECONFIGURING, last_error says so) until one of its pods registers again.
    reconfiguration_max_attempts: Annotated[int, Field(ge=1, le=1000)] = Field(
        default=5, description="Attempts of a failing reconfiguration before the instance waits for a pod.")
    reconfiguration_max_backoff_sec: PositiveSec = Field(
        default=300.0, description="Cap of the doubling delay between reconfiguration attempts, in seconds.")
    # Not waiting for the NodeManagers' 1 Hz polls shortens the time to a complete snapshot.
    snapshot_pull_interval_sec: Annotated[float, Field(ge=0.0, le=10.0)] = Field(
        default=0.2, description="Seconds between the Controller's own status reads of an instance with fault evidence "
                    "and no complete snapshot; 0: off.")

    _check_coordinator = field_validator("coordinator_address")(check_host_ports)
    _check_security = model_validator(mode="after")(security_exclusive)
    _check_posture = model_validator(mode="after")(check_posture)

    @model_validator(mode="after")
    def _check_election(self) -> ControllerConfig:
        if self.leader_election.mode == "on" and not self.store.etcd_endpoints:
            raise ValueError("leader_election.mode='on' needs store.etcd_endpoints (the lease lives in etcd)")
        if self.coordinator_management_key is not None and self.coordinator_management_key_file is not None:
            raise ValueError("coordinator_management_key and coordinator_management_key_file exclude each other")
        replicas = self.leader_election.expected_replicas
        if replicas > 1 and not self.election_enabled:
            why = ("no store.etcd_endpoints" if self.leader_election.mode != "off"
                   else "leader_election.mode='off'")
            raise ValueError(f"leader_election.expected_replicas={replicas} with {why}: the replicas would all act "
                             "unfenced; configure etcd (they then elect one leader) or run one replica")
        return self

    @property
    def election_enabled(self) -> bool:
        """Whether this Controller campaigns for leadership (leader_election.mode, etcd present)."""
        return self.leader_election.mode != "off" and bool(self.store.etcd_endpoints)

    @model_validator(mode="after")
    def _check_heartbeat(self) -> ControllerConfig:
        if self.heartbeat_timeout_sec <= self.heartbeat_interval_sec:
            raise ValueError(
                f"heartbeat_timeout_sec={self.heartbeat_timeout_sec:g} must exceed "
                f"heartbeat_interval_sec={self.heartbeat_interval_sec:g}"
            )
        quiet = self.heartbeat_quiet_interval_sec
        if quiet and not self.heartbeat_interval_sec <= quiet <= self.heartbeat_timeout_sec / 2:
            raise ValueError(
                f"heartbeat_quiet_interval_sec={quiet:g} must lie between heartbeat_interval_sec="
                f"{self.heartbeat_interval_sec:g} and half of heartbeat_timeout_sec={self.heartbeat_timeout_sec:g} "
                "(a pod then misses two before it counts as lost), or be 0"
            )
        return self

    @property
    def quiet_interval_sec(self) -> float:
        """heartbeat_quiet_interval_sec as the NodeManagers are told it (0: a heartbeat every period)."""
        if self.heartbeat_quiet_interval_sec is not None:
            return self.heartbeat_quiet_interval_sec
        return max(self.heartbeat_interval_sec, self.heartbeat_timeout_sec / 3)
