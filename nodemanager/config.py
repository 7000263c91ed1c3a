"""motor-nodemanager's configuration: the pod, its engines and their DP group, the Controller it
registers with, and the bounds of engine calls and fault reports."""

from __future__ import annotations

import ipaddress
import re
import socket
import string
from typing import Annotated, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from motor.common.config.addresses import check_host_ports
from motor.common.config.base import ConfigModel, PositiveSec, Port
from motor.common.config.fault_tolerance import FaultToleranceConfig
from motor.common.config.listeners import HttpListenConfig, ServerConfig
from motor.common.config.posture import PostureConfig, check_posture
from motor.common.config.tls import ClientTlsConfig, SecurityConfig, security_exclusive

# What a container sees instead of the host's card name: "0", "/dev/davinci0", "davinci0".
_CONTAINER_INDEX_RE = re.compile(r"^(/dev/)?(davinci)?[0-9]+$")

# Placeholders NodeManagerConfig.engine_command / engine_extra_args may use (str.format fields).
ENGINE_COMMAND_PLACEHOLDERS = frozenset(
    {"dp_rank", "dp_size", "host", "port", "dp_master_ip", "dp_master_port", "ft_api_prefix", "model",
     "num_redundant_experts"}
)


class DeviceInfoConfig(ConfigModel):
    """One NPU an engine uses, reported at registration."""

    device_id: str = Field(
        description="The host's card name as the device plugin publishes it (pod annotation huawei.com/AscendReal, "
                    "e.g. 'Ascend910-3'); never a container-local index such as '0'.")
    device_ip: str = Field(default="", description="The card's IP address, reported as is.")
    device_type: str = Field(default="", description="The card's type, reported as is.")

    @field_validator("device_id")
    @classmethod
    def _check_device_id(cls, value: str) -> str:
        if not value.strip() or value != value.strip() or "," in value:
            raise ValueError(f"device_id {value!r} is not one card name")
        if _CONTAINER_INDEX_RE.match(value):
            raise ValueError(f"device_id {value!r} is a container-local index; give the host's card name from the "
                             "pod's huawei.com/AscendReal annotation (e.g. 'Ascend910-3')")
        return value


class EngineSpec(ConfigModel):
    """One local engine: one original global DP rank."""

    dp_rank: Annotated[int, Field(ge=0)] = Field(description="The engine's original global DP rank.")
    port: Port = Field(default=0, description="The engine's HTTP port; 0 picks a free one at launch.")
    headless: bool = Field(
        default=False,
        description="The rank has no API of its own (DP group only): guard/finalize, never status/apply.")
    device_infos: list[DeviceInfoConfig] = Field(default=[], description="The NPUs this engine uses.")


class FtCapabilityConfig(ConfigModel):
    """What the local engines support; reported at registration (RFC §6). Scale-down needs every
    pod of an instance to agree, engine FT, scale-down support, external LB, EPLB, redundant experts
    and no engine-side auto recovery."""

    engine_ft_enabled: bool = Field(
        default=True, description="Engines run their fault-tolerance framework (vLLM --enable-fault-tolerance).")
    scale_down_supported: bool = Field(default=True, description="Engines accept the scale_down instruction.")
    retry_supported: bool = Field(
        default=True, description="Engines accept the retry instruction (fast recovery needs every pod to say so).")
    supports_scale_up: bool = Field(
        default=False, description="Engines accept the scale_up instruction (re-admit removed ranks; "
                                   "docs/engine-protocol-scale-up.md).")
    external_lb: bool = Field(
        default=True, description="Engines run external load balancing (one API server per rank).")
    auto_recovery: bool = Field(
        default=False, description="Engine-side automatic recovery is on (conflicts with Motor driving recovery).")
    enable_eplb: bool = Field(default=True, description="Expert-parallel load balancing (EPLB) is on.")
    num_redundant_experts: Annotated[int, Field(ge=0)] = Field(
        default=0, description="Redundant physical expert slots per engine; scale-down needs more than 0.")


class NodeManagerFaultInjection(ConfigModel):
    """Test-only faults of the NodeManager itself (all off by default; never set in production). A
    delay is refused unless `enabled` says fault injection is wanted, so a stray key in a production
    config cannot hold the pod's answers."""

    enabled: bool = Field(default=False, description="Allow the delays below (test clusters only).")

    # Keep it below the Controller's request_timeout_sec, or the guard fails.
    guard_delay_sec: Annotated[float, Field(ge=0.0, le=120.0)] = Field(
        default=0.0, description="Seconds every guard answer is held after granting it (a round stays in DECIDING).")
    apply_delay_sec: Annotated[float, Field(ge=0.0, le=120.0)] = Field(
        default=0.0, description="Seconds every apply is held before it reaches the engines (survivors check in late).")
    finalize_delay_sec: Annotated[float, Field(ge=0.0, le=120.0)] = Field(
        default=0.0, description="Seconds every finalize(commit) is held (the RFC §5 commit window stays open).")

    @model_validator(mode="after")
    def _check_enabled(self) -> NodeManagerFaultInjection:
        set_delays = [name for name in ("guard_delay_sec", "apply_delay_sec", "finalize_delay_sec")
                      if getattr(self, name)]
        if set_delays and not self.enabled:
            raise ValueError(f"fault_injection {', '.join(set_delays)} set without fault_injection.enabled=true; "
                             "delays are for test clusters only")
        return self


