"""MindCluster device-info ConfigMaps and Kubernetes Nodes → HardwareFaults. Pure.

The format (Ascend Device Plugin, one ConfigMap per node, `kube-system/mindx-dl-deviceinfo-<node>`):

    data:
      DeviceInfoCfg: '{"DeviceInfo":{"DeviceList":{"huawei.com/Ascend910":"Ascend910-0,…",
                       "huawei.com/Ascend910-Fault":"[{…},{…}]",        ← a JSON string in JSON
                       "huawei.com/Ascend910-Unhealthy":"Ascend910-4", …},
                       "UpdateTime":1744182144},                          ← seconds
                       "SuperPodID":-2,"ServerIndex":-2,"CheckCode":"<sha256 hex>"}'
      ManuallySeparateNPU: "Ascend910-1"        ← cards isolated until a person releases them
      UpgradeFaultReason: '{"Ascend910-1":[{"fault_code":…,"fault_level":…,…}]}'

Each entry of the `…-Fault` list: fault_type (CardUnhealthy | CardNetworkUnhealthy | NodeUnhealthy
| PublicFault), npu_name ("" for a node fault), large_model_fault_level / fault_level /
fault_handling (same meaning; fault_handling is the recommended one; empty for a node fault),
fault_code (comma-joined hex, or "Disconnected" / "heartbeatTimeOut"), and
fault_time_and_level_map {code: {fault_time (milliseconds), fault_level}}. Newer hardware names the
resource `huawei.com/npu` instead of `huawei.com/Ascend910`, so every DeviceList key ending in
`-Fault` is read. CheckCode is sha256 over Go's json.Marshal of DeviceInfo; a mismatch is reported
but the entries are still used (losing a real fault is worse than trusting an edited document).

Whatever is malformed is reported in `problems` (naming the key or entry and what was wrong) and
skipped; every well-formed entry of the same document is kept.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any, NamedTuple

import yaml

from motor.controller.hardware import levels
from motor.controller.hardware.model import HardwareFault, HardwareFaultError, normalize_fault_codes

CONFIGMAP_NAMESPACE = "kube-system"
CONFIGMAP_NAME_PREFIX = "mindx-dl-deviceinfo-"
DEVICE_INFO_KEY = "DeviceInfoCfg"
MANUALLY_SEPARATE_KEY = "ManuallySeparateNPU"
UPGRADE_REASON_KEY = "UpgradeFaultReason"
FAULT_LIST_SUFFIX = "-Fault"

FAULT_TYPE_CARD = "CardUnhealthy"
FAULT_TYPE_CARD_NETWORK = "CardNetworkUnhealthy"
FAULT_TYPE_NODE = "NodeUnhealthy"
FAULT_TYPE_MANUALLY_SEPARATED = "ManuallySeparateNPU"
NODE_NOT_READY_CODE = "NodeNotReady"

# A node fault in the device list has no handling level (documented as empty). The node's state is
# lost (heartbeatTimeOut): every card on it is gone for the running service, so it is L6.
NODE_FAULT_LEVEL = levels.L6
# A node whose Ready condition is False/Unknown: kubelet lost, every card unusable → L6 as well.
NODE_NOT_READY_LEVEL = levels.L6

# Field order in which the level is read; the documentation recommends fault_handling.
_LEVEL_FIELDS = ("fault_handling", "fault_level", "large_model_fault_level")
_MS_PER_SEC = 1000.0


class ParseResult(NamedTuple):
    faults: list[HardwareFault]
    problems: list[str]


def node_from_configmap_name(name: str) -> str | None:
    """'mindx-dl-deviceinfo-node1' → 'node1'; None for any other name."""
    if name.startswith(CONFIGMAP_NAME_PREFIX) and len(name) > len(CONFIGMAP_NAME_PREFIX):
        return name[len(CONFIGMAP_NAME_PREFIX) :]
    return None


def device_info_check_code(device_info: Mapping[str, Any]) -> str:
    """CheckCode as the device plugin computes it: sha256 hex of Go's json.Marshal(DeviceInfo).

    Go marshals the struct fields in order (DeviceList, UpdateTime), map keys sorted, no spaces,
    and escapes <, >, & and U+2028/U+2029 inside strings.
    """
    device_list = device_info.get("DeviceList") or {}
    payload = {"DeviceList": dict(sorted(device_list.items())), "UpdateTime": device_info.get("UpdateTime", 0)}
    text = json.dumps(payload, separators=(",", ":"), ensure_ascii=False)
    for char, escaped in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):
        text = text.replace(char, escaped)
    return hashlib.sha256(text.encode()).hexdigest()


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

    faults: dict[tuple[tuple[str, ...], str, str], HardwareFault] = {}
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


def parse_node(node_obj: Mapping[str, Any], source: str = "k8s", level: int = NODE_NOT_READY_LEVEL) -> ParseResult:
    """A Kubernetes Node (as `kubectl get node -o json` shows it) → a whole-node fault when NotReady.

    Ready=False or Ready=Unknown (the node controller's "kubelet stopped posting status") both mean
    NotReady. No Ready condition yet (a node still registering) is not a fault.
    """
    meta = node_obj.get("metadata") if isinstance(node_obj, Mapping) else None
    name = meta.get("name") if isinstance(meta, Mapping) else None
    if not isinstance(name, str) or not name:
        return ParseResult([], [f"node object has no metadata.name ({_short(node_obj)})"])
    status = node_obj.get("status") or {}
    conditions = status.get("conditions") if isinstance(status, Mapping) else None
    if conditions is None:
        return ParseResult([], [])
    if not isinstance(conditions, list):
        return ParseResult([], [f"node {name}: status.conditions is {type(conditions).__name__}, not a list"])
    ready = [c for c in conditions if isinstance(c, Mapping) and c.get("type") == "Ready"]
    if not ready:
        return ParseResult([], [])
    cond = ready[-1]
    state = cond.get("status")
    if state == "True":
        return ParseResult([], [])
    if state not in ("False", "Unknown"):
        return ParseResult([], [f"node {name}: Ready condition status={state!r} is not True/False/Unknown"])
    problems: list[str] = []
    when_sec = 0.0
    raw_time = cond.get("lastTransitionTime")
    if isinstance(raw_time, datetime):
        when_sec = raw_time.timestamp()
    elif isinstance(raw_time, str) and raw_time:
        try:
            when_sec = datetime.fromisoformat(raw_time.replace("Z", "+00:00")).timestamp()
        except ValueError:
            problems.append(f"node {name}: Ready lastTransitionTime={raw_time!r} is not an ISO time; fault time left 0")
    fault = HardwareFault(
        node_name=name,
        npu_name="",
        fault_codes=(NODE_NOT_READY_CODE,),
        level=level,
        fault_type=FAULT_TYPE_NODE,
        fault_handling="",
        fault_time_unix_sec=max(when_sec, 0.0),
        source=source,
    )
    return ParseResult([fault], problems)


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
    if raw_update is not None and not (_is_number(raw_update) and raw_update >= 0):
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
        entries, entry_problems = _decode_fault_list(device_list[key], f'{where}.DeviceInfo.DeviceList["{key}"]')
        problems += entry_problems
        for index, entry in enumerate(entries):
            entry_where = f'{where}.DeviceInfo.DeviceList["{key}"][{index}]'
            fault, entry_problems = _parse_fault_entry(entry, entry_where, node, source)
            problems += entry_problems
            if fault is not None:
                faults.append(fault)
    return faults, problems


def _decode_fault_list(value: Any, where: str) -> tuple[list[Any], list[str]]:
    if isinstance(value, str):
        if not value.strip():
            return [], []
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            return [], [f"{where} is not a JSON array ({exc.msg} at column {exc.colno})"]
    if value is None:
        return [], []
    if not isinstance(value, list):
        return [], [f"{where} is {type(value).__name__}, not a list of faults"]
    return value, []


def _parse_fault_entry(
    entry: Any, where: str, node: str, source: str
) -> tuple[HardwareFault | None, list[str]]:
    if not isinstance(entry, Mapping):
        return None, [f"{where} is {type(entry).__name__}, not an object; skipped"]
    npu_name = entry.get("npu_name", "")
    if not isinstance(npu_name, str):
        return None, [f"{where}: npu_name={npu_name!r} is not a string; skipped"]
    npu_name = npu_name.strip()
    where = f"{where} (npu_name={npu_name!r})" if npu_name else where
    fault_type = entry.get("fault_type", "")
    if not isinstance(fault_type, str):
        return None, [f"{where}: fault_type={fault_type!r} is not a string; skipped"]
    problems: list[str] = []

    times_ms, map_levels, map_codes, map_problems = _parse_time_map(entry.get("fault_time_and_level_map"), where)
    problems += map_problems

    raw_codes = entry.get("fault_code", "")
    if not isinstance(raw_codes, str):
        return None, problems + [f"{where}: fault_code={raw_codes!r} is not a comma-joined string; skipped"]
    codes, code_problems = normalize_fault_codes(raw_codes)
    problems += [f"{where}: {p}" for p in code_problems]
    if not codes:
        codes = tuple(sorted(map_codes))
    if not codes:
        return None, problems + [f"{where}: no usable fault_code; skipped"]

    handling = ""
    level: int | None = None
    for field_name in _LEVEL_FIELDS:
        value = entry.get(field_name, "")
        if not isinstance(value, str):
            return None, problems + [f"{where}: {field_name}={value!r} is not a string; skipped"]
        if not value.strip():
            continue
        if levels.is_healthy_name(value):
            return None, problems
        level = levels.level_from_name(value)
        if level is None:
            return None, problems + [f"{where}: {field_name}={value!r} is not a known MindCluster level; skipped"]
        handling = value.strip()
        break
    if level is None:
        if fault_type == FAULT_TYPE_NODE:
            level = NODE_FAULT_LEVEL
        elif map_levels:
            level = max(map_levels)
        else:
            return None, problems + [f"{where}: no fault_handling/fault_level/large_model_fault_level; skipped"]
    # Without per-code times the fault time stays 0 ("not said"): UpdateTime changes on every
    # refresh of the document and would make an unchanged fault look new each time.
    when_sec = max(times_ms) / _MS_PER_SEC if times_ms else 0.0
    try:
        fault = HardwareFault(
            node_name=node,
            npu_name=npu_name,
            fault_codes=codes,
            level=level,
            fault_type=fault_type,
            fault_handling=handling,
            fault_time_unix_sec=when_sec,
            source=source,
        )
    except HardwareFaultError as exc:
        return None, problems + [f"{where}: {exc}; skipped"]
    return fault, problems


def _parse_time_map(value: Any, where: str) -> tuple[list[int], list[int], set[str], list[str]]:
    """fault_time_and_level_map → (fault times in ms, levels, codes, problems); bad items dropped."""
    if value is None or value == {}:
        return [], [], set(), []
    if not isinstance(value, Mapping):
        return [], [], set(), [f"{where}: fault_time_and_level_map is {type(value).__name__}, not an object; ignored"]
    times: list[int] = []
    found_levels: list[int] = []
    codes: set[str] = set()
    problems: list[str] = []
    for code, item in value.items():
        item_where = f"{where}: fault_time_and_level_map[{code!r}]"
        if not isinstance(item, Mapping):
            problems.append(f"{item_where} is not an object; ignored")
            continue
        normalized, code_problems = normalize_fault_codes(str(code))
        if code_problems or len(normalized) != 1:
            problems.append(f"{item_where}: key is not one fault code; ignored")
            continue
        codes.add(normalized[0])
        fault_time = item.get("fault_time")
        if _is_number(fault_time) and fault_time >= 0:
            times.append(int(fault_time))
        elif fault_time is not None:
            problems.append(f"{item_where}: fault_time={fault_time!r} is not milliseconds since the epoch")
        level_name = item.get("fault_level")
        if isinstance(level_name, str) and level_name:
            level = levels.level_from_name(level_name)
            if level is not None:
                found_levels.append(level)
            elif not levels.is_healthy_name(level_name):
                problems.append(f"{item_where}: fault_level={level_name!r} is not a known MindCluster level")
    return times, found_levels, codes, problems


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
                # No time of its own (UpdateTime changes on every refresh; see _parse_fault_entry).
                fault_time_unix_sec=0.0,
                source=source,
            )
        )
    return faults, []


def _keep_worst(faults: dict[tuple[tuple[str, ...], str, str], HardwareFault], fault: HardwareFault) -> None:
    """Two entries with one identity (e.g. under two resource names): keep the more severe, later one."""
    known = faults.get(fault.key)
    if known is None or (fault.level, fault.fault_time_unix_sec) > (known.level, known.fault_time_unix_sec):
        faults[fault.key] = fault


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


__all__ = [
    "CONFIGMAP_NAMESPACE",
    "CONFIGMAP_NAME_PREFIX",
    "DEVICE_INFO_KEY",
    "MANUALLY_SEPARATE_KEY",
    "UPGRADE_REASON_KEY",
    "ParseResult",
    "device_info_check_code",
    "node_from_configmap_name",
    "parse_configmap",
    "parse_node",
]
