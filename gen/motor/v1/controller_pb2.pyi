from gen.motor.v1 import common_pb2 as _common_pb2
from gen.motor.v1 import node_manager_pb2 as _node_manager_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class FtPhase(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FT_PHASE_UNSPECIFIED: _ClassVar[FtPhase]
    FT_PHASE_DISABLED: _ClassVar[FtPhase]
    FT_PHASE_NORMAL: _ClassVar[FtPhase]
    FT_PHASE_DECIDING: _ClassVar[FtPhase]
    FT_PHASE_WAITING_ENGINE_FAULT: _ClassVar[FtPhase]
    FT_PHASE_SCALING_DOWN: _ClassVar[FtPhase]
    FT_PHASE_POST_SCALE_CLEANUP: _ClassVar[FtPhase]
    FT_PHASE_SCALED_DOWN_RUNNING: _ClassVar[FtPhase]
    FT_PHASE_RECONFIGURING: _ClassVar[FtPhase]
    FT_PHASE_FAST_RECOVERING: _ClassVar[FtPhase]
    FT_PHASE_SCALING_UP: _ClassVar[FtPhase]

class GateReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    GATE_REASON_UNSPECIFIED: _ClassVar[GateReason]
    GATE_REASON_FEATURE_DISABLED: _ClassVar[GateReason]
    GATE_REASON_ENGINE_FT_REQUIRED: _ClassVar[GateReason]
    GATE_REASON_EXTERNAL_LB_REQUIRED: _ClassVar[GateReason]
    GATE_REASON_AUTO_RECOVERY_CONFLICT: _ClassVar[GateReason]
    GATE_REASON_ENGINE_SCALE_DOWN_UNSUPPORTED: _ClassVar[GateReason]
    GATE_REASON_EPLB_REQUIRED: _ClassVar[GateReason]
    GATE_REASON_EXPERT_REDUNDANCY_REQUIRED: _ClassVar[GateReason]

class SoftwareFaultKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SOFTWARE_FAULT_KIND_UNSPECIFIED: _ClassVar[SoftwareFaultKind]
    SOFTWARE_FAULT_KIND_UNHEALTHY: _ClassVar[SoftwareFaultKind]
    SOFTWARE_FAULT_KIND_DEAD: _ClassVar[SoftwareFaultKind]
    SOFTWARE_FAULT_KIND_ENGINE_DEAD: _ClassVar[SoftwareFaultKind]
    SOFTWARE_FAULT_KIND_PROTOCOL_ERROR: _ClassVar[SoftwareFaultKind]
    SOFTWARE_FAULT_KIND_RECOVERED: _ClassVar[SoftwareFaultKind]

class FaultLevel(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FAULT_LEVEL_UNSPECIFIED: _ClassVar[FaultLevel]
    FAULT_LEVEL_L1: _ClassVar[FaultLevel]
    FAULT_LEVEL_L2: _ClassVar[FaultLevel]
    FAULT_LEVEL_L3: _ClassVar[FaultLevel]
    FAULT_LEVEL_L4: _ClassVar[FaultLevel]
    FAULT_LEVEL_L5: _ClassVar[FaultLevel]
    FAULT_LEVEL_L6: _ClassVar[FaultLevel]

class FallbackCause(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FALLBACK_CAUSE_UNSPECIFIED: _ClassVar[FallbackCause]
    FALLBACK_CAUSE_PROTOCOL_ERROR: _ClassVar[FallbackCause]
    FALLBACK_CAUSE_SCALE_DOWN_DISABLED: _ClassVar[FallbackCause]
    FALLBACK_CAUSE_ALL_RANKS_DEAD: _ClassVar[FallbackCause]
    FALLBACK_CAUSE_ALL_UNHEALTHY_TIMEOUT: _ClassVar[FallbackCause]
    FALLBACK_CAUSE_INCOMPLETE_SNAPSHOT: _ClassVar[FallbackCause]
    FALLBACK_CAUSE_HARDWARE_NOT_CORRELATED: _ClassVar[FallbackCause]
    FALLBACK_CAUSE_HARDWARE_UNMAPPABLE: _ClassVar[FallbackCause]
    FALLBACK_CAUSE_PARTIAL_LOSS: _ClassVar[FallbackCause]
    FALLBACK_CAUSE_STRATEGY_FAILED: _ClassVar[FallbackCause]
    FALLBACK_CAUSE_INTERRUPTED_ROUND: _ClassVar[FallbackCause]
    FALLBACK_CAUSE_RETRY: _ClassVar[FallbackCause]

class TimelineEventKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TIMELINE_EVENT_KIND_UNSPECIFIED: _ClassVar[TimelineEventKind]
    TIMELINE_EVENT_KIND_EVIDENCE: _ClassVar[TimelineEventKind]
    TIMELINE_EVENT_KIND_DECISION: _ClassVar[TimelineEventKind]
    TIMELINE_EVENT_KIND_PHASE: _ClassVar[TimelineEventKind]
    TIMELINE_EVENT_KIND_CALL: _ClassVar[TimelineEventKind]
    TIMELINE_EVENT_KIND_NOTE: _ClassVar[TimelineEventKind]
FT_PHASE_UNSPECIFIED: FtPhase
FT_PHASE_DISABLED: FtPhase
FT_PHASE_NORMAL: FtPhase
FT_PHASE_DECIDING: FtPhase
FT_PHASE_WAITING_ENGINE_FAULT: FtPhase
FT_PHASE_SCALING_DOWN: FtPhase
FT_PHASE_POST_SCALE_CLEANUP: FtPhase
FT_PHASE_SCALED_DOWN_RUNNING: FtPhase
FT_PHASE_RECONFIGURING: FtPhase
FT_PHASE_FAST_RECOVERING: FtPhase
FT_PHASE_SCALING_UP: FtPhase
GATE_REASON_UNSPECIFIED: GateReason
GATE_REASON_FEATURE_DISABLED: GateReason
GATE_REASON_ENGINE_FT_REQUIRED: GateReason
GATE_REASON_EXTERNAL_LB_REQUIRED: GateReason
GATE_REASON_AUTO_RECOVERY_CONFLICT: GateReason
GATE_REASON_ENGINE_SCALE_DOWN_UNSUPPORTED: GateReason
GATE_REASON_EPLB_REQUIRED: GateReason
GATE_REASON_EXPERT_REDUNDANCY_REQUIRED: GateReason
SOFTWARE_FAULT_KIND_UNSPECIFIED: SoftwareFaultKind
SOFTWARE_FAULT_KIND_UNHEALTHY: SoftwareFaultKind
SOFTWARE_FAULT_KIND_DEAD: SoftwareFaultKind
SOFTWARE_FAULT_KIND_ENGINE_DEAD: SoftwareFaultKind
SOFTWARE_FAULT_KIND_PROTOCOL_ERROR: SoftwareFaultKind
SOFTWARE_FAULT_KIND_RECOVERED: SoftwareFaultKind
FAULT_LEVEL_UNSPECIFIED: FaultLevel
FAULT_LEVEL_L1: FaultLevel
FAULT_LEVEL_L2: FaultLevel
FAULT_LEVEL_L3: FaultLevel
FAULT_LEVEL_L4: FaultLevel
FAULT_LEVEL_L5: FaultLevel
FAULT_LEVEL_L6: FaultLevel
FALLBACK_CAUSE_UNSPECIFIED: FallbackCause
FALLBACK_CAUSE_PROTOCOL_ERROR: FallbackCause
FALLBACK_CAUSE_SCALE_DOWN_DISABLED: FallbackCause
FALLBACK_CAUSE_ALL_RANKS_DEAD: FallbackCause
FALLBACK_CAUSE_ALL_UNHEALTHY_TIMEOUT: FallbackCause
FALLBACK_CAUSE_INCOMPLETE_SNAPSHOT: FallbackCause
FALLBACK_CAUSE_HARDWARE_NOT_CORRELATED: FallbackCause
FALLBACK_CAUSE_HARDWARE_UNMAPPABLE: FallbackCause
FALLBACK_CAUSE_PARTIAL_LOSS: FallbackCause
FALLBACK_CAUSE_STRATEGY_FAILED: FallbackCause
FALLBACK_CAUSE_INTERRUPTED_ROUND: FallbackCause
FALLBACK_CAUSE_RETRY: FallbackCause
TIMELINE_EVENT_KIND_UNSPECIFIED: TimelineEventKind
TIMELINE_EVENT_KIND_EVIDENCE: TimelineEventKind
TIMELINE_EVENT_KIND_DECISION: TimelineEventKind
TIMELINE_EVENT_KIND_PHASE: TimelineEventKind
TIMELINE_EVENT_KIND_CALL: TimelineEventKind
TIMELINE_EVENT_KIND_NOTE: TimelineEventKind

class RegisterRequest(_message.Message):
    __slots__ = ("pod", "instance_id", "role", "model", "dp_size", "endpoints", "ft_capability", "retired_ids")
    POD_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    DP_SIZE_FIELD_NUMBER: _ClassVar[int]
    ENDPOINTS_FIELD_NUMBER: _ClassVar[int]
    FT_CAPABILITY_FIELD_NUMBER: _ClassVar[int]
    RETIRED_IDS_FIELD_NUMBER: _ClassVar[int]
    pod: _common_pb2.Pod
    instance_id: int
    role: _common_pb2.Role
    model: str
    dp_size: int
    endpoints: _containers.RepeatedCompositeFieldContainer[_common_pb2.Endpoint]
    ft_capability: _common_pb2.FtCapability
    retired_ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, pod: _Optional[_Union[_common_pb2.Pod, _Mapping]] = ..., instance_id: _Optional[int] = ..., role: _Optional[_Union[_common_pb2.Role, str]] = ..., model: _Optional[str] = ..., dp_size: _Optional[int] = ..., endpoints: _Optional[_Iterable[_Union[_common_pb2.Endpoint, _Mapping]]] = ..., ft_capability: _Optional[_Union[_common_pb2.FtCapability, _Mapping]] = ..., retired_ids: _Optional[_Iterable[int]] = ...) -> None: ...

class NodeManagerFtConfig(_message.Message):
    __slots__ = ("enable_dp_scale_down_proxy", "heartbeat_interval_sec", "heartbeat_quiet_interval_sec")
    ENABLE_DP_SCALE_DOWN_PROXY_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_INTERVAL_SEC_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_QUIET_INTERVAL_SEC_FIELD_NUMBER: _ClassVar[int]
    enable_dp_scale_down_proxy: bool
    heartbeat_interval_sec: float
    heartbeat_quiet_interval_sec: float
    def __init__(self, enable_dp_scale_down_proxy: _Optional[bool] = ..., heartbeat_interval_sec: _Optional[float] = ..., heartbeat_quiet_interval_sec: _Optional[float] = ...) -> None: ...

class RegisterResponse(_message.Message):
    __slots__ = ("accepted", "message", "config")
    ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    accepted: bool
    message: str
    config: NodeManagerFtConfig
    def __init__(self, accepted: _Optional[bool] = ..., message: _Optional[str] = ..., config: _Optional[_Union[NodeManagerFtConfig, _Mapping]] = ...) -> None: ...

class HeartbeatRequest(_message.Message):
    __slots__ = ("pod_ip", "instance_id", "alive_endpoint_ids", "seq")
    POD_IP_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    ALIVE_ENDPOINT_IDS_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    pod_ip: str
    instance_id: int
    alive_endpoint_ids: _containers.RepeatedScalarFieldContainer[int]
    seq: int
    def __init__(self, pod_ip: _Optional[str] = ..., instance_id: _Optional[int] = ..., alive_endpoint_ids: _Optional[_Iterable[int]] = ..., seq: _Optional[int] = ...) -> None: ...

class HeartbeatResponse(_message.Message):
    __slots__ = ("known", "config")
    KNOWN_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    known: bool
    config: NodeManagerFtConfig
    def __init__(self, known: _Optional[bool] = ..., config: _Optional[_Union[NodeManagerFtConfig, _Mapping]] = ...) -> None: ...

class HeartbeatStreamRequest(_message.Message):
    __slots__ = ("heartbeat",)
    HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    heartbeat: HeartbeatRequest
    def __init__(self, heartbeat: _Optional[_Union[HeartbeatRequest, _Mapping]] = ...) -> None: ...

class HeartbeatStreamResponse(_message.Message):
    __slots__ = ("heartbeat", "leader_term")
    HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    LEADER_TERM_FIELD_NUMBER: _ClassVar[int]
    heartbeat: HeartbeatResponse
    leader_term: int
    def __init__(self, heartbeat: _Optional[_Union[HeartbeatResponse, _Mapping]] = ..., leader_term: _Optional[int] = ...) -> None: ...

class ReportSoftwareFaultRequest(_message.Message):
    __slots__ = ("pod_ip", "instance_id", "endpoint_id", "kind", "evidence", "status", "observed_at_unix_sec", "diagnosing_observed_at_unix_sec")
    POD_IP_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    EVIDENCE_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    OBSERVED_AT_UNIX_SEC_FIELD_NUMBER: _ClassVar[int]
    DIAGNOSING_OBSERVED_AT_UNIX_SEC_FIELD_NUMBER: _ClassVar[int]
    pod_ip: str
    instance_id: int
    endpoint_id: int
    kind: SoftwareFaultKind
    evidence: str
    status: _common_pb2.EngineFtStatus
    observed_at_unix_sec: float
    diagnosing_observed_at_unix_sec: float
    def __init__(self, pod_ip: _Optional[str] = ..., instance_id: _Optional[int] = ..., endpoint_id: _Optional[int] = ..., kind: _Optional[_Union[SoftwareFaultKind, str]] = ..., evidence: _Optional[str] = ..., status: _Optional[_Union[_common_pb2.EngineFtStatus, _Mapping]] = ..., observed_at_unix_sec: _Optional[float] = ..., diagnosing_observed_at_unix_sec: _Optional[float] = ...) -> None: ...

class ReportSoftwareFaultResponse(_message.Message):
    __slots__ = ("accepted", "message")
    ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    accepted: bool
    message: str
    def __init__(self, accepted: _Optional[bool] = ..., message: _Optional[str] = ...) -> None: ...

class ReportSoftwareFaultsRequest(_message.Message):
    __slots__ = ("reports",)
    REPORTS_FIELD_NUMBER: _ClassVar[int]
    reports: _containers.RepeatedCompositeFieldContainer[ReportSoftwareFaultRequest]
    def __init__(self, reports: _Optional[_Iterable[_Union[ReportSoftwareFaultRequest, _Mapping]]] = ...) -> None: ...

class ReportSoftwareFaultsResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[ReportSoftwareFaultResult]
    def __init__(self, results: _Optional[_Iterable[_Union[ReportSoftwareFaultResult, _Mapping]]] = ...) -> None: ...

class ReportSoftwareFaultResult(_message.Message):
    __slots__ = ("accepted", "message", "refused")
    ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    REFUSED_FIELD_NUMBER: _ClassVar[int]
    accepted: bool
    message: str
    refused: bool
    def __init__(self, accepted: _Optional[bool] = ..., message: _Optional[str] = ..., refused: _Optional[bool] = ...) -> None: ...

class ReportHardwareFaultRequest(_message.Message):
    __slots__ = ("node_name", "npu_name", "fault_code", "level", "fault_type", "fault_handling", "fault_time_unix_sec", "source")
    NODE_NAME_FIELD_NUMBER: _ClassVar[int]
    NPU_NAME_FIELD_NUMBER: _ClassVar[int]
    FAULT_CODE_FIELD_NUMBER: _ClassVar[int]
    LEVEL_FIELD_NUMBER: _ClassVar[int]
    FAULT_TYPE_FIELD_NUMBER: _ClassVar[int]
    FAULT_HANDLING_FIELD_NUMBER: _ClassVar[int]
    FAULT_TIME_UNIX_SEC_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    node_name: str
    npu_name: str
    fault_code: str
    level: FaultLevel
    fault_type: str
    fault_handling: str
    fault_time_unix_sec: float
    source: str
    def __init__(self, node_name: _Optional[str] = ..., npu_name: _Optional[str] = ..., fault_code: _Optional[str] = ..., level: _Optional[_Union[FaultLevel, str]] = ..., fault_type: _Optional[str] = ..., fault_handling: _Optional[str] = ..., fault_time_unix_sec: _Optional[float] = ..., source: _Optional[str] = ...) -> None: ...

class ReportHardwareFaultResponse(_message.Message):
    __slots__ = ("accepted", "message")
    ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    accepted: bool
    message: str
    def __init__(self, accepted: _Optional[bool] = ..., message: _Optional[str] = ...) -> None: ...

class Gate(_message.Message):
    __slots__ = ("allowed", "reason_codes")
    ALLOWED_FIELD_NUMBER: _ClassVar[int]
    REASON_CODES_FIELD_NUMBER: _ClassVar[int]
    allowed: bool
    reason_codes: _containers.RepeatedScalarFieldContainer[GateReason]
    def __init__(self, allowed: _Optional[bool] = ..., reason_codes: _Optional[_Iterable[_Union[GateReason, str]]] = ...) -> None: ...

class InstanceFtRuntime(_message.Message):
    __slots__ = ("instance_id", "phase", "original_dp_ranks", "request_id", "dead_committed", "pending_removed_ranks", "alive_dp_ranks", "fallback_strategy", "gate", "engine_statuses", "serving_published", "last_error", "can_serve", "generation", "reconfiguration_attempts", "reconfiguration_gave_up", "migrated_requests", "idle_fault_probes", "capacity_restore", "restore_waiting_for", "restore_unplaced_ranks", "restore_request_id")
    class EngineStatusesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: _common_pb2.EngineFtStatus
        def __init__(self, key: _Optional[int] = ..., value: _Optional[_Union[_common_pb2.EngineFtStatus, _Mapping]] = ...) -> None: ...
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    PHASE_FIELD_NUMBER: _ClassVar[int]
    ORIGINAL_DP_RANKS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    DEAD_COMMITTED_FIELD_NUMBER: _ClassVar[int]
    PENDING_REMOVED_RANKS_FIELD_NUMBER: _ClassVar[int]
    ALIVE_DP_RANKS_FIELD_NUMBER: _ClassVar[int]
    FALLBACK_STRATEGY_FIELD_NUMBER: _ClassVar[int]
    GATE_FIELD_NUMBER: _ClassVar[int]
    ENGINE_STATUSES_FIELD_NUMBER: _ClassVar[int]
    SERVING_PUBLISHED_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_FIELD_NUMBER: _ClassVar[int]
    CAN_SERVE_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    RECONFIGURATION_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    RECONFIGURATION_GAVE_UP_FIELD_NUMBER: _ClassVar[int]
    MIGRATED_REQUESTS_FIELD_NUMBER: _ClassVar[int]
    IDLE_FAULT_PROBES_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_RESTORE_FIELD_NUMBER: _ClassVar[int]
    RESTORE_WAITING_FOR_FIELD_NUMBER: _ClassVar[int]
    RESTORE_UNPLACED_RANKS_FIELD_NUMBER: _ClassVar[int]
    RESTORE_REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    instance_id: int
    phase: FtPhase
    original_dp_ranks: _containers.RepeatedScalarFieldContainer[int]
    request_id: str
    dead_committed: _containers.RepeatedScalarFieldContainer[int]
    pending_removed_ranks: _containers.RepeatedScalarFieldContainer[int]
    alive_dp_ranks: _containers.RepeatedScalarFieldContainer[int]
    fallback_strategy: str
    gate: Gate
    engine_statuses: _containers.MessageMap[int, _common_pb2.EngineFtStatus]
    serving_published: bool
    last_error: str
    can_serve: bool
    generation: int
    reconfiguration_attempts: int
    reconfiguration_gave_up: bool
    migrated_requests: int
    idle_fault_probes: int
    capacity_restore: str
    restore_waiting_for: str
    restore_unplaced_ranks: _containers.RepeatedScalarFieldContainer[int]
    restore_request_id: str
    def __init__(self, instance_id: _Optional[int] = ..., phase: _Optional[_Union[FtPhase, str]] = ..., original_dp_ranks: _Optional[_Iterable[int]] = ..., request_id: _Optional[str] = ..., dead_committed: _Optional[_Iterable[int]] = ..., pending_removed_ranks: _Optional[_Iterable[int]] = ..., alive_dp_ranks: _Optional[_Iterable[int]] = ..., fallback_strategy: _Optional[str] = ..., gate: _Optional[_Union[Gate, _Mapping]] = ..., engine_statuses: _Optional[_Mapping[int, _common_pb2.EngineFtStatus]] = ..., serving_published: _Optional[bool] = ..., last_error: _Optional[str] = ..., can_serve: _Optional[bool] = ..., generation: _Optional[int] = ..., reconfiguration_attempts: _Optional[int] = ..., reconfiguration_gave_up: _Optional[bool] = ..., migrated_requests: _Optional[int] = ..., idle_fault_probes: _Optional[int] = ..., capacity_restore: _Optional[str] = ..., restore_waiting_for: _Optional[str] = ..., restore_unplaced_ranks: _Optional[_Iterable[int]] = ..., restore_request_id: _Optional[str] = ...) -> None: ...

class RestoreInstanceRequest(_message.Message):
    __slots__ = ("instance_id", "request_id", "when_ready", "deadline_sec")
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    WHEN_READY_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_SEC_FIELD_NUMBER: _ClassVar[int]
    instance_id: int
    request_id: str
    when_ready: bool
    deadline_sec: float
    def __init__(self, instance_id: _Optional[int] = ..., request_id: _Optional[str] = ..., when_ready: _Optional[bool] = ..., deadline_sec: _Optional[float] = ...) -> None: ...

class RestoreInstanceResponse(_message.Message):
    __slots__ = ("state", "transaction_id", "message", "unplaced_ranks")
    STATE_FIELD_NUMBER: _ClassVar[int]
    TRANSACTION_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    UNPLACED_RANKS_FIELD_NUMBER: _ClassVar[int]
    state: str
    transaction_id: str
    message: str
    unplaced_ranks: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, state: _Optional[str] = ..., transaction_id: _Optional[str] = ..., message: _Optional[str] = ..., unplaced_ranks: _Optional[_Iterable[int]] = ...) -> None: ...

class GetFaultToleranceStatusRequest(_message.Message):
    __slots__ = ("instance_ids",)
    INSTANCE_IDS_FIELD_NUMBER: _ClassVar[int]
    instance_ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, instance_ids: _Optional[_Iterable[int]] = ...) -> None: ...

