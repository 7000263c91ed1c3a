"""Typed configuration of every Motor service: one place for settings.

Config files are YAML (JSON is a subset). Every model refuses unknown keys and wrong types, so a
service never starts half-configured; `load_config` turns validation errors into one `ConfigError`
line that names each offending key and value.

Key names and defaults of `fault_tolerance_config` are exactly those of RFC §7; the timers the RFC
names elsewhere (§4.4) sit beside them. `enable_dp_scale_down_proxy` is derived and refused as input.
"""

from __future__ import annotations

import ipaddress
import re
import socket
import string
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

PositiveSec = Annotated[float, Field(gt=0)]
Port = Annotated[int, Field(ge=0, le=65535)]
# A file path; YAML/JSON give strings, so this one field type is not strict.
FilePath = Annotated[Path, Field(strict=False)]
# Guard lease bound of the NodeManager contract (RFC §6): lease_sec ∈ (0, 3600].
MAX_GUARD_LEASE_SEC = 3600.0


# DevicePublicNamePre as the device plugin accepts it (customname.deviceNamePattern).
_CARD_NAME_PREFIX_RE = re.compile(r"^[a-zA-Z][a-zA-Z0-9-]{1,15}$")
# What a container sees instead of the host's card name: "0", "/dev/davinci0", "davinci0".
_CONTAINER_INDEX_RE = re.compile(r"^(/dev/)?(davinci)?[0-9]+$")


class ConfigError(ValueError):
    """A configuration value was refused; the message is one line naming key and value."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class TlsConfig(_Model):
    """Server-side TLS. Both files, or neither; mTLS adds a client CA and requires client certs."""

    cert_file: FilePath
    key_file: FilePath
    client_ca_file: FilePath | None = None
    require_client_auth: bool = False

    @model_validator(mode="after")
    def _check(self) -> TlsConfig:
        for key in ("cert_file", "key_file", "client_ca_file"):
            path = getattr(self, key)
            if path is not None and not path.is_file():
                raise ValueError(f"{key}={str(path)!r} is not a readable file")
        if self.require_client_auth and self.client_ca_file is None:
            raise ValueError("require_client_auth=true needs client_ca_file")
        return self


class ClientTlsConfig(_Model):
    """Client-side TLS for calls to other Motor services; cert+key present means mTLS."""

    ca_file: FilePath
    cert_file: FilePath | None = None
    key_file: FilePath | None = None
    server_name_override: str | None = None

    @model_validator(mode="after")
    def _check(self) -> ClientTlsConfig:
        for key in ("ca_file", "cert_file", "key_file"):
            path = getattr(self, key)
            if path is not None and not path.is_file():
                raise ValueError(f"{key}={str(path)!r} is not a readable file")
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("cert_file and key_file go together (mTLS client identity)")
        return self


class SecurityConfig(_Model):
    """The one switch for mTLS (see motor.common.security): this process's certificate and key, and
    the CA that signed every Motor certificate. Set, it turns on mTLS for every gRPC server and
    client of the process, role authorization on its gRPC servers, TLS on its HTTP pages and TLS
    with a client certificate towards etcd. The role is the certificate's SAN URI
    spiffe://motor/<role>."""

    ca_file: FilePath
    cert_file: FilePath
    key_file: FilePath
    # The Coordinator's OpenAI front also asks inference clients for a certificate of this CA.
    require_client_cert_on_inference: bool = False

    @model_validator(mode="after")
    def _check(self) -> SecurityConfig:
        for key in ("ca_file", "cert_file", "key_file"):
            path = getattr(self, key)
            if not path.is_file():
                raise ValueError(f"{key}={str(path)!r} is not a readable file")
        return self


def _security_exclusive(config: Any) -> Any:
    """A service's model validator: `security` derives server.tls and client_tls (where the service
    has one); both at once would be two truths."""
    if config.security is None:
        return config
    if config.server.tls is not None:
        raise ValueError("security and server.tls are exclusive: security sets the server's mTLS")
    if getattr(config, "client_tls", None) is not None:
        raise ValueError("security and client_tls are exclusive: security sets the client's mTLS")
    return config


def _host_ports(value: str | list[str] | None) -> str | list[str] | None:
    """A field validator: every address given (one, a list, or none) is host:port."""
    for item in [value] if isinstance(value, str) else value or []:
        parse_host_port(item)
    return value


