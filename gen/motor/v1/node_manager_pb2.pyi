from gen.motor.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Instruction(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    INSTRUCTION_UNSPECIFIED: _ClassVar[Instruction]
    INSTRUCTION_SCALE_DOWN: _ClassVar[Instruction]
    INSTRUCTION_RETRY: _ClassVar[Instruction]
    INSTRUCTION_SCALE_UP: _ClassVar[Instruction]
INSTRUCTION_UNSPECIFIED: Instruction
INSTRUCTION_SCALE_DOWN: Instruction
INSTRUCTION_RETRY: Instruction
INSTRUCTION_SCALE_UP: Instruction

class GuardRequest(_message.Message):
    __slots__ = ("request_id", "lease_sec", "instance_id", "then_status")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_SEC_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    THEN_STATUS_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    lease_sec: float
    instance_id: int
    then_status: StatusRead
    def __init__(self, request_id: _Optional[str] = ..., lease_sec: _Optional[float] = ..., instance_id: _Optional[int] = ..., then_status: _Optional[_Union[StatusRead, _Mapping]] = ...) -> None: ...

class GuardResponse(_message.Message):
    __slots__ = ("request_id", "lease_remaining_sec", "renewed", "then_status")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_REMAINING_SEC_FIELD_NUMBER: _ClassVar[int]
    RENEWED_FIELD_NUMBER: _ClassVar[int]
    THEN_STATUS_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    lease_remaining_sec: float
    renewed: bool
    then_status: StatusReadAnswer
    def __init__(self, request_id: _Optional[str] = ..., lease_remaining_sec: _Optional[float] = ..., renewed: _Optional[bool] = ..., then_status: _Optional[_Union[StatusReadAnswer, _Mapping]] = ...) -> None: ...

class StatusReadAnswer(_message.Message):
    __slots__ = ("status", "read_sec", "error_code", "error")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    READ_SEC_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    status: StatusResponse
    read_sec: float
    error_code: int
    error: str
    def __init__(self, status: _Optional[_Union[StatusResponse, _Mapping]] = ..., read_sec: _Optional[float] = ..., error_code: _Optional[int] = ..., error: _Optional[str] = ...) -> None: ...

class StatusRead(_message.Message):
    __slots__ = ("endpoint_ids", "wait_while", "settle_sec")
    ENDPOINT_IDS_FIELD_NUMBER: _ClassVar[int]
    WAIT_WHILE_FIELD_NUMBER: _ClassVar[int]
    SETTLE_SEC_FIELD_NUMBER: _ClassVar[int]
    endpoint_ids: _containers.RepeatedScalarFieldContainer[int]
    wait_while: _containers.RepeatedCompositeFieldContainer[EngineState]
    settle_sec: float
    def __init__(self, endpoint_ids: _Optional[_Iterable[int]] = ..., wait_while: _Optional[_Iterable[_Union[EngineState, _Mapping]]] = ..., settle_sec: _Optional[float] = ...) -> None: ...

class StatusRequest(_message.Message):
    __slots__ = ("instance_id", "endpoint_ids", "request_id", "wait_while", "settle_sec", "taken_as_evidence", "reread_max_sec")
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_IDS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    WAIT_WHILE_FIELD_NUMBER: _ClassVar[int]
    SETTLE_SEC_FIELD_NUMBER: _ClassVar[int]
    TAKEN_AS_EVIDENCE_FIELD_NUMBER: _ClassVar[int]
    REREAD_MAX_SEC_FIELD_NUMBER: _ClassVar[int]
    instance_id: int
    endpoint_ids: _containers.RepeatedScalarFieldContainer[int]
    request_id: str
    wait_while: _containers.RepeatedCompositeFieldContainer[EngineState]
    settle_sec: float
    taken_as_evidence: bool
    reread_max_sec: float
    def __init__(self, instance_id: _Optional[int] = ..., endpoint_ids: _Optional[_Iterable[int]] = ..., request_id: _Optional[str] = ..., wait_while: _Optional[_Iterable[_Union[EngineState, _Mapping]]] = ..., settle_sec: _Optional[float] = ..., taken_as_evidence: _Optional[bool] = ..., reread_max_sec: _Optional[float] = ...) -> None: ...

class EngineState(_message.Message):
    __slots__ = ("status", "ft_state")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    FT_STATE_FIELD_NUMBER: _ClassVar[int]
    status: _common_pb2.EngineHealth
    ft_state: _common_pb2.FtState
    def __init__(self, status: _Optional[_Union[_common_pb2.EngineHealth, str]] = ..., ft_state: _Optional[_Union[_common_pb2.FtState, str]] = ...) -> None: ...

class StatusResponse(_message.Message):
    __slots__ = ("engines",)
    ENGINES_FIELD_NUMBER: _ClassVar[int]
    engines: _containers.RepeatedCompositeFieldContainer[_common_pb2.EngineFtStatus]
    def __init__(self, engines: _Optional[_Iterable[_Union[_common_pb2.EngineFtStatus, _Mapping]]] = ...) -> None: ...

class ApplyRequest(_message.Message):
    __slots__ = ("instance_id", "request_id", "instruction", "removed_dp_ranks", "dp_master_ip", "dp_master_rank", "endpoint_ids", "dp_store_port", "added_dp_ranks", "round_removed_dp_ranks", "then_status")
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    INSTRUCTION_FIELD_NUMBER: _ClassVar[int]
    REMOVED_DP_RANKS_FIELD_NUMBER: _ClassVar[int]
    DP_MASTER_IP_FIELD_NUMBER: _ClassVar[int]
    DP_MASTER_RANK_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_IDS_FIELD_NUMBER: _ClassVar[int]
    DP_STORE_PORT_FIELD_NUMBER: _ClassVar[int]
    ADDED_DP_RANKS_FIELD_NUMBER: _ClassVar[int]
    ROUND_REMOVED_DP_RANKS_FIELD_NUMBER: _ClassVar[int]
    THEN_STATUS_FIELD_NUMBER: _ClassVar[int]
    instance_id: int
    request_id: str
    instruction: Instruction
    removed_dp_ranks: _containers.RepeatedScalarFieldContainer[int]
    dp_master_ip: str
    dp_master_rank: int
    endpoint_ids: _containers.RepeatedScalarFieldContainer[int]
    dp_store_port: int
    added_dp_ranks: _containers.RepeatedScalarFieldContainer[int]
    round_removed_dp_ranks: _containers.RepeatedScalarFieldContainer[int]
    then_status: StatusRead
    def __init__(self, instance_id: _Optional[int] = ..., request_id: _Optional[str] = ..., instruction: _Optional[_Union[Instruction, str]] = ..., removed_dp_ranks: _Optional[_Iterable[int]] = ..., dp_master_ip: _Optional[str] = ..., dp_master_rank: _Optional[int] = ..., endpoint_ids: _Optional[_Iterable[int]] = ..., dp_store_port: _Optional[int] = ..., added_dp_ranks: _Optional[_Iterable[int]] = ..., round_removed_dp_ranks: _Optional[_Iterable[int]] = ..., then_status: _Optional[_Union[StatusRead, _Mapping]] = ...) -> None: ...

class EngineApplyResult(_message.Message):
    __slots__ = ("endpoint_id", "accepted", "http_status", "engine_request_id", "message", "request_body", "elapsed_sec", "sent_at_unix_sec")
    ENDPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    HTTP_STATUS_FIELD_NUMBER: _ClassVar[int]
    ENGINE_REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    REQUEST_BODY_FIELD_NUMBER: _ClassVar[int]
    ELAPSED_SEC_FIELD_NUMBER: _ClassVar[int]
    SENT_AT_UNIX_SEC_FIELD_NUMBER: _ClassVar[int]
    endpoint_id: int
    accepted: bool
    http_status: int
    engine_request_id: str
    message: str
    request_body: str
    elapsed_sec: float
    sent_at_unix_sec: float
    def __init__(self, endpoint_id: _Optional[int] = ..., accepted: _Optional[bool] = ..., http_status: _Optional[int] = ..., engine_request_id: _Optional[str] = ..., message: _Optional[str] = ..., request_body: _Optional[str] = ..., elapsed_sec: _Optional[float] = ..., sent_at_unix_sec: _Optional[float] = ...) -> None: ...

class ApplyResponse(_message.Message):
    __slots__ = ("accepted", "results", "dp_store_port", "then_status")
    ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    DP_STORE_PORT_FIELD_NUMBER: _ClassVar[int]
    THEN_STATUS_FIELD_NUMBER: _ClassVar[int]
    accepted: bool
    results: _containers.RepeatedCompositeFieldContainer[EngineApplyResult]
    dp_store_port: int
    then_status: StatusReadAnswer
    def __init__(self, accepted: _Optional[bool] = ..., results: _Optional[_Iterable[_Union[EngineApplyResult, _Mapping]]] = ..., dp_store_port: _Optional[int] = ..., then_status: _Optional[_Union[StatusReadAnswer, _Mapping]] = ...) -> None: ...

class FinalizeRequest(_message.Message):
    __slots__ = ("instance_id", "request_id", "commit", "retired_ids")
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    COMMIT_FIELD_NUMBER: _ClassVar[int]
    RETIRED_IDS_FIELD_NUMBER: _ClassVar[int]
    instance_id: int
    request_id: str
    commit: bool
    retired_ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, instance_id: _Optional[int] = ..., request_id: _Optional[str] = ..., commit: _Optional[bool] = ..., retired_ids: _Optional[_Iterable[int]] = ...) -> None: ...

