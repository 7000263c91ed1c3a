"""Bounds on every field of every Motor request, checked by the servicers before anything else.

One walk over the message (nested messages, repeated fields and maps included) refuses a string or
bytes value longer than its bound, or a repeated field or map with more entries than its bound, with
INVALID_ARGUMENT naming the field path (``instances[2].endpoints[0].ip``), its size and the limit.
Bounds go by field name, with defaults for the rest, so a new field is bounded without anyone
remembering to add it. The whole message is also bounded by the server's max receive size
(`ServerConfig.max_receive_message_bytes`).
"""

from __future__ import annotations

import grpc
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

# Ids and names: request ids, pod and node names, addresses, models, device ids.
MAX_ID_CHARS = 256
# Free text: evidence, fault_info, ft_error, messages, reasons.
MAX_TEXT_CHARS = 16 * 1024
# Original DP ranks of one instance (NodeManagerConfig.dp_size ≤ 4096).
MAX_RANKS = 4096

STRING_LIMITS: dict[str, int] = {
    "evidence": MAX_TEXT_CHARS,
    "fault_info": MAX_TEXT_CHARS,
    "ft_error": MAX_TEXT_CHARS,
    "message": MAX_TEXT_CHARS,
    "reason": MAX_TEXT_CHARS,
    "detail": MAX_TEXT_CHARS,
    "request_body": MAX_TEXT_CHARS,
    "error": MAX_TEXT_CHARS,
    "fault_code": 4096,  # comma-joined hex codes
}
DEFAULT_STRING_LIMIT = MAX_ID_CHARS

REPEATED_LIMITS: dict[str, int] = {
    "instances": 1024,
    "pods": 1024,
    "device_infos": 64,
    "instance_ids": 1024,
    "reports": 64,  # software fault reports of one pod in one call
}
# Rank lists (endpoint_ids, removed_dp_ranks, retired_ids, alive_endpoint_ids, mask, ...), endpoints.
DEFAULT_REPEATED_LIMIT = MAX_RANKS


class FieldBoundError(ValueError):
    """A field exceeds its bound; `path` names it."""

    def __init__(self, path: str, message: str) -> None:
        self.path = path
        super().__init__(f"field {path}: {message}")


_SIZED = (FieldDescriptor.TYPE_STRING, FieldDescriptor.TYPE_BYTES)


def _check_sized(field: FieldDescriptor, value: object, prefix: str, name: str) -> None:
    """A string or bytes value against its bound; the path is built only for the error (heartbeats
    are checked at fleet rate)."""
    limit = STRING_LIMITS.get(field.name, DEFAULT_STRING_LIMIT)
    size = len(value)  # type: ignore[arg-type]
    if size > limit:
        unit = "characters" if field.type == FieldDescriptor.TYPE_STRING else "bytes"
        raise FieldBoundError(f"{prefix}{name}", f"{size} {unit} exceeds the limit of {limit}")


def check_bounds(msg: Message, prefix: str = "") -> None:
    """Raises FieldBoundError for the first field (in declaration order) above its bound."""
    for field, value in msg.ListFields():
        if field.is_repeated:
            limit = REPEATED_LIMITS.get(field.name, DEFAULT_REPEATED_LIMIT)
            if len(value) > limit:
                raise FieldBoundError(f"{prefix}{field.name}", f"{len(value)} entries exceed the limit of {limit}")
            if field.message_type is not None and field.message_type.GetOptions().map_entry:
                value_field = field.message_type.fields_by_name["value"]
                for key, item in value.items():
                    if value_field.message_type is not None:
                        check_bounds(item, f"{prefix}{field.name}[{key!r}].")
                    elif value_field.type in _SIZED:
                        _check_sized(value_field, item, prefix, f"{field.name}[{key!r}]")
            elif field.message_type is not None:
                for i, item in enumerate(value):
                    check_bounds(item, f"{prefix}{field.name}[{i}].")
            elif field.type in _SIZED:
                for i, item in enumerate(value):
                    _check_sized(field, item, prefix, f"{field.name}[{i}]")
        elif field.message_type is not None:
            check_bounds(value, f"{prefix}{field.name}.")
        elif field.type in _SIZED:
            _check_sized(field, value, prefix, field.name)


async def check_request(request: Message, context: grpc.aio.ServicerContext) -> None:
    """The servicers' first line: INVALID_ARGUMENT naming the field when a bound is exceeded."""
    try:
        check_bounds(request)
    except FieldBoundError as exc:
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