# The gRPC default; every Motor request fits far below it (bounded lists and strings).
DEFAULT_MAX_RECEIVE_MESSAGE_BYTES = 4 * 1024 * 1024


def _check_host(value: str) -> str:
    if not value or value != value.strip():
        raise ValueError(f"host {value!r} is empty or has spaces")
    return value


class ServerConfig(_Model):
    """Where a gRPC server listens."""

    host: str = "127.0.0.1"
    port: Port = 0
    tls: TlsConfig | None = None
    shutdown_grace_sec: PositiveSec = 5.0
    # Larger requests are refused with RESOURCE_EXHAUSTED before any handler runs.
    max_receive_message_bytes: Annotated[int, Field(ge=64 * 1024, le=256 * 1024 * 1024)] = (
        DEFAULT_MAX_RECEIVE_MESSAGE_BYTES)
    # A second, plaintext listener on `host` that serves only grpc.health.v1.Health (the same
    # statuses): for Kubernetes gRPC probes, which speak no TLS, when the main port requires client
    # certificates. It tells SERVING / NOT_SERVING and nothing else. None: no such listener.
    health_port: Port | None = None

    _host = field_validator("host")(_check_host)


class HttpListenConfig(_Model):
    """Where an HTTP server listens."""

    host: str = "127.0.0.1"
    port: Port = 0

    _host = field_validator("host")(_check_host)


class DpScaleDownConfig(_Model):
    """RFC §7 `dp_scale_down_config`."""

    request_timeout_sec: PositiveSec = 5.0
    poll_interval_sec: PositiveSec = 1.0
    execution_deadline_sec: PositiveSec = 30.0


class FaultToleranceConfig(_Model):
    """RFC §7 `fault_tolerance_config`, plus the timers of RFC §4.4."""

    enable_fault_tolerance: bool = True
    enable_dp_scale_down: bool = False
    enable_dp_scale_up: bool = False
    dp_scale_down_config: DpScaleDownConfig = DpScaleDownConfig()
    hardware_ft_correlation_window_sec: PositiveSec = 5.0
    # RFC name kept as is (it carries no unit); seconds.
    strategy_center_check_interval: PositiveSec = 10.0
    # Motor derives its default from the engines' gloo timeout; the window opens at the first
    # UNHEALTHY/DEAD report of a round.
    software_status_collection_timeout_sec: PositiveSec = 60.0
    engine_status_poll_interval_sec: PositiveSec = 1.0
    # Beyond the RFC, opt-in: while a rank is DEAD and its survivors stay HEALTHY (an idle instance
    # runs no collective), the Controller asks the Coordinator for a one-token canary request to one
    # survivor; its collective fails, the survivors turn UNHEALTHY and the snapshot completes, so the
    # instance scales down instead of reconfiguring after the collection timeout. Off (default): the
    # RFC's idle row unchanged.
    idle_fault_probe: bool = False
    # Bound of one canary, the Coordinator's request to the engine included.
    idle_fault_probe_timeout_sec: Annotated[float, Field(gt=0, le=30.0)] = 2.0

    @model_validator(mode="before")
    @classmethod
    def _refuse_derived(cls, data: Any) -> Any:
        if isinstance(data, dict) and "enable_dp_scale_down_proxy" in data:
            raise ValueError(
                "enable_dp_scale_down_proxy="
                f"{data['enable_dp_scale_down_proxy']!r} cannot be set: it is derived from "
                "enable_fault_tolerance and enable_dp_scale_down"
            )
        return data

    @model_validator(mode="after")
    def _check_lease(self) -> FaultToleranceConfig:
        lease = self.guard_lease_sec
        if lease > MAX_GUARD_LEASE_SEC:
            c = self.dp_scale_down_config
            raise ValueError(
                f"guard lease {lease:g}s derived from dp_scale_down_config (execution_deadline_sec="
                f"{c.execution_deadline_sec:g}, request_timeout_sec={c.request_timeout_sec:g}, "
                f"poll_interval_sec={c.poll_interval_sec:g}) exceeds the NodeManager bound of "
                f"{MAX_GUARD_LEASE_SEC:g}s"
            )
        return self

    @property
    def enable_dp_scale_down_proxy(self) -> bool:
        return self.enable_fault_tolerance and self.enable_dp_scale_down

    @property
    def guard_lease_sec(self) -> float:
        """Two recovery windows plus request and poll slack (85 s with the RFC defaults)."""
        c = self.dp_scale_down_config
        return 2 * c.execution_deadline_sec + 4 * c.request_timeout_sec + max(5.0, c.poll_interval_sec)


