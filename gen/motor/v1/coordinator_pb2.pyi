from gen.motor.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class RefreshEvent(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    REFRESH_EVENT_UNSPECIFIED: _ClassVar[RefreshEvent]
    REFRESH_EVENT_ADD: _ClassVar[RefreshEvent]
    REFRESH_EVENT_DEL: _ClassVar[RefreshEvent]
    REFRESH_EVENT_SET: _ClassVar[RefreshEvent]
    REFRESH_EVENT_PAUSE: _ClassVar[RefreshEvent]
    REFRESH_EVENT_RESUME: _ClassVar[RefreshEvent]
REFRESH_EVENT_UNSPECIFIED: RefreshEvent
REFRESH_EVENT_ADD: RefreshEvent
REFRESH_EVENT_DEL: RefreshEvent
REFRESH_EVENT_SET: RefreshEvent
REFRESH_EVENT_PAUSE: RefreshEvent
REFRESH_EVENT_RESUME: RefreshEvent

class RefreshRequest(_message.Message):
    __slots__ = ("event", "instances", "revision")
    EVENT_FIELD_NUMBER: _ClassVar[int]
    INSTANCES_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    event: RefreshEvent
    instances: _containers.RepeatedCompositeFieldContainer[_common_pb2.Instance]
    revision: int
    def __init__(self, event: _Optional[_Union[RefreshEvent, str]] = ..., instances: _Optional[_Iterable[_Union[_common_pb2.Instance, _Mapping]]] = ..., revision: _Optional[int] = ...) -> None: ...

class RefreshResponse(_message.Message):
    __slots__ = ("revision",)
    REVISION_FIELD_NUMBER: _ClassVar[int]
    revision: int
    def __init__(self, revision: _Optional[int] = ...) -> None: ...

class ListInstancesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class PublishedInstance(_message.Message):
    __slots__ = ("instance", "paused", "outstanding_requests")
    class OutstandingRequestsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: int
        def __init__(self, key: _Optional[int] = ..., value: _Optional[int] = ...) -> None: ...
    INSTANCE_FIELD_NUMBER: _ClassVar[int]
    PAUSED_FIELD_NUMBER: _ClassVar[int]
    OUTSTANDING_REQUESTS_FIELD_NUMBER: _ClassVar[int]
    instance: _common_pb2.Instance
    paused: bool
    outstanding_requests: _containers.ScalarMap[int, int]
    def __init__(self, instance: _Optional[_Union[_common_pb2.Instance, _Mapping]] = ..., paused: _Optional[bool] = ..., outstanding_requests: _Optional[_Mapping[int, int]] = ...) -> None: ...

class ListInstancesResponse(_message.Message):
    __slots__ = ("instances", "revision", "reinference", "leader_term")
    INSTANCES_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    REINFERENCE_FIELD_NUMBER: _ClassVar[int]
    LEADER_TERM_FIELD_NUMBER: _ClassVar[int]
    instances: _containers.RepeatedCompositeFieldContainer[PublishedInstance]
    revision: int
    reinference: _containers.RepeatedCompositeFieldContainer[InstanceReinference]
    leader_term: int
    def __init__(self, instances: _Optional[_Iterable[_Union[PublishedInstance, _Mapping]]] = ..., revision: _Optional[int] = ..., reinference: _Optional[_Iterable[_Union[InstanceReinference, _Mapping]]] = ..., leader_term: _Optional[int] = ...) -> None: ...

class InstanceReinference(_message.Message):
    __slots__ = ("instance_id", "migrated_requests", "failed_requests")
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    MIGRATED_REQUESTS_FIELD_NUMBER: _ClassVar[int]
    FAILED_REQUESTS_FIELD_NUMBER: _ClassVar[int]
    instance_id: int
    migrated_requests: int
    failed_requests: int
    def __init__(self, instance_id: _Optional[int] = ..., migrated_requests: _Optional[int] = ..., failed_requests: _Optional[int] = ...) -> None: ...

class SendCanaryRequest(_message.Message):
    __slots__ = ("instance_id", "endpoint_ids", "timeout_sec", "request_id")
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_IDS_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_SEC_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    instance_id: int
    endpoint_ids: _containers.RepeatedScalarFieldContainer[int]
    timeout_sec: float
    request_id: str
    def __init__(self, instance_id: _Optional[int] = ..., endpoint_ids: _Optional[_Iterable[int]] = ..., timeout_sec: _Optional[float] = ..., request_id: _Optional[str] = ...) -> None: ...

class SendCanaryResponse(_message.Message):
    __slots__ = ("endpoint_id", "served", "http_status", "detail", "duration_sec", "request_id")
    ENDPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    SERVED_FIELD_NUMBER: _ClassVar[int]
    HTTP_STATUS_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    DURATION_SEC_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    endpoint_id: int
    served: bool
    http_status: int
    detail: str
    duration_sec: float
    request_id: str
    def __init__(self, endpoint_id: _Optional[int] = ..., served: _Optional[bool] = ..., http_status: _Optional[int] = ..., detail: _Optional[str] = ..., duration_sec: _Optional[float] = ..., request_id: _Optional[str] = ...) -> None: ...
