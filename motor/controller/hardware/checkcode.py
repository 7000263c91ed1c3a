"""The device plugin's CheckCode over DeviceInfo, to tell an edited or truncated ConfigMap. Pure."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

# Go's encoding/json escapes these inside strings; the digest is over Go's bytes, not Python's.
_GO_ESCAPES = (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028"), ("\u2029", "\\u2029"))


def device_info_check_code(device_info: Mapping[str, Any]) -> str:
    """CheckCode as the device plugin computes it: sha256 hex of Go's json.Marshal(DeviceInfo).

    Go marshals the struct fields in order (DeviceList, UpdateTime), map keys sorted, no spaces,
    and escapes <, >, & and U+2028/U+2029 inside strings.
    """
    device_list = device_info.get("DeviceList") or {}
    payload = {"DeviceList": dict(sorted(device_list.items())), "UpdateTime": device_info.get("UpdateTime", 0)}
    text = json.dumps(payload, separators=(",", ":"), ensure_ascii=False)
    for char, escaped in _GO_ESCAPES:
        text = text.replace(char, escaped)
    return hashlib.sha256(text.encode()).hexdigest()