class StoreConfig(_Model):
    """Runtime state store. No etcd endpoints means the in-memory store (state lost on restart)."""

    etcd_endpoints: list[str] = []
    key_prefix: str = "/motor/v1"
    request_timeout_sec: PositiveSec = 5.0
    # TLS towards etcd (cert+key: client certificate). Unset with `security` set: the security
    # block's CA, certificate and key.
    tls: ClientTlsConfig | None = None

    _check_endpoints = field_validator("etcd_endpoints")(_host_ports)

    @field_validator("key_prefix")
    @classmethod
    def _check_prefix(cls, value: str) -> str:
        if not value.startswith("/") or value.endswith("/") or len(value) < 2:
            raise ValueError(f"key_prefix {value!r} must start with '/' and not end with '/'")
        return value


class HardwareMonitorConfig(_Model):
    """ResourceMonitor sources of MindCluster hardware faults (the RPC source is always on)."""

    # Directory of mounted `mindx-dl-deviceinfo-<node>` ConfigMaps; none: not watched.
    configmap_dir: str | None = None
    poll_interval_sec: PositiveSec = 2.0
    # List+watch ConfigMaps and Nodes: "auto" when a kubeconfig or in-cluster config loads, "on"
    # refuses to start without one, "off" never.
    kubernetes: Literal["auto", "off", "on"] = "auto"
    # Card name prefixes of an operator's deviceNameCustomization.json (DevicePublicNamePre, written
    # as there, e.g. "custom910-"), known beside MindCluster's own (motor.controller.hardware.formats.card_names).
    card_name_prefixes: list[str] = []

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


class LeaderElectionConfig(_Model):
    """Controller replicas on one etcd: one leader by an etcd lease (motor.controller.election).

    "auto" elects whenever store.etcd_endpoints is set (so a rolling update's two overlapping
    replicas never both act), "on" refuses to start without etcd, "off" acts without electing
    (one replica only). The leader key is `{store.key_prefix}/leader`."""

    mode: Literal["auto", "on", "off"] = "auto"
    # etcd lease TTL (whole seconds, etcd's unit; etcd's own floor is about 2 s): a crashed
    # leader is replaced after at most this long, and a leader that cannot renew stops acting
    # before it ends.
    lease_ttl_sec: Annotated[int, Field(ge=2, le=300)] = 5
    # What other replicas and the NodeManagers are told to call (host:port); unset: server.host
    # and the bound port (the host's name when server.host is a wildcard).
    advertise_address: str | None = None
    # This replica's name in the leader key and on the status page; unset: hostname-pid.
    replica_id: str | None = None
    # A standby's read-only view of the persisted runtime is reloaded this often.
    standby_refresh_interval_sec: PositiveSec = 1.0

    _check_advertise = field_validator("advertise_address")(_host_ports)

    @field_validator("replica_id")
    @classmethod
    def _check_replica_id(cls, value: str | None) -> str | None:
        if value is not None and (not value.strip() or len(value) > 128):
            raise ValueError(f"replica_id {value!r} is blank or longer than 128 characters")
        return value