class GetFaultToleranceStatusResponse(_message.Message):
    __slots__ = ("instances", "leadership")
    INSTANCES_FIELD_NUMBER: _ClassVar[int]
    LEADERSHIP_FIELD_NUMBER: _ClassVar[int]
    instances: _containers.RepeatedCompositeFieldContainer[InstanceFtRuntime]
    leadership: Leadership
    def __init__(self, instances: _Optional[_Iterable[_Union[InstanceFtRuntime, _Mapping]]] = ..., leadership: _Optional[_Union[Leadership, _Mapping]] = ...) -> None: ...

class Leadership(_message.Message):
    __slots__ = ("election_enabled", "is_leader", "replica_id", "address", "leader_id", "leader_address", "term")
    ELECTION_ENABLED_FIELD_NUMBER: _ClassVar[int]
    IS_LEADER_FIELD_NUMBER: _ClassVar[int]
    REPLICA_ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    LEADER_ID_FIELD_NUMBER: _ClassVar[int]
    LEADER_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    election_enabled: bool
    is_leader: bool
    replica_id: str
    address: str
    leader_id: str
    leader_address: str
    term: int
    def __init__(self, election_enabled: _Optional[bool] = ..., is_leader: _Optional[bool] = ..., replica_id: _Optional[str] = ..., address: _Optional[str] = ..., leader_id: _Optional[str] = ..., leader_address: _Optional[str] = ..., term: _Optional[int] = ...) -> None: ...

class RequestPublicationRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class RequestPublicationResponse(_message.Message):
    __slots__ = ("instance_ids", "term")
    INSTANCE_IDS_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    instance_ids: _containers.RepeatedScalarFieldContainer[int]
    term: int
    def __init__(self, instance_ids: _Optional[_Iterable[int]] = ..., term: _Optional[int] = ...) -> None: ...

class WatchFaultToleranceStatusRequest(_message.Message):
    __slots__ = ("instance_ids",)
    INSTANCE_IDS_FIELD_NUMBER: _ClassVar[int]
    instance_ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, instance_ids: _Optional[_Iterable[int]] = ...) -> None: ...

class WatchFaultToleranceStatusResponse(_message.Message):
    __slots__ = ("runtime", "changed_at_unix_sec")
    RUNTIME_FIELD_NUMBER: _ClassVar[int]
    CHANGED_AT_UNIX_SEC_FIELD_NUMBER: _ClassVar[int]
    runtime: InstanceFtRuntime
    changed_at_unix_sec: float
    def __init__(self, runtime: _Optional[_Union[InstanceFtRuntime, _Mapping]] = ..., changed_at_unix_sec: _Optional[float] = ...) -> None: ...

class GetTimelineRequest(_message.Message):
    __slots__ = ("instance_id", "limit")
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    instance_id: int
    limit: int
    def __init__(self, instance_id: _Optional[int] = ..., limit: _Optional[int] = ...) -> None: ...

