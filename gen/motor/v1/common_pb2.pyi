from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Role(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ROLE_UNSPECIFIED: _ClassVar[Role]
    ROLE_PREFILL: _ClassVar[Role]
    ROLE_DECODE: _ClassVar[Role]
    ROLE_UNION: _ClassVar[Role]

class EngineHealth(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ENGINE_HEALTH_UNSPECIFIED: _ClassVar[EngineHealth]
    ENGINE_HEALTH_HEALTHY: _ClassVar[EngineHealth]
    ENGINE_HEALTH_UNHEALTHY: _ClassVar[EngineHealth]
    ENGINE_HEALTH_DEAD: _ClassVar[EngineHealth]
    ENGINE_HEALTH_DIAGNOSING: _ClassVar[EngineHealth]

class FtState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FT_STATE_UNSPECIFIED: _ClassVar[FtState]
    FT_STATE_RECOVERING: _ClassVar[FtState]
    FT_STATE_FAILED: _ClassVar[FtState]
    FT_STATE_UNKNOWN: _ClassVar[FtState]
ROLE_UNSPECIFIED: Role
ROLE_PREFILL: Role
ROLE_DECODE: Role
ROLE_UNION: Role
ENGINE_HEALTH_UNSPECIFIED: EngineHealth
ENGINE_HEALTH_HEALTHY: EngineHealth
ENGINE_HEALTH_UNHEALTHY: EngineHealth
ENGINE_HEALTH_DEAD: EngineHealth
ENGINE_HEALTH_DIAGNOSING: EngineHealth
FT_STATE_UNSPECIFIED: FtState
FT_STATE_RECOVERING: FtState
FT_STATE_FAILED: FtState
FT_STATE_UNKNOWN: FtState

class DeviceInfo(_message.Message):
    __slots__ = ("device_id", "device_ip", "device_type")
    DEVICE_ID_FIELD_NUMBER: _ClassVar[int]
    DEVICE_IP_FIELD_NUMBER: _ClassVar[int]
    DEVICE_TYPE_FIELD_NUMBER: _ClassVar[int]
    device_id: str
    device_ip: str
    device_type: str
    def __init__(self, device_id: _Optional[str] = ..., device_ip: _Optional[str] = ..., device_type: _Optional[str] = ...) -> None: ...

class Endpoint(_message.Message):
    __slots__ = ("id", "ip", "business_port", "mgmt_port", "device_infos", "headless", "instance_route")
    ID_FIELD_NUMBER: _ClassVar[int]
    IP_FIELD_NUMBER: _ClassVar[int]
    BUSINESS_PORT_FIELD_NUMBER: _ClassVar[int]
    MGMT_PORT_FIELD_NUMBER: _ClassVar[int]
    DEVICE_INFOS_FIELD_NUMBER: _ClassVar[int]
    HEADLESS_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_ROUTE_FIELD_NUMBER: _ClassVar[int]
    id: int
    ip: str
    business_port: int
    mgmt_port: int
    device_infos: _containers.RepeatedCompositeFieldContainer[DeviceInfo]
    headless: bool
    instance_route: PinnedRoute
    def __init__(self, id: _Optional[int] = ..., ip: _Optional[str] = ..., business_port: _Optional[int] = ..., mgmt_port: _Optional[int] = ..., device_infos: _Optional[_Iterable[_Union[DeviceInfo, _Mapping]]] = ..., headless: _Optional[bool] = ..., instance_route: _Optional[_Union[PinnedRoute, _Mapping]] = ...) -> None: ...

class PinnedRoute(_message.Message):
    __slots__ = ("host", "port")
    HOST_FIELD_NUMBER: _ClassVar[int]
    PORT_FIELD_NUMBER: _ClassVar[int]
    host: str
    port: int
    def __init__(self, host: _Optional[str] = ..., port: _Optional[int] = ...) -> None: ...

class FtCapability(_message.Message):
    __slots__ = ("engine_ft_enabled", "scale_down_supported", "external_lb", "auto_recovery", "enable_eplb", "num_redundant_experts", "retry_supported", "supports_scale_up")
    ENGINE_FT_ENABLED_FIELD_NUMBER: _ClassVar[int]
    SCALE_DOWN_SUPPORTED_FIELD_NUMBER: _ClassVar[int]
    EXTERNAL_LB_FIELD_NUMBER: _ClassVar[int]
    AUTO_RECOVERY_FIELD_NUMBER: _ClassVar[int]
    ENABLE_EPLB_FIELD_NUMBER: _ClassVar[int]
    NUM_REDUNDANT_EXPERTS_FIELD_NUMBER: _ClassVar[int]
    RETRY_SUPPORTED_FIELD_NUMBER: _ClassVar[int]
    SUPPORTS_SCALE_UP_FIELD_NUMBER: _ClassVar[int]
    engine_ft_enabled: bool
    scale_down_supported: bool
    external_lb: bool
    auto_recovery: bool
    enable_eplb: bool
    num_redundant_experts: int
    retry_supported: bool
    supports_scale_up: bool
    def __init__(self, engine_ft_enabled: _Optional[bool] = ..., scale_down_supported: _Optional[bool] = ..., external_lb: _Optional[bool] = ..., auto_recovery: _Optional[bool] = ..., enable_eplb: _Optional[bool] = ..., num_redundant_experts: _Optional[int] = ..., retry_supported: _Optional[bool] = ..., supports_scale_up: _Optional[bool] = ...) -> None: ...

class EngineFtStatus(_message.Message):
    __slots__ = ("id", "status", "ft_state", "fault_info", "last_ft_request_id", "ft_error", "mask", "raw_ft_state", "observed_at_unix_sec")
    ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    FT_STATE_FIELD_NUMBER: _ClassVar[int]
    FAULT_INFO_FIELD_NUMBER: _ClassVar[int]
    LAST_FT_REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    FT_ERROR_FIELD_NUMBER: _ClassVar[int]
    MASK_FIELD_NUMBER: _ClassVar[int]
    RAW_FT_STATE_FIELD_NUMBER: _ClassVar[int]
    OBSERVED_AT_UNIX_SEC_FIELD_NUMBER: _ClassVar[int]
    id: int
    status: EngineHealth
    ft_state: FtState
    fault_info: str
    last_ft_request_id: str
    ft_error: str
    mask: _containers.RepeatedScalarFieldContainer[int]
    raw_ft_state: str
    observed_at_unix_sec: float
    def __init__(self, id: _Optional[int] = ..., status: _Optional[_Union[EngineHealth, str]] = ..., ft_state: _Optional[_Union[FtState, str]] = ..., fault_info: _Optional[str] = ..., last_ft_request_id: _Optional[str] = ..., ft_error: _Optional[str] = ..., mask: _Optional[_Iterable[int]] = ..., raw_ft_state: _Optional[str] = ..., observed_at_unix_sec: _Optional[float] = ...) -> None: ...

class Pod(_message.Message):
    __slots__ = ("pod_ip", "node_name", "node_manager_address", "endpoint_ids", "dp_store_port_base", "bound_pod_uri")
    POD_IP_FIELD_NUMBER: _ClassVar[int]
    NODE_NAME_FIELD_NUMBER: _ClassVar[int]
    NODE_MANAGER_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_IDS_FIELD_NUMBER: _ClassVar[int]
    DP_STORE_PORT_BASE_FIELD_NUMBER: _ClassVar[int]
    BOUND_POD_URI_FIELD_NUMBER: _ClassVar[int]
    pod_ip: str
    node_name: str
    node_manager_address: str
    endpoint_ids: _containers.RepeatedScalarFieldContainer[int]
    dp_store_port_base: int
    bound_pod_uri: str
    def __init__(self, pod_ip: _Optional[str] = ..., node_name: _Optional[str] = ..., node_manager_address: _Optional[str] = ..., endpoint_ids: _Optional[_Iterable[int]] = ..., dp_store_port_base: _Optional[int] = ..., bound_pod_uri: _Optional[str] = ...) -> None: ...

class Instance(_message.Message):
    __slots__ = ("id", "role", "model", "pods", "endpoints", "dp_size", "ft_capability")
    ID_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    PODS_FIELD_NUMBER: _ClassVar[int]
    ENDPOINTS_FIELD_NUMBER: _ClassVar[int]
    DP_SIZE_FIELD_NUMBER: _ClassVar[int]
    FT_CAPABILITY_FIELD_NUMBER: _ClassVar[int]
    id: int
    role: Role
    model: str
    pods: _containers.RepeatedCompositeFieldContainer[Pod]
    endpoints: _containers.RepeatedCompositeFieldContainer[Endpoint]
    dp_size: int
    ft_capability: FtCapability
    def __init__(self, id: _Optional[int] = ..., role: _Optional[_Union[Role, str]] = ..., model: _Optional[str] = ..., pods: _Optional[_Iterable[_Union[Pod, _Mapping]]] = ..., endpoints: _Optional[_Iterable[_Union[Endpoint, _Mapping]]] = ..., dp_size: _Optional[int] = ..., ft_capability: _Optional[_Union[FtCapability, _Mapping]] = ...) -> None: ...