class ControllerConfig(_Model):
    """motor-controller."""

    server: ServerConfig = ServerConfig()
    status_http: HttpListenConfig = HttpListenConfig()
    store: StoreConfig = StoreConfig()
    fault_tolerance_config: FaultToleranceConfig = FaultToleranceConfig()
    hardware_monitor: HardwareMonitorConfig = HardwareMonitorConfig()
    leader_election: LeaderElectionConfig = LeaderElectionConfig()
    # host:port of the Coordinator's gRPC server; none means nothing is published.
    coordinator_address: str | None = None
    # Sent as gRPC metadata x-motor-key when the Coordinator requires a management key.
    coordinator_management_key: str | None = None
    client_tls: ClientTlsConfig | None = None
    security: SecurityConfig | None = None
    heartbeat_interval_sec: PositiveSec = 2.0
    # A pod silent this long is considered lost (partial-loss handling).
    heartbeat_timeout_sec: PositiveSec = 10.0
    # Period of the full-view SET that makes the Coordinator converge after a lost publication.
    publish_interval_sec: PositiveSec = 10.0
    # Bound of one whole-instance reconfiguration.
    reconfiguration_timeout_sec: PositiveSec = 300.0
    # A failed reconfiguration is tried again after strategy_center_check_interval, doubling up to
    # the cap, at most this many attempts in all; then the instance waits (RECONFIGURING, last_error
    # says so) until one of its pods registers again.
    reconfiguration_max_attempts: Annotated[int, Field(ge=1, le=1000)] = 5
    reconfiguration_max_backoff_sec: PositiveSec = 300.0
    # While an instance has fault evidence but no complete snapshot, the Controller reads every
    # active rank's status itself this often (not waiting for the NodeManagers' 1 Hz polls); 0: off.
    snapshot_pull_interval_sec: Annotated[float, Field(ge=0.0, le=10.0)] = 0.2

    _check_coordinator = field_validator("coordinator_address")(_host_ports)
    _check_security = model_validator(mode="after")(_security_exclusive)

    @model_validator(mode="after")
    def _check_election(self) -> ControllerConfig:
        if self.leader_election.mode == "on" and not self.store.etcd_endpoints:
            raise ValueError("leader_election.mode='on' needs store.etcd_endpoints (the lease lives in etcd)")
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
        return self


class MigrationConfig(_Model):
    """Re-inference (the RFC's TokenReinference slot): a request whose engine faulted while serving it
    (a 5xx answer, an error event or a broken stream, the endpoint withdrawn from the serving view)
    is sent again to a serving endpoint of the same model; a stream continues from what the client
    already received (prompt + generated text or token ids as the new prompt, the remaining
    max_tokens; chat: the partial assistant message continued), so the client sees one stream."""

    enabled: bool = True
    # Times one request may continue elsewhere after its engine faulted (then it fails as before).
    max_migrations_per_request: Annotated[int, Field(ge=1, le=16)] = 3
    # Longest sequence carried as the new prompt: token ids when ids are carried, else characters
    # (prompt + generated text). A longer stream is still served; it just cannot be migrated.
    max_carried_length: Annotated[int, Field(ge=1, le=64 * 1024 * 1024)] = 1024 * 1024
    # Completions streams ask the engine for token ids (vLLM's return_token_ids; removed again from
    # what the client sees unless it asked) so the continuation carries ids, not re-tokenized text.
    carry_token_ids: bool = True
    # A started stream whose endpoint was withdrawn from the serving view moves once it has delivered
    # nothing for this long (a wedged engine); the streams of a drained endpoint that still deliver
    # finish where they are.
    withdrawn_stall_sec: Annotated[float, Field(gt=0, le=600)] = 2.0


