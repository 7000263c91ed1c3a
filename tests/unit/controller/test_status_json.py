"""The status pages' JSON rendering (message_json, one walk over the message) is exactly what
protobuf's own JSON mapping gives after the documented adjustments (the reference below: the
rendering it replaced), for runtimes with engine statuses and for timelines with every event kind."""

from __future__ import annotations

import re
from typing import Any

from google.protobuf import json_format
from google.protobuf.descriptor import FieldDescriptor

from gen.motor.v1 import common_pb2, controller_pb2
from motor.controller.model.runtime import FtPhase, FtRuntimeStore
from motor.controller.status import message_json, runtime_proto

_INT64 = {FieldDescriptor.TYPE_INT64, FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_SINT64,
          FieldDescriptor.TYPE_FIXED64, FieldDescriptor.TYPE_SFIXED64}


def _prefix(enum) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", enum.name).upper() + "_"


def _value(field, value: Any) -> Any:
    if field.type == FieldDescriptor.TYPE_ENUM:
        return value.removeprefix(_prefix(field.enum_type)) if isinstance(value, str) else value
    if field.type in _INT64:
        return int(value)
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        return _fields(field.message_type, value)
    return value


def _fields(descriptor, data: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for field in descriptor.fields:
        if field.name not in data:
            out[field.name] = None
            continue
        value = data[field.name]
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            value_field = field.message_type.fields_by_name["value"]
            out[field.name] = {k: _value(value_field, v) for k, v in value.items()}
        elif field.is_repeated:
            out[field.name] = [_value(field, v) for v in value]
        else:
            out[field.name] = _value(field, value)
    return out


def reference_json(msg) -> dict[str, Any]:
    data = json_format.MessageToDict(msg, preserving_proto_field_name=True, always_print_fields_with_no_presence=True)
    return _fields(msg.DESCRIPTOR, data)


def test_runtime_with_engine_statuses_renders_as_the_reference() -> None:
    store = FtRuntimeStore(True)
    rt = store.create(3, tuple(range(8)), "instance_reconfiguration")
    store.set_phase(3, FtPhase.DECIDING)
    store.set_error(3, "scale-down failed: rank 2 (dead, -)")
    for r in range(8):
        store.record_engine_status(3, r, common_pb2.EngineFtStatus(
            id=r, status=common_pb2.ENGINE_HEALTH_UNHEALTHY if r % 2 else common_pb2.ENGINE_HEALTH_HEALTHY,
            fault_info="RuntimeError" if r % 2 else "", mask=[1, 3] if r % 2 else []))
    msg = runtime_proto(rt)
    assert message_json(msg) == reference_json(msg)
    assert message_json(msg)["phase"] == "DECIDING" and message_json(msg)["engine_statuses"]["1"]["status"] == "UNHEALTHY"


def test_every_message_of_the_pages_renders_as_the_reference() -> None:
    event = controller_pb2.TimelineEvent()
    for field in event.DESCRIPTOR.fields:  # every field set to something not default
        if field.is_repeated and field.type == FieldDescriptor.TYPE_MESSAGE:
            getattr(event, field.name).add()
        elif field.is_repeated:
            getattr(event, field.name).append(2 if field.type != FieldDescriptor.TYPE_STRING else "x")
        elif field.type == FieldDescriptor.TYPE_MESSAGE:
            getattr(event, field.name).SetInParent()
        elif field.type == FieldDescriptor.TYPE_ENUM:
            setattr(event, field.name, field.enum_type.values[-1].number)
        elif field.type == FieldDescriptor.TYPE_STRING:
            setattr(event, field.name, "text")
        elif field.type == FieldDescriptor.TYPE_BOOL:
            setattr(event, field.name, True)
        elif field.type in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
            setattr(event, field.name, 1.25)
        else:
            setattr(event, field.name, 7)
    for msg in (event, controller_pb2.TimelineEvent(), controller_pb2.InstanceFtRuntime(),
                controller_pb2.Leadership(replica_id="a", term=3)):
        assert message_json(msg) == reference_json(msg), type(msg).__name__