class FinalizeResponse(_message.Message):
    __slots__ = ("retired_ids", "guard_released")
    RETIRED_IDS_FIELD_NUMBER: _ClassVar[int]
    GUARD_RELEASED_FIELD_NUMBER: _ClassVar[int]
    retired_ids: _containers.RepeatedScalarFieldContainer[int]
    guard_released: bool
    def __init__(self, retired_ids: _Optional[_Iterable[int]] = ..., guard_released: _Optional[bool] = ...) -> None: ...

class StartEnginesRequest(_message.Message):
    __slots__ = ("instance_id", "request_id", "dp_master_ip", "dp_master_port", "endpoint_ids", "join")
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    DP_MASTER_IP_FIELD_NUMBER: _ClassVar[int]
    DP_MASTER_PORT_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_IDS_FIELD_NUMBER: _ClassVar[int]
    JOIN_FIELD_NUMBER: _ClassVar[int]
    instance_id: int
    request_id: str
    dp_master_ip: str
    dp_master_port: int
    endpoint_ids: _containers.RepeatedScalarFieldContainer[int]
    join: bool
    def __init__(self, instance_id: _Optional[int] = ..., request_id: _Optional[str] = ..., dp_master_ip: _Optional[str] = ..., dp_master_port: _Optional[int] = ..., endpoint_ids: _Optional[_Iterable[int]] = ..., join: _Optional[bool] = ...) -> None: ...