class NodeManagerConfig(PostureConfig):
    """The NodeManager's settings, one per pod. Across keys: engines hold distinct dp_rank values below
    dp_size, dp_store_port_base + dp_size - 1 is a port, dp_master_port 0 needs every rank on this
    pod, and `security` excludes server.tls and client_tls."""

    server: ServerConfig = Field(default=ServerConfig(), description="The gRPC server the Controller calls.")
    pod_ip: str = Field(
        default="127.0.0.1", description="This pod's IP address (engines' endpoints are reported on it).")
    advertise_host: str | None = Field(
        default=None, max_length=253,
        description="Host the Controller dials this NodeManager at (registered in node_manager_address); unset: "
                    "server.host, or pod_ip when that is a wildcard. With per-pod certificates that carry no IP "
                    "SAN: the pod's DNS name, which its certificate covers.")
    node_name: str = Field(
        default_factory=socket.gethostname,
        description="The Kubernetes node hosting the pod (hardware faults are matched on it); default: the host name.")
    controller_address: str = Field(description="host:port of the Controller (the first replica tried).")
    # The NodeManager follows the leader among them (a standby names it) and registers again with a
    # new leader.
    controller_addresses: list[str] = Field(
        default=[], description="Further Controller replicas (host:port), tried after controller_address.")
    client_tls: ClientTlsConfig | None = Field(
        default=None, description="TLS of calls to the Controller; unset: plaintext.")
    security: SecurityConfig | None = Field(
        default=None, description="mTLS everywhere with role checks; excludes server.tls and client_tls.")
    instance_id: Annotated[int, Field(ge=0)] = Field(description="The inference instance this pod belongs to.")
    metrics_http: HttpListenConfig = Field(
        default=HttpListenConfig(),
        description="GET /metrics (Prometheus) on a listener of its own; port 0: a free one (ready file).")
    role: Literal["prefill", "decode", "union"] = Field(default="union", description="The instance's serving role.")
    model: str = Field(default="motor-sim", description="Model name the engines serve (the Coordinator routes by it).")
    dp_size: Annotated[int, Field(ge=1, le=4096)] = Field(
        description="DP size of the whole instance, every pod's ranks.")
    engines: list[EngineSpec] = Field(description="The engines of this pod, one per local DP rank (at least one).")
    # A downwardAPI volume (fieldPath: metadata.annotations) writes the file.
    pod_annotations_file: str | None = Field(
        default=None,
        description="The pod's annotations file: every device_id must be a card the device plugin gave the pod; "
                    "unset: not checked.")
    engine_command: list[str] | None = Field(
        default=None,
        description="argv of one engine, with " + ", ".join("{" + n + "}" for n in sorted(ENGINE_COMMAND_PLACEHOLDERS))
                    + " filled per rank; unset: the reference engine.")
    engine_ft_api_prefix: str = Field(
        default="/v1/fault_tolerance", description="Path prefix of the engines' FT API ('/…', no trailing '/').")
    engine_ft_dialect: Literal["vllm", "vllm-0.33", "rfc", "sglang"] = Field(
        default="vllm", description="The engines' FT dialect (docs/engine-dialects.md): vLLM's PR, vLLM 0.33.0, the "
                                    "RFC's vLLM-Ascend one (per-rank FT endpoints) or SGLang's instance FT manager.")
    engine_ft_manager_address: str | None = Field(
        default=None, description="host:port of the instance's FT manager (engine_ft_dialect sglang: one for every "
                                  "rank of the instance); unset for per-rank dialects.")
    # SGLang's server chooses the DP rank itself unless the request pins one; the Coordinator pins
    # the rank it chose among the published ones, so a removed rank is never served.
    engine_inference_address: str | None = Field(
        default=None, description="host:port of the instance's one inference endpoint (engine_ft_dialect sglang "
                                  "only): the Coordinator sends this pod's ranks' requests there with routed_dp_rank "
                                  "= the rank; unset: to each rank's own port.")
    dp_master_ip: str = Field(default="127.0.0.1", description="IP address of the DP group's master (rank 0's host).")
    dp_master_port: Port = Field(
        default=29500, description="Port of the DP group's master; 0 picks a free one (every rank on this pod).")
    # A new store per round never collides with an old store still bound on the same host.
    dp_store_port_base: Annotated[int, Field(ge=1024, le=65535)] = Field(
        default=29600, description="Each round's DP store listens on this port + the number of ranks removed so far.")
    ft_capability: FtCapabilityConfig = Field(
        default=FtCapabilityConfig(), description="What the local engines support, reported at registration.")
    fault_tolerance_config: FaultToleranceConfig = Field(
        default=FaultToleranceConfig(),
        description="RFC §7 switches and timers; here: the scale-down proxy and the engines' status polls.")
    engine_request_timeout_sec: PositiveSec = Field(
        default=5.0, description="Deadline of one call to an engine's FT API, in seconds.")
    engine_ready_timeout_sec: PositiveSec = Field(
        default=300.0, description="Seconds a launched engine has to answer /health with 200 before it is stopped.")
    engine_stop_grace_sec: PositiveSec = Field(
        default=10.0, description="Seconds between SIGTERM and SIGKILL when an engine is stopped.")
    heartbeat_interval_sec: PositiveSec = Field(
        default=2.0, description="Seconds between heartbeats until the Controller names its own at registration.")
    engine_extra_args: list[str] = Field(
        default=[], description="Appended to every engine's argv, with the same {placeholders} filled in.")
    log_dir: str | None = Field(
        default=None,
        description="Directory of the engines' logs (rank<r>.log, appended); unset: a fresh temporary one.")
    # A recreated pod (MindCluster replaced the node) must not start ranks the Controller retired:
    # they would join a DP group that no longer has them.
    replacement_pod: bool = Field(
        default=False,
        description="The pod replaces one whose ranks were retired (capacity restoration): launch no engine and "
                    "register every local rank retired until the Controller starts them.")
    # Frozen while a scale-down guard is live.
    exit_when_all_engines_dead: bool = Field(
        default=False,
        description="Exit (status 3) when every non-retired local engine died, so the orchestrator recreates the pod.")
    controller_request_timeout_sec: PositiveSec = Field(
        default=5.0, description="Deadline of one Register / Heartbeat / ReportSoftwareFault call, and of one "
                                 "heartbeat's answer on the HeartbeatStream, in seconds.")
    # Registration is retried forever.
    controller_retry_max_backoff_sec: PositiveSec = Field(
        default=5.0, description="Cap of the backoff between Register attempts, and between the attempts of a "
                                 "fault report still owed after its quick ones, in seconds.")
    fault_report_queue_size: Annotated[int, Field(ge=1, le=65536)] = Field(
        default=1024, description="Fault reports waiting for delivery; when full, the oldest is dropped (logged).")
    fault_report_attempts: Annotated[int, Field(ge=1, le=10)] = Field(
        default=3, description="Quick delivery attempts of one fault report; after them it stays owed and is "
                               "tried again with backoff until the Controller answers.")
    # Registration or assembly still under way: the Controller answers NOT_FOUND.
    fault_report_hold_sec: PositiveSec = Field(
        default=60.0,
        description="Seconds a report the Controller cannot place yet is held and re-sent without spending an "
                    "attempt.")
    fault_injection: NodeManagerFaultInjection = Field(
        default=NodeManagerFaultInjection(), description="Test-only delays of the NodeManager's own answers.")

    @field_validator("pod_ip", "dp_master_ip")
    @classmethod
    def _check_ip(cls, value: str) -> str:
        try:
            ipaddress.ip_address(value)
        except ValueError:
            raise ValueError(f"{value!r} is not an IP address") from None
        return value

    _check_controllers = field_validator("controller_address", "controller_addresses",
                                         "engine_ft_manager_address", "engine_inference_address")(check_host_ports)

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

    _check_security = model_validator(mode="after")(security_exclusive)
    _check_posture = model_validator(mode="after")(check_posture)

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
        if self.engine_ft_dialect == "sglang" and not self.engine_ft_manager_address:
            raise ValueError("engine_ft_dialect=sglang needs engine_ft_manager_address (host:port of the instance's "
                             "FT manager)")
        if self.engine_inference_address and self.engine_ft_dialect != "sglang":
            raise ValueError(f"engine_inference_address={self.engine_inference_address!r} needs engine_ft_dialect="
                             f"sglang (an instance served through one endpoint); engine_ft_dialect="
                             f"{self.engine_ft_dialect} engines serve inference on their own ports")
        if self.dp_master_port == 0 and len(ranks) != self.dp_size:
            raise ValueError(
                f"dp_master_port=0 (pick a free port at launch) needs every rank on this pod, but it hosts "
                f"{sorted(ranks)} of dp_size={self.dp_size}"
            )
        return self


def _template_fields(item: str) -> set[str]:
    try:
        return {name for _, name, _, _ in string.Formatter().parse(item) if name is not None}
    except ValueError as exc:
        raise ValueError(f"{item!r} is not a valid template ({exc}); write literal braces as {{{{ }}}}") from None
