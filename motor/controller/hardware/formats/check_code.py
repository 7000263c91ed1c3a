"""The CheckCodes MindCluster writes beside its documents, to tell an edited or truncated one. Pure.

Both are `MakeDataHash`: sha256 hex of Go's `json.Marshal` of a struct —
- device plugin: `NodeDeviceInfoCache.CheckCode` over `DeviceInfo` (NodeDeviceInfo{DeviceList, UpdateTime});
- NodeD: `NodeInfoCM.CheckCode` over `NodeInfo` (FaultDevInfo{FaultDevList, NodeStatus}; NodeD
  before 2025 had HeartbeatTime and HeartbeatInterval between them).

Go writes struct fields in declaration order, map keys sorted, no spaces, and escapes strings its
own way (`go_json`), so the digest is over Go's bytes, not Python's.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

# Struct field orders (Go declaration order) of the hashed structs.
DEVICE_INFO_FIELDS = ("DeviceList", "UpdateTime")
FAULT_DEV_INFO_FIELDS = ("FaultDevList", "HeartbeatTime", "HeartbeatInterval", "NodeStatus")
FAULT_DEV_FIELDS = ("DeviceType", "DeviceId", "FaultCode", "FaultLevel")

_SHORT_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
# encoding/json's HTML-safe and JavaScript-safe escapes.
_GO_U_ESCAPES = frozenset("<>&\u2028\u2029")


def go_string(text: str) -> str:
    """A string as Go's encoding/json writes it (HTML escaping on, as json.Marshal does)."""
    out = ['"']
    for char in text:
        if char in _SHORT_ESCAPES:
            out.append(_SHORT_ESCAPES[char])
        elif char < " " or char in _GO_U_ESCAPES:
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(char)
    out.append('"')
    return "".join(out)


def go_json(value: Any, struct_fields: Mapping[str, Sequence[str]] | None = None, path: str = "") -> str:
    """Go's json.Marshal of a decoded document.

    A mapping is a Go map (keys sorted) unless `struct_fields[path]` names its struct's field order
    (present keys in that order, unknown ones after them sorted: a mismatch then tells the document
    is not what the plugin wrote). Paths: "" for the top, "Key" below it, "Key[]" for list items.
    """
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{path or 'value'}={value!r} is not a JSON number")
        return str(int(value)) if value.is_integer() else repr(value)
    if isinstance(value, str):
        return go_string(value)
    if isinstance(value, Mapping):
        order = (struct_fields or {}).get(path)
        if order is None:
            keys = sorted(value)
        else:
            keys = [k for k in order if k in value] + sorted(k for k in value if k not in order)
        parts = []
        for key in keys:
            child = f"{path}.{key}" if path else str(key)
            parts.append(go_string(str(key)) + ":" + go_json(value[key], struct_fields, child))
        return "{" + ",".join(parts) + "}"
    if isinstance(value, Sequence):
        return "[" + ",".join(go_json(item, struct_fields, f"{path}[]") for item in value) + "]"
    raise ValueError(f"{path or 'value'} of type {type(value).__name__} is not JSON")


def sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def device_info_check_code(device_info: Mapping[str, Any]) -> str:
    """The device plugin's CheckCode of a DeviceInfo object (DeviceList is a Go map: sorted keys)."""
    payload = {"DeviceList": device_info.get("DeviceList") or {}, "UpdateTime": device_info.get("UpdateTime", 0)}
    return sha256_hex(go_json(payload, {"": DEVICE_INFO_FIELDS}))


def node_info_check_code(node_info: Mapping[str, Any]) -> str:
    """NodeD's CheckCode of a NodeInfo (FaultDevInfo) object, in the field order of its version."""
    return sha256_hex(go_json(node_info, {"": FAULT_DEV_INFO_FIELDS, "FaultDevList[]": FAULT_DEV_FIELDS}))


def decode_json_text(text: str) -> tuple[Any, str]:
    """(value, "") or (None, what is wrong): for the JSON strings nested in MindCluster's documents."""
    try:
        return json.loads(text), ""
    except json.JSONDecodeError as exc:
        return None, f"not JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"