class StartEnginesResponse(_message.Message):
    __slots__ = ("endpoints", "launched_at_unix_sec")
    ENDPOINTS_FIELD_NUMBER: _ClassVar[int]
    LAUNCHED_AT_UNIX_SEC_FIELD_NUMBER: _ClassVar[int]
    endpoints: _containers.RepeatedCompositeFieldContainer[_common_pb2.Endpoint]
    launched_at_unix_sec: float
    def __init__(self, endpoints: _Optional[_Iterable[_Union[_common_pb2.Endpoint, _Mapping]]] = ..., launched_at_unix_sec: _Optional[float] = ...) -> None: ...

class StopEnginesRequest(_message.Message):
    __slots__ = ("instance_id", "request_id", "grace_sec", "endpoint_ids")
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    GRACE_SEC_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_IDS_FIELD_NUMBER: _ClassVar[int]
    instance_id: int
    request_id: str
    grace_sec: float
    endpoint_ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, instance_id: _Optional[int] = ..., request_id: _Optional[str] = ..., grace_sec: _Optional[float] = ..., endpoint_ids: _Optional[_Iterable[int]] = ...) -> None: ...

class StopEnginesResponse(_message.Message):
    __slots__ = ("stopped_ids",)
    STOPPED_IDS_FIELD_NUMBER: _ClassVar[int]
    stopped_ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, stopped_ids: _Optional[_Iterable[int]] = ...) -> None: ...