class CoordinatorConfig(_Model):
    """motor-coordinator."""

    server: ServerConfig = ServerConfig()
    http: HttpListenConfig = HttpListenConfig()
    # Shared key required on management calls (gRPC metadata "x-motor-key"); none means open.
    # Without TLS it is the only guard of Refresh; with `security` the caller's role is checked too.
    management_key: str | None = None
    security: SecurityConfig | None = None
    # Controller replicas (host:port): at start the Coordinator asks their leader (followed through
    # the list) for its whole serving view (a SET) before anything is routed; none: it waits for
    # the Controller's periodic SET.
    controller_addresses: list[str] = []
    # How long start-up waits for that first view before the Coordinator reports ready anyway (it
    # goes on asking in the background; requests meanwhile wait, hold_when_unavailable_sec).
    controller_sync_timeout_sec: Annotated[float, Field(gt=0, le=3600)] = 10.0
    # Bound of one proxied inference request to an engine, first byte included.
    upstream_timeout_sec: PositiveSec = 600.0
    upstream_connect_timeout_sec: PositiveSec = 2.0
    # Other endpoints tried when one fails before its first byte.
    max_retries: Annotated[int, Field(ge=0, le=16)] = 2
    retry_after_sec: Annotated[int, Field(ge=1, le=3600)] = 1
    # An endpoint that failed a request before its first byte gets no new request for this long
    # (0: never skipped).
    endpoint_cooldown_sec: Annotated[float, Field(ge=0, le=3600)] = 2.0
    # How long a request that nothing can take right now (a scale-down drain, every endpoint
    # failing) waits for a servable endpoint before its 503; 0 answers 503 at once.
    hold_when_unavailable_sec: Annotated[float, Field(ge=0, le=3600)] = 30.0
    # Re-inference of requests whose engine faulted mid-flight (a migrated request is held again,
    # from its fault, while nothing can serve).
    migration: MigrationConfig = MigrationConfig()

    @field_validator("management_key")
    @classmethod
    def _check_management_key(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("management_key is blank; omit it to leave management open")
        return value

    _check_controllers = field_validator("controller_addresses")(_host_ports)
    _check_security = model_validator(mode="after")(_security_exclusive)

    @model_validator(mode="after")
    def _check_upstream_timeouts(self) -> CoordinatorConfig:
        if self.upstream_connect_timeout_sec > self.upstream_timeout_sec:
            raise ValueError(
                f"upstream_connect_timeout_sec={self.upstream_connect_timeout_sec:g} exceeds "
                f"upstream_timeout_sec={self.upstream_timeout_sec:g}"
            )
        return self


class DeviceInfoConfig(_Model):
    # The host's card name as the device plugin publishes it (the pod's huawei.com/AscendReal
    # annotation, e.g. "Ascend910-3" or "npu-3"); never a container-local index such as "0".
    device_id: str
    device_ip: str = ""
    device_type: str = ""

    @field_validator("device_id")
    @classmethod
    def _check_device_id(cls, value: str) -> str:
        if not value.strip() or value != value.strip() or "," in value:
            raise ValueError(f"device_id {value!r} is not one card name")
        if _CONTAINER_INDEX_RE.match(value):
            raise ValueError(f"device_id {value!r} is a container-local index; give the host's card name from the "
                             "pod's huawei.com/AscendReal annotation (e.g. 'Ascend910-3')")
        return value


class EngineSpec(_Model):
    """One local engine: one original global DP rank."""

    dp_rank: Annotated[int, Field(ge=0)]
    # 0 picks a free port at launch.
    port: Port = 0
    headless: bool = False
    device_infos: list[DeviceInfoConfig] = []


class FtCapabilityConfig(_Model):
    """What the local engines support; reported at registration (RFC §6)."""

    engine_ft_enabled: bool = True
    scale_down_supported: bool = True
    external_lb: bool = True
    auto_recovery: bool = False
    enable_eplb: bool = True
    num_redundant_experts: Annotated[int, Field(ge=0)] = 0


class NodeManagerFaultInjection(_Model):
    """Test-only faults of the NodeManager itself (all off by default; never set in production)."""

    # Hold every guard's answer this long after granting it: a round stays in DECIDING long enough
    # to interrupt it there (keep it below the Controller's request_timeout_sec, or the guard fails).
    guard_delay_sec: Annotated[float, Field(ge=0.0, le=120.0)] = 0.0
    # Hold every apply this long before forwarding it to the engines: one pod's survivors then
    # check in late, past the engines' check-in window.
    apply_delay_sec: Annotated[float, Field(ge=0.0, le=120.0)] = 0.0
    # Hold every finalize(commit) this long before committing: the NodeManager-commit /
    # Controller-commit window of RFC §5 stays open long enough to interrupt it.
    finalize_delay_sec: Annotated[float, Field(ge=0.0, le=120.0)] = 0.0


class NodeManagerConfig(_Model):
    """motor-nodemanager: one per pod."""

    server: ServerConfig = ServerConfig()
    pod_ip: str = "127.0.0.1"
    node_name: str = Field(default_factory=socket.gethostname)
    controller_address: str
    # Further Controller replicas (host:port), tried after controller_address; the NodeManager
    # follows the leader among them (a standby names it) and registers again with a new leader.
    controller_addresses: list[str] = []
    client_tls: ClientTlsConfig | None = None
    security: SecurityConfig | None = None
    instance_id: Annotated[int, Field(ge=0)]
    # GET /metrics (Prometheus) on a listener of its own; port 0 picks a free one (metrics_port in
    # the ready file).
    metrics_http: HttpListenConfig = HttpListenConfig()
    role: Literal["prefill", "decode", "union"] = "union"
    model: str = "motor-sim"
    dp_size: Annotated[int, Field(ge=1, le=4096)]
    engines: list[EngineSpec]
    # The pod's annotations as a downwardAPI volume writes them (fieldPath: metadata.annotations):
    # at registration every engines[].device_infos[].device_id must be a card the device plugin gave
    # the pod (huawei.com/AscendReal, else huawei.com/<resource>). None: not checked (no device plugin).
    pod_annotations_file: str | None = None
    # argv of one engine; {placeholders} are filled per rank (see nodemanager's launcher).
    engine_command: list[str] | None = None
    engine_ft_api_prefix: str = "/v1/fault_tolerance"
    dp_master_ip: str = "127.0.0.1"
    dp_master_port: Port = 29500
    # Every round forms a new store on port base + new master rank, so an old store still bound on
    # the same host never collides with the new one.
    dp_store_port_base: Annotated[int, Field(ge=1024, le=65535)] = 29600
    ft_capability: FtCapabilityConfig = FtCapabilityConfig()
    fault_tolerance_config: FaultToleranceConfig = FaultToleranceConfig()
    engine_request_timeout_sec: PositiveSec = 5.0
    engine_ready_timeout_sec: PositiveSec = 300.0
    engine_stop_grace_sec: PositiveSec = 10.0
    heartbeat_interval_sec: PositiveSec = 2.0
    # Appended to every engine's argv; the same {placeholders} as engine_command are filled in.
    engine_extra_args: list[str] = []
    # Directory of the engines' log files (rank<r>.log, appended); none: a fresh temporary directory.
    log_dir: str | None = None
    # When every non-retired local engine has died, the NodeManager exits (status 3) so the
    # orchestrator recreates the pod. Frozen while a scale-down guard is live.
    exit_when_all_engines_dead: bool = False
    # Deadline of one Register / Heartbeat / ReportSoftwareFault call to the Controller.
    controller_request_timeout_sec: PositiveSec = 5.0
    # Upper bound of the backoff between Register attempts (registration is retried forever).
    controller_retry_max_backoff_sec: PositiveSec = 5.0
    # Fault reports waiting for delivery; when full the oldest waiting report is dropped (logged).
    fault_report_queue_size: Annotated[int, Field(ge=1, le=65536)] = 1024
    # Delivery attempts of one fault report (each with the controller deadline) before it is dropped.
    fault_report_attempts: Annotated[int, Field(ge=1, le=10)] = 3
    # A report made before the Controller knows the instance (registration or assembly still under
    # way: NOT_FOUND) is held and sent again for up to this long, then dropped (logged).
    fault_report_hold_sec: PositiveSec = 60.0
    fault_injection: NodeManagerFaultInjection = NodeManagerFaultInjection()

    @field_validator("pod_ip", "dp_master_ip")
    @classmethod
    def _check_ip(cls, value: str) -> str:
        try:
            ipaddress.ip_address(value)
        except ValueError:
            raise ValueError(f"{value!r} is not an IP address") from None
        return value

    _check_controllers = field_validator("controller_address", "controller_addresses")(_host_ports)

    @property
    def controller_targets(self) -> list[str]:
        """Every Controller replica to try, controller_address first, without repeats."""
        return list(dict.fromkeys([self.controller_address, *self.controller_addresses]))

    @field_validator("engine_ft_api_prefix")
    @classmethod
    def _check_prefix(cls, value: str) -> str:
        if not value.startswith("/") or value.endswith("/"):
            raise ValueError(f"engine_ft_api_prefix {value!r} must start with '/' and not end with '/'")
        return value

    @field_validator("log_dir")
    @classmethod
    def _check_log_dir(cls, value: str | None) -> str | None:
        if value is not None and (not value.strip() or "\0" in value):
            raise ValueError(f"log_dir {value!r} is blank")
        return value

    @field_validator("engine_command", "engine_extra_args")
    @classmethod
    def _check_command(cls, value: list[str] | None, info: ValidationInfo) -> list[str] | None:
        if value is None:
            return value
        if info.field_name == "engine_command" and not value:
            raise ValueError("engine_command=[] : give the engine's argv, or leave it unset for motor-engine-sim")
        for item in value:
            unknown = _template_fields(item) - ENGINE_COMMAND_PLACEHOLDERS
            if unknown:
                raise ValueError(
                    f"{info.field_name} item {item!r} uses unknown placeholders {sorted(unknown)}; known: "
                    + ", ".join("{" + name + "}" for name in sorted(ENGINE_COMMAND_PLACEHOLDERS))
                )
        return value

    _check_security = model_validator(mode="after")(_security_exclusive)

    @model_validator(mode="after")
    def _check_topology(self) -> NodeManagerConfig:
        if not self.engines:
            raise ValueError("engines=[] : a pod hosts at least one engine")
        ranks = [e.dp_rank for e in self.engines]
        if len(set(ranks)) != len(ranks):
            raise ValueError(f"engines dp_rank values {ranks} repeat a rank")
        out_of_range = [r for r in ranks if r >= self.dp_size]
        if out_of_range:
            raise ValueError(f"engines dp_rank {out_of_range} not below dp_size={self.dp_size}")
        top = self.dp_store_port_base + self.dp_size - 1
        if top > 65535:
            raise ValueError(
                f"dp_store_port_base={self.dp_store_port_base} + dp_size-1 = {top} exceeds port 65535"
            )
        if self.dp_master_port == 0 and len(ranks) != self.dp_size:
            raise ValueError(
                f"dp_master_port=0 (pick a free port at launch) needs every rank on this pod, but it hosts "
                f"{sorted(ranks)} of dp_size={self.dp_size}"
            )
        return self


# Placeholders NodeManagerConfig.engine_command / engine_extra_args may use (str.format fields).
ENGINE_COMMAND_PLACEHOLDERS = frozenset(
    {"dp_rank", "dp_size", "host", "port", "dp_master_ip", "dp_master_port", "ft_api_prefix", "model",
     "num_redundant_experts"}
)


def _template_fields(item: str) -> set[str]:
    try:
        return {name for _, name, _, _ in string.Formatter().parse(item) if name is not None}
    except ValueError as exc:
        raise ValueError(f"{item!r} is not a valid template ({exc}); write literal braces as {{{{ }}}}") from None


def parse_host_port(value: str) -> tuple[str, int]:
    """'host:port' or '[v6]:port' → (host, port); refuses anything else with the value named."""
    host, sep, port_text = value.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not sep or not host or not port_text.isdigit() or not 0 < int(port_text) <= 65535:
        raise ValueError(f"address {value!r} is not host:port")
    return host, int(port_text)


M = TypeVar("M", bound=BaseModel)


def _format_errors(exc: ValidationError, section: str | None) -> str:
    parts = []
    for err in exc.errors(include_url=False):
        loc = ".".join(str(p) for p in err["loc"])
        if section:
            loc = f"{section}.{loc}" if loc else section
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown key"
        value = err.get("input")
        shown = "" if err["type"] in ("missing",) or isinstance(value, dict) else f"={value!r}"
        parts.append(f"{loc or '<root>'}{shown}: {msg}")
    return "invalid configuration: " + "; ".join(parts)


def set_dotted(data: dict[str, Any], dotted_key: str, value: Any) -> None:
    """Sets data['a']['b'] for 'a.b', creating dicts on the way."""
    keys = dotted_key.split(".")
    if not all(keys):
        raise ConfigError(f"invalid configuration: override key {dotted_key!r} is malformed")
    node = data
    for key in keys[:-1]:
        child = node.setdefault(key, {})
        if not isinstance(child, dict):
            raise ConfigError(f"invalid configuration: {dotted_key}: {key!r} is not a section")
        node = child
    node[keys[-1]] = value


def parse_override(item: str) -> tuple[str, Any]:
    """'a.b=VALUE' → ('a.b', VALUE parsed as a YAML scalar/flow value)."""
    key, sep, text = item.partition("=")
    if not sep or not key:
        raise ConfigError(f"invalid configuration: override {item!r} is not KEY=VALUE")
    try:
        return key.strip(), yaml.safe_load(text) if text else ""
    except yaml.YAMLError as exc:
        raise ConfigError(f"invalid configuration: override {item!r}: {exc}".replace("\n", " ")) from None


def read_config_file(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"invalid configuration: cannot read --config {str(path)!r}: {exc.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"invalid configuration: {str(path)!r} is not YAML/JSON: {exc}".replace("\n", " ")) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"invalid configuration: {str(path)!r} must hold a mapping, got {type(data).__name__}")
    return data


def build_config(model: type[M], data: dict[str, Any], section: str | None = None) -> M:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_format_errors(exc, section)) from None


def load_config(
    model: type[M],
    path: Path | None = None,
    overrides: list[tuple[str, Any]] | None = None,
) -> M:
    """File (optional) + dotted overrides → a validated, frozen config, or ConfigError."""
    data = read_config_file(path) if path is not None else {}
    for key, value in overrides or []:
        set_dotted(data, key, value)
    return build_config(model, data)