class TimelineEvent(_message.Message):
    __slots__ = ("at_unix_sec", "kind", "name", "target", "outcome", "detail", "duration_sec", "event_kind", "phase", "ranks", "endpoint_ids", "evidence_kind", "observed_at_unix_sec", "received_at_unix_sec", "apply_results", "dp_master_ip", "dp_store_port", "unhealthy_ranks", "dead_committed", "gate_allowed", "gate_reasons", "engine_statuses", "error", "lease_sec", "commit", "request_id", "fallback_cause", "hardware_ranks", "skew_sec", "diagnosing_observed_at_unix_sec", "migrated_requests")
    AT_UNIX_SEC_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    DURATION_SEC_FIELD_NUMBER: _ClassVar[int]
    EVENT_KIND_FIELD_NUMBER: _ClassVar[int]
    PHASE_FIELD_NUMBER: _ClassVar[int]
    RANKS_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_IDS_FIELD_NUMBER: _ClassVar[int]
    EVIDENCE_KIND_FIELD_NUMBER: _ClassVar[int]
    OBSERVED_AT_UNIX_SEC_FIELD_NUMBER: _ClassVar[int]
    RECEIVED_AT_UNIX_SEC_FIELD_NUMBER: _ClassVar[int]
    APPLY_RESULTS_FIELD_NUMBER: _ClassVar[int]
    DP_MASTER_IP_FIELD_NUMBER: _ClassVar[int]
    DP_STORE_PORT_FIELD_NUMBER: _ClassVar[int]
    UNHEALTHY_RANKS_FIELD_NUMBER: _ClassVar[int]
    DEAD_COMMITTED_FIELD_NUMBER: _ClassVar[int]
    GATE_ALLOWED_FIELD_NUMBER: _ClassVar[int]
    GATE_REASONS_FIELD_NUMBER: _ClassVar[int]
    ENGINE_STATUSES_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    LEASE_SEC_FIELD_NUMBER: _ClassVar[int]
    COMMIT_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    FALLBACK_CAUSE_FIELD_NUMBER: _ClassVar[int]
    HARDWARE_RANKS_FIELD_NUMBER: _ClassVar[int]
    SKEW_SEC_FIELD_NUMBER: _ClassVar[int]
    DIAGNOSING_OBSERVED_AT_UNIX_SEC_FIELD_NUMBER: _ClassVar[int]
    MIGRATED_REQUESTS_FIELD_NUMBER: _ClassVar[int]
    at_unix_sec: float
    kind: str
    name: str
    target: str
    outcome: str
    detail: str
    duration_sec: float
    event_kind: TimelineEventKind
    phase: FtPhase
    ranks: _containers.RepeatedScalarFieldContainer[int]
    endpoint_ids: _containers.RepeatedScalarFieldContainer[int]
    evidence_kind: SoftwareFaultKind
    observed_at_unix_sec: float
    received_at_unix_sec: float
    apply_results: _containers.RepeatedCompositeFieldContainer[_node_manager_pb2.EngineApplyResult]
    dp_master_ip: str
    dp_store_port: int
    unhealthy_ranks: _containers.RepeatedScalarFieldContainer[int]
    dead_committed: _containers.RepeatedScalarFieldContainer[int]
    gate_allowed: bool
    gate_reasons: _containers.RepeatedScalarFieldContainer[GateReason]
    engine_statuses: _containers.RepeatedCompositeFieldContainer[_common_pb2.EngineFtStatus]
    error: str
    lease_sec: float
    commit: bool
    request_id: str
    fallback_cause: FallbackCause
    hardware_ranks: _containers.RepeatedScalarFieldContainer[int]
    skew_sec: float
    diagnosing_observed_at_unix_sec: float
    migrated_requests: int
    def __init__(self, at_unix_sec: _Optional[float] = ..., kind: _Optional[str] = ..., name: _Optional[str] = ..., target: _Optional[str] = ..., outcome: _Optional[str] = ..., detail: _Optional[str] = ..., duration_sec: _Optional[float] = ..., event_kind: _Optional[_Union[TimelineEventKind, str]] = ..., phase: _Optional[_Union[FtPhase, str]] = ..., ranks: _Optional[_Iterable[int]] = ..., endpoint_ids: _Optional[_Iterable[int]] = ..., evidence_kind: _Optional[_Union[SoftwareFaultKind, str]] = ..., observed_at_unix_sec: _Optional[float] = ..., received_at_unix_sec: _Optional[float] = ..., apply_results: _Optional[_Iterable[_Union[_node_manager_pb2.EngineApplyResult, _Mapping]]] = ..., dp_master_ip: _Optional[str] = ..., dp_store_port: _Optional[int] = ..., unhealthy_ranks: _Optional[_Iterable[int]] = ..., dead_committed: _Optional[_Iterable[int]] = ..., gate_allowed: _Optional[bool] = ..., gate_reasons: _Optional[_Iterable[_Union[GateReason, str]]] = ..., engine_statuses: _Optional[_Iterable[_Union[_common_pb2.EngineFtStatus, _Mapping]]] = ..., error: _Optional[str] = ..., lease_sec: _Optional[float] = ..., commit: _Optional[bool] = ..., request_id: _Optional[str] = ..., fallback_cause: _Optional[_Union[FallbackCause, str]] = ..., hardware_ranks: _Optional[_Iterable[int]] = ..., skew_sec: _Optional[float] = ..., diagnosing_observed_at_unix_sec: _Optional[float] = ..., migrated_requests: _Optional[int] = ...) -> None: ...

class Transaction(_message.Message):
    __slots__ = ("request_id", "strategy", "started_at_unix_sec", "ended_at_unix_sec", "outcome", "events")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    STRATEGY_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_UNIX_SEC_FIELD_NUMBER: _ClassVar[int]
    ENDED_AT_UNIX_SEC_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    strategy: str
    started_at_unix_sec: float
    ended_at_unix_sec: float
    outcome: str
    events: _containers.RepeatedCompositeFieldContainer[TimelineEvent]
    def __init__(self, request_id: _Optional[str] = ..., strategy: _Optional[str] = ..., started_at_unix_sec: _Optional[float] = ..., ended_at_unix_sec: _Optional[float] = ..., outcome: _Optional[str] = ..., events: _Optional[_Iterable[_Union[TimelineEvent, _Mapping]]] = ...) -> None: ...

class GetTimelineResponse(_message.Message):
    __slots__ = ("transactions",)
    TRANSACTIONS_FIELD_NUMBER: _ClassVar[int]
    transactions: _containers.RepeatedCompositeFieldContainer[Transaction]
    def __init__(self, transactions: _Optional[_Iterable[_Union[Transaction, _Mapping]]] = ...) -> None: ...
