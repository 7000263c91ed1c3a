"""MindCluster device-info ConfigMaps → HardwareFaults. Pure.

The format (Ascend Device Plugin, one ConfigMap per node, `kube-system/mindx-dl-deviceinfo-<node>`):

    data:
      DeviceInfoCfg: '{"DeviceInfo":{"DeviceList":{"huawei.com/Ascend910":"Ascend910-0,…",
                       "huawei.com/Ascend910-Fault":"[{…},{…}]",        ← a JSON string in JSON
                       "huawei.com/Ascend910-Unhealthy":"Ascend910-4", …},
                       "UpdateTime":1744182144},                          ← seconds
                       "SuperPodID":-2,"ServerIndex":-2,"CheckCode":"<sha256 hex>"}'
      ManuallySeparateNPU: "Ascend910-1"        ← cards isolated until a person releases them
      UpgradeFaultReason: '{"Ascend910-1":[{"fault_code":…,"fault_level":…,…}]}'

The entries of each `…-Fault` list are read by `fault_list`. Newer hardware names the resource
`huawei.com/npu` instead of `huawei.com/Ascend910`, so every DeviceList key ending in `-Fault` is
read. CheckCode (`checkcode`) is sha256 over Go's json.Marshal of DeviceInfo; a mismatch is reported
but the entries are still used (losing a real fault is worse than trusting an edited document).

Whatever is malformed is reported in `problems` (naming the key or entry and what was wrong) and
skipped; every well-formed entry of the same document is kept.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import yaml

from motor.controller.hardware import levels
from motor.controller.hardware.checkcode import device_info_check_code
from motor.controller.hardware.fault_list import decode_fault_list, parse_fault_entry
from motor.controller.hardware.formats import (
    CONFIGMAP_NAME_PREFIX,
    DEVICE_INFO_KEY,
    FAULT_LIST_SUFFIX,
    FAULT_TYPE_MANUALLY_SEPARATED,
    MANUALLY_SEPARATE_KEY,
    UPGRADE_REASON_KEY,
    ParseResult,
    is_number,
    node_from_configmap_name,
)
from motor.controller.hardware.model import FaultKey, HardwareFault, normalize_fault_codes


def parse_configmap(doc: Mapping[str, Any] | str | bytes, node_name: str | None = None, source: str = "configmap") -> ParseResult:
    """A device-info ConfigMap → (faults, problems).

    `doc` is the Kubernetes object (dict with metadata and data), just its data mapping, the
    content of a mounted `DeviceInfoCfg` key file, or a JSON/YAML text of any of these. The node
    comes from `node_name`, else from the object's name.
    """
    problems: list[str] = []
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
    if "DeviceInfo" in doc:
        data = {DEVICE_INFO_KEY: doc}
    elif "data" in doc and ("metadata" in doc or "kind" in doc):
        meta = doc.get("metadata") or {}
        name = meta.get("name") if isinstance(meta, Mapping) else None
        if node_name is None and isinstance(name, str):
            node_name = node_from_configmap_name(name)
        if isinstance(name, str):
            label = name
        raw = doc.get("data") or {}
        if not isinstance(raw, Mapping):
            return ParseResult([], [f"{label}: data is {type(raw).__name__}, not a mapping"])
        data = raw
    else:
        data = doc
    if not node_name:
        return ParseResult([], [f"{label}: no node name (neither given nor a {CONFIGMAP_NAME_PREFIX}<node> name)"])
    label = f"{CONFIGMAP_NAME_PREFIX}{node_name}" if label == source else label

    faults: dict[FaultKey, HardwareFault] = {}
    if DEVICE_INFO_KEY in data:
        found, found_problems = _parse_device_info_cfg(data[DEVICE_INFO_KEY], node_name, label, source)
        problems += found_problems
        for fault in found:
            _keep_worst(faults, fault)
    elif MANUALLY_SEPARATE_KEY not in data:
        problems.append(f"{label}: no {DEVICE_INFO_KEY} key (keys: {sorted(map(str, data))})")
    if MANUALLY_SEPARATE_KEY in data:
        reasons, reason_problems = _parse_upgrade_reasons(data.get(UPGRADE_REASON_KEY), label)
        problems += reason_problems
        found, found_problems = _parse_manually_separated(
            data[MANUALLY_SEPARATE_KEY], reasons, node_name, label, source
        )
        problems += found_problems
        for fault in found:
            _keep_worst(faults, fault)
    ordered = sorted(faults.values(), key=lambda f: (f.npu_name, f.fault_codes, f.fault_type))
    return ParseResult(ordered, problems)


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


def _parse_device_info_cfg(raw: Any, node: str, label: str, source: str) -> tuple[list[HardwareFault], list[str]]:
    where = f"{label}: {DEVICE_INFO_KEY}"
    if isinstance(raw, str):
        try:
            cfg = json.loads(raw)
        except json.JSONDecodeError as exc:
            return [], [f"{where} is not JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"]
    else:
        cfg = raw
    if not isinstance(cfg, Mapping):
        return [], [f"{where} is {type(cfg).__name__}, not an object"]
    info = cfg.get("DeviceInfo")
    if not isinstance(info, Mapping):
        return [], [f"{where}.DeviceInfo is missing or not an object"]
    problems: list[str] = []
    raw_update = info.get("UpdateTime")
    if raw_update is not None and not (is_number(raw_update) and raw_update >= 0):
        problems.append(f"{where}.DeviceInfo.UpdateTime={raw_update!r} is not a time in seconds")
    device_list = info.get("DeviceList")
    if not isinstance(device_list, Mapping):
        return [], problems + [f"{where}.DeviceInfo.DeviceList is missing or not an object"]
    check_code = cfg.get("CheckCode")
    if isinstance(check_code, str) and check_code and all(isinstance(v, str) for v in device_list.values()):
        computed = device_info_check_code(info)
        if computed != check_code:
            problems.append(
                f"{where}.CheckCode={check_code[:12]}… does not match the content ({computed[:12]}…): "
                "edited or truncated; its entries are still used"
            )
    faults: list[HardwareFault] = []
    fault_keys = sorted(k for k in device_list if isinstance(k, str) and k.endswith(FAULT_LIST_SUFFIX))
    for key in fault_keys:
        entries, entry_problems = decode_fault_list(device_list[key], f'{where}.DeviceInfo.DeviceList["{key}"]')
        problems += entry_problems
        for index, entry in enumerate(entries):
            entry_where = f'{where}.DeviceInfo.DeviceList["{key}"][{index}]'
            fault, entry_problems = parse_fault_entry(entry, entry_where, node, source)
            problems += entry_problems
            if fault is not None:
                faults.append(fault)
    return faults, problems


def _parse_upgrade_reasons(value: Any, label: str) -> tuple[dict[str, tuple[str, ...]], list[str]]:
    """UpgradeFaultReason → {card: codes that upgraded it}; informational, so problems only warn."""
    where = f"{label}: {UPGRADE_REASON_KEY}"
    if value is None or value == "":
        return {}, []
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            return {}, [f"{where} is not JSON ({exc.msg}); upgrade codes unknown"]
    if not isinstance(value, Mapping):
        return {}, [f"{where} is {type(value).__name__}, not an object; upgrade codes unknown"]
    result: dict[str, tuple[str, ...]] = {}
    problems: list[str] = []
    for card, reasons in value.items():
        if not isinstance(reasons, list):
            problems.append(f"{where}[{card!r}] is not a list; upgrade codes unknown")
            continue
        codes: set[str] = set()
        for reason in reasons:
            raw = reason.get("fault_code") if isinstance(reason, Mapping) else None
            if isinstance(raw, str):
                normalized, _ = normalize_fault_codes(raw)
                codes.update(normalized)
        result[str(card).strip()] = tuple(sorted(codes))
    return result, problems


def _parse_manually_separated(
    value: Any, reasons: Mapping[str, tuple[str, ...]], node: str, label: str, source: str
) -> tuple[list[HardwareFault], list[str]]:
    if not isinstance(value, str):
        return [], [f"{label}: {MANUALLY_SEPARATE_KEY}={value!r} is not a comma-joined string of card names"]
    faults = []
    for card in sorted({c.strip() for c in value.split(",") if c.strip()}):
        faults.append(
            HardwareFault(
                node_name=node,
                npu_name=card,
                fault_codes=reasons.get(card, ()),
                level=levels.LEVEL_BY_NAME[FAULT_TYPE_MANUALLY_SEPARATED],
                fault_type=FAULT_TYPE_MANUALLY_SEPARATED,
                fault_handling=FAULT_TYPE_MANUALLY_SEPARATED,
                # No time of its own (UpdateTime changes on every refresh; see fault_list).
                fault_time_unix_sec=0.0,
                source=source,
            )
        )
    return faults, []


def _keep_worst(faults: dict[FaultKey, HardwareFault], fault: HardwareFault) -> None:
    """Two entries with one identity (e.g. under two resource names): keep the more severe, later one."""
    known = faults.get(fault.key)
    if known is None or (fault.level, fault.fault_time_unix_sec) > (known.level, known.fault_time_unix_sec):
        faults[fault.key] = fault


__all__ = ["ParseResult", "parse_configmap"]
