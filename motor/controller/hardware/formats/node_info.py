"""NodeD's node-info ConfigMap → whole-node HardwareFaults. Pure.

`mindx-dl/mindx-dl-nodeinfo-<node>`, written by NodeD's ConfigMapReporter (deleted again when the
node has no fault and is Healthy):

    data:
      NodeInfo: '{"NodeInfo":{"FaultDevList":[{"DeviceType":"CPU","DeviceId":0,"FaultCode":["0C000025"],
                  "FaultLevel":"SeparateFault"}],"NodeStatus":"UnHealthy"},"CheckCode":"<sha256 hex>"}'
      updateTime: "2025-10-09T09:30:00Z"

Go structs `NodeInfoCM{NodeInfo FaultDevInfo; CheckCode}`, `FaultDevInfo{FaultDevList []*FaultDev;
NodeStatus}` (before 2025 also HeartbeatTime, HeartbeatInterval: read for the CheckCode only; node
liveness comes from the Kubernetes Node), `FaultDev{DeviceType; DeviceId int64; FaultCode []string;
FaultLevel}`. DeviceType is the BMC's device class (CPU, Memory, Disk, PSU, Fan, …, NPU) and
DeviceId the BMC's index of it (IPMI events), not a device plugin card id: every NodeD fault is the
node's (npu_name "": RFC §4.2's empty card name, every rank of the node), never guessed onto a card.
FaultLevel: NotHandleFault, PreSeparateFault, SeparateFault (`levels`). NodeStatus: Healthy,
PreSeparate, UnHealthy — the worst level of the list, cross-checked: an UnHealthy node without a
SeparateFault entry is still a node fault (L6).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from motor.controller.hardware import levels
from motor.controller.hardware.formats.check_code import node_info_check_code
from motor.controller.hardware.formats.names import (
    FAULT_TYPE_NODED,
    NODEINFO_KEY,
    NODEINFO_NAME_PREFIX,
    ParseResult,
    is_number,
)
from motor.controller.hardware.model import FaultKey, HardwareFault, HardwareFaultError, normalize_fault_codes

NODED_NODE_STATUSES = {"Healthy": levels.L1, "PreSeparate": levels.L1, "UnHealthy": levels.L6}
NODE_STATUS_CODE = "NodeStatusUnHealthy"


def parse_nodeinfo(data: Mapping[str, Any], node: str, source: str = "nodeinfo", label: str = "") -> ParseResult:
    """The ConfigMap's data (or the NodeInfo key's value alone) → (faults, problems)."""
    label = label or f"{NODEINFO_NAME_PREFIX}{node}"
    raw = data.get(NODEINFO_KEY) if isinstance(data, Mapping) else None
    if raw is None:
        return ParseResult([], [f"{label}: no {NODEINFO_KEY} key (keys: {sorted(map(str, data))})"])
    where = f"{label}: {NODEINFO_KEY}"
    if isinstance(raw, str):
        try:
            cm = json.loads(raw)
        except json.JSONDecodeError as exc:
            return ParseResult([], [f"{where} is not JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"])
    else:
        cm = raw
    if not isinstance(cm, Mapping):
        return ParseResult([], [f"{where} is {type(cm).__name__}, not an object"])
    info = cm.get("NodeInfo")
    if not isinstance(info, Mapping):
        return ParseResult([], [f"{where}.NodeInfo is missing or not an object"])
    problems: list[str] = []
    check_code = cm.get("CheckCode")
    if isinstance(check_code, str) and check_code:
        try:
            computed = node_info_check_code(info)
        except ValueError as exc:
            computed = f"<{exc}>"
        if computed != check_code:
            problems.append(f"{where}.CheckCode={check_code[:12]}… does not match the content ({computed[:12]}…): "
                            "edited or truncated; its entries are still used")
    status = info.get("NodeStatus", "")
    if not isinstance(status, str) or status not in NODED_NODE_STATUSES:
        problems.append(f"{where}.NodeInfo.NodeStatus={status!r} is not one of {sorted(NODED_NODE_STATUSES)}")
        status = ""
    dev_list = info.get("FaultDevList")
    if dev_list is None:
        dev_list = []
    if not isinstance(dev_list, list):
        return ParseResult([], problems + [f"{where}.NodeInfo.FaultDevList={dev_list!r} is not a list"])
    faults: dict[FaultKey, HardwareFault] = {}
    for index, dev in enumerate(dev_list):
        fault, dev_problems = _fault_dev(dev, f"{where}.NodeInfo.FaultDevList[{index}]", node, source)
        problems += dev_problems
        if fault is not None:
            known = faults.get(fault.key)
            # Go's map order makes FaultDevList's order change between reports: the pick must not.
            if known is None or (fault.level, fault.fault_type) > (known.level, known.fault_type):
                faults[fault.key] = fault
    status_level = NODED_NODE_STATUSES.get(status)
    if status_level == levels.L6 and not any(f.level >= levels.L6 for f in faults.values()):
        fault = HardwareFault(node, "", (NODE_STATUS_CODE,), levels.L6, FAULT_TYPE_NODED, status, 0.0, source)
        faults[fault.key] = fault
        problems.append(f"{where}.NodeInfo.NodeStatus='UnHealthy' without a SeparateFault entry: taken as a node "
                        "fault (L6)")
    ordered = sorted(faults.values(), key=lambda f: (f.fault_codes, f.fault_type))
    return ParseResult(ordered, problems)


def _fault_dev(dev: Any, where: str, node: str, source: str) -> tuple[HardwareFault | None, list[str]]:
    if not isinstance(dev, Mapping):
        return None, [f"{where} is {type(dev).__name__}, not an object; skipped"]
    device_type = dev.get("DeviceType", "")
    device_id = dev.get("DeviceId", 0)
    if not isinstance(device_type, str):
        return None, [f"{where}: DeviceType={device_type!r} is not a string; skipped"]
    if not (is_number(device_id) and float(device_id).is_integer()):
        return None, [f"{where}: DeviceId={device_id!r} is not an integer; skipped"]
    where = f"{where} ({device_type} {int(device_id)})"
    raw_codes = dev.get("FaultCode")
    if raw_codes is None:
        raw_codes = []
    if not isinstance(raw_codes, list) or not all(isinstance(c, str) for c in raw_codes):
        return None, [f"{where}: FaultCode={raw_codes!r} is not a list of strings; skipped"]
    codes, bad = normalize_fault_codes(",".join(raw_codes))
    problems = [f"{where}: {p}" for p in bad]
    if not codes:
        return None, problems + [f"{where}: no usable FaultCode; skipped"]
    name = dev.get("FaultLevel", "")
    if not isinstance(name, str):
        return None, problems + [f"{where}: FaultLevel={name!r} is not a string; skipped"]
    level = levels.level_from_name(name)
    if level is None:
        return None, problems + [f"{where}: FaultLevel={name!r} is not a NodeD level; skipped"]
    try:
        fault = HardwareFault(
            node_name=node,
            npu_name="",
            fault_codes=codes,
            level=level,
            fault_type=f"{FAULT_TYPE_NODED}:{device_type}",
            fault_handling=name.strip(),
            fault_time_unix_sec=0.0,
            source=source,
        )
    except HardwareFaultError as exc:
        return None, problems + [f"{where}: {exc}; skipped"]
    return fault, problems
