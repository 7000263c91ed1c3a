"""A MindCluster ConfigMap, in any shape it arrives in → the parser of its kind. Pure.

Either document MindCluster writes per node: the device plugin's `kube-system/mindx-dl-deviceinfo-<node>`
(`device_info`) or NodeD's `mindx-dl/mindx-dl-nodeinfo-<node>` (`node_info`). Each arrives as the
Kubernetes object, its data mapping, the content of one mounted key file, or a JSON/YAML text of any
of these; the node and the kind come from the caller, else from the object's name, else from the keys.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import yaml

from motor.controller.hardware.formats.device_info import parse_device_info
from motor.controller.hardware.formats.names import (
    CONFIGMAP_NAME_PREFIX,
    DEVICE_INFO,
    DEVICE_INFO_KEY,
    NODE_INFO,
    NODEINFO_KEY,
    ParseResult,
    document_kind,
)
from motor.controller.hardware.formats.node_info import parse_nodeinfo


def parse_configmap(
    doc: Mapping[str, Any] | str | bytes, node_name: str | None = None, source: str = "configmap",
    kind: str | None = None,
) -> ParseResult:
    """A device-info or node-info ConfigMap → (faults, problems).

    `doc` is the Kubernetes object (dict with metadata and data), just its data mapping, the
    content of a mounted key file (`DeviceInfoCfg` or `NodeInfo`), or a JSON/YAML text of any of
    these. The node and the kind come from `node_name` / `kind` (DEVICE_INFO, NODE_INFO), else from
    the object's name, else from the keys.
    """
    label = f"{CONFIGMAP_NAME_PREFIX}{node_name}" if node_name else source
    if isinstance(doc, bytes):
        try:
            doc = doc.decode("utf-8")
        except UnicodeDecodeError as exc:
            return ParseResult([], [f"{label}: not UTF-8 text ({exc})"])
    if isinstance(doc, str):
        decoded = _decode_text(doc)
        if isinstance(decoded, str):
            return ParseResult([], [f"{label}: {decoded}"])
        doc = decoded
    if not isinstance(doc, Mapping):
        return ParseResult([], [f"{label}: expected a ConfigMap, its data or DeviceInfoCfg, got {type(doc).__name__}"])

    data: Mapping[str, Any]
    name: str | None = None
    if "DeviceInfo" in doc:
        data = {DEVICE_INFO_KEY: doc}
    elif isinstance(doc.get(NODEINFO_KEY), Mapping):
        data = {NODEINFO_KEY: doc}  # the NodeInfo key's value, decoded
    elif "data" in doc and ("metadata" in doc or "kind" in doc):
        meta = doc.get("metadata") or {}
        raw_name = meta.get("name") if isinstance(meta, Mapping) else None
        if isinstance(raw_name, str):
            name = label = raw_name
        raw = doc.get("data") or {}
        if not isinstance(raw, Mapping):
            return ParseResult([], [f"{label}: data is {type(raw).__name__}, not a mapping"])
        data = raw
    else:
        data = doc
    named = document_kind(name) if name else None
    if named is not None:
        kind = kind or named[0]
        node_name = node_name or named[1]
    if kind is None:
        kind = NODE_INFO if NODEINFO_KEY in data and DEVICE_INFO_KEY not in data else DEVICE_INFO
    if not node_name:
        return ParseResult([], [(f"{label}: no node name (neither given nor a {CONFIGMAP_NAME_PREFIX}<node> or "
                                 "mindx-dl-nodeinfo-<node> name)")])
    if kind == NODE_INFO:
        return parse_nodeinfo(data, node_name, source, label if name else "")
    return parse_device_info(data, node_name, source, "" if label == source else label)


def _decode_text(text: str) -> Any:
    """JSON (what the device plugin writes) or YAML (a `kubectl get -o yaml` dump); a str is an error."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        json_error = f"not JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        return json_error
    return value if isinstance(value, Mapping) else json_error


__all__ = ["ParseResult", "parse_configmap"]