class RelaunchEnginesRequest(_message.Message):
    __slots__ = ("instance_id", "request_id", "dp_master_ip", "dp_master_port", "grace_sec")
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    DP_MASTER_IP_FIELD_NUMBER: _ClassVar[int]
    DP_MASTER_PORT_FIELD_NUMBER: _ClassVar[int]
    GRACE_SEC_FIELD_NUMBER: _ClassVar[int]
    instance_id: int
    request_id: str
    dp_master_ip: str
    dp_master_port: int
    grace_sec: float
    def __init__(self, instance_id: _Optional[int] = ..., request_id: _Optional[str] = ..., dp_master_ip: _Optional[str] = ..., dp_master_port: _Optional[int] = ..., grace_sec: _Optional[float] = ...) -> None: ...

class RelaunchEnginesResponse(_message.Message):
    __slots__ = ("endpoints", "launched_at_unix_sec")
    ENDPOINTS_FIELD_NUMBER: _ClassVar[int]
    LAUNCHED_AT_UNIX_SEC_FIELD_NUMBER: _ClassVar[int]
    endpoints: _containers.RepeatedCompositeFieldContainer[_common_pb2.Endpoint]
    launched_at_unix_sec: float
    def __init__(self, endpoints: _Optional[_Iterable[_Union[_common_pb2.Endpoint, _Mapping]]] = ..., launched_at_unix_sec: _Optional[float] = ...) -> None: ...

class StopPodRequest(_message.Message):
    __slots__ = ("request_id", "reason", "instance_id", "pod_ip")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    POD_IP_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    reason: str
    instance_id: int
    pod_ip: str
    def __init__(self, request_id: _Optional[str] = ..., reason: _Optional[str] = ..., instance_id: _Optional[int] = ..., pod_ip: _Optional[str] = ...) -> None: ...

class StopPodResponse(_message.Message):
    __slots__ = ("accepted",)
    ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    accepted: bool
    def __init__(self, accepted: _Optional[bool] = ...) -> None: ...

class DescribePodRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class EngineProcess(_message.Message):
    __slots__ = ("endpoint", "pid", "running", "exit_code", "retired")
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    RUNNING_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    RETIRED_FIELD_NUMBER: _ClassVar[int]
    endpoint: _common_pb2.Endpoint
    pid: int
    running: bool
    exit_code: int
    retired: bool
    def __init__(self, endpoint: _Optional[_Union[_common_pb2.Endpoint, _Mapping]] = ..., pid: _Optional[int] = ..., running: _Optional[bool] = ..., exit_code: _Optional[int] = ..., retired: _Optional[bool] = ...) -> None: ...

class DescribePodResponse(_message.Message):
    __slots__ = ("pod", "instance_id", "engines", "ft_proxy_enabled", "guard_request_id", "guard_remaining_sec")
    POD_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    ENGINES_FIELD_NUMBER: _ClassVar[int]
    FT_PROXY_ENABLED_FIELD_NUMBER: _ClassVar[int]
    GUARD_REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    GUARD_REMAINING_SEC_FIELD_NUMBER: _ClassVar[int]
    pod: _common_pb2.Pod
    instance_id: int
    engines: _containers.RepeatedCompositeFieldContainer[EngineProcess]
    ft_proxy_enabled: bool
    guard_request_id: str
    guard_remaining_sec: float
    def __init__(self, pod: _Optional[_Union[_common_pb2.Pod, _Mapping]] = ..., instance_id: _Optional[int] = ..., engines: _Optional[_Iterable[_Union[EngineProcess, _Mapping]]] = ..., ft_proxy_enabled: _Optional[bool] = ..., guard_request_id: _Optional[str] = ..., guard_remaining_sec: _Optional[float] = ...) -> None: ...
