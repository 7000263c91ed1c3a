"""Fault injection in MindCluster's real formats, for the demo tooling and tests.

`write_configmap_fault` lays out a device-info ConfigMap exactly as kubelet mounts one (key files
behind a `..data` symlink that is swapped atomically), so the DirectoryConfigMapSource reads what
it would read in a cluster; card faults go into DeviceInfoCfg's `-Fault` list (and the card lists),
a node fault into `SwitchInfoCfg` (`switch=True`); `write_nodeinfo_fault` does the same for NodeD's
`mindx-dl-nodeinfo-<node>` (node faults). `build_configmap` / `build_nodeinfo_configmap` give the
Kubernetes objects for watch tests or `kubectl apply`. (What `motorctl hw-fault` sends over the RPC is
`report_request.build_report_request`.) Documents are today's formats (CheckCodes included).
"""

from __future__ import annotations

import datetime
import json
import os
import re
import shutil
import tempfile
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from motor.controller.hardware import levels
from motor.controller.hardware.formats.check_code import device_info_check_code, node_info_check_code
from motor.controller.hardware.formats.names import (
    CONFIGMAP_NAME_PREFIX,
    CONFIGMAP_NAMESPACE,
    DEVICE_INFO_KEY,
    FAULT_LIST_SUFFIX,
    FAULT_TYPE_CARD,
    FAULT_TYPE_CARD_NETWORK,
    MANUALLY_SEPARATE_KEY,
    NETWORK_UNHEALTHY_SUFFIX,
    NODEINFO_KEY,
    NODEINFO_NAME_PREFIX,
    NODEINFO_NAMESPACE,
    NODEINFO_UPDATE_KEY,
    RECOVERING_SUFFIX,
    RESOURCE_ASCEND910,
    RESOURCE_NPU,
    SWITCH_INFO_KEY,
    UNHEALTHY_SUFFIX,
)
from motor.controller.hardware.injection.report_request import (
    NODED_DEVICE_TYPE,
    noded_handling_name,
    switch_handling_name,
)
from motor.controller.hardware.model import HardwareFault, HardwareFaultError

DEFAULT_RESOURCE = RESOURCE_ASCEND910
_DATA_LINK = "..data"
# Where a fault is published: the device plugin's card list, its switch info, or NodeD.


def resource_of_card(npu_name: str) -> str:
    """The DeviceList resource the device plugin files a card under (A5 cards are huawei.com/npu)."""
    if npu_name.startswith("npu-"):
        return RESOURCE_NPU
    if npu_name.startswith("Ascend310P-"):
        return "huawei.com/Ascend310P"
    if npu_name.startswith("Ascend310-"):
        return "huawei.com/Ascend310"
    return DEFAULT_RESOURCE


def fault_entry(fault: HardwareFault) -> dict[str, Any]:
    """One element of the `…-Fault` list (the plugin's DeviceFault), fields in its order."""
    if fault.whole_node:
        raise HardwareFaultError(f"fault {fault.describe()} has no card: the device plugin lists cards only "
                                 "(a node fault is published by NodeD or the switch)")
    handling = fault.fault_handling if fault.fault_handling in levels.DEVICE_PLUGIN_NAMES else levels.CANONICAL_NAME[fault.level]
    fault_time_ms = round(fault.fault_time_unix_sec * 1000)
    return {
        "fault_type": fault.fault_type if fault.fault_type in (FAULT_TYPE_CARD, FAULT_TYPE_CARD_NETWORK) else FAULT_TYPE_CARD,
        "npu_name": fault.npu_name,
        "large_model_fault_level": handling,
        "fault_level": handling,
        "fault_handling": handling,
        "fault_code": fault.fault_code,
        "fault_time_and_level_map": {
            code: {"fault_time": fault_time_ms, "fault_level": handling} for code in fault.fault_codes
        },
    }


def build_device_info_cfg(
    faults: Iterable[HardwareFault],
    *,
    cards: Iterable[str] = (),
    recovering: Iterable[str] = (),
    update_time_sec: float | None = None,
    resource: str | None = None,
    super_pod_id: int = -2,
    server_index: int = -2,
) -> str:
    """The `DeviceInfoCfg` value: DeviceInfo with its JSON-string fault list, plus a valid CheckCode.

    `cards` are the node's cards; those with a card fault of L2 or worse are listed unhealthy (network
    ones under -NetworkUnhealthy), `recovering` ones under -Recovering (and -Unhealthy, as a hot reset
    does), the rest available. The resource defaults to the first card's (`resource_of_card`).
    """
    faults = list(faults)
    recovering = set(recovering)
    named = [f.npu_name for f in faults if f.npu_name] + sorted(recovering) + list(cards)
    resource = resource or (resource_of_card(named[0]) if named else DEFAULT_RESOURCE)
    unhealthy = {f.npu_name for f in faults if f.npu_name and f.fault_type != FAULT_TYPE_CARD_NETWORK and f.level >= levels.L2}
    unhealthy |= recovering
    network = {f.npu_name for f in faults if f.npu_name and f.fault_type == FAULT_TYPE_CARD_NETWORK}
    all_cards = set(cards) | unhealthy | network
    device_list = {
        resource: ",".join(_card_order(all_cards - unhealthy - network)),
        resource + FAULT_LIST_SUFFIX: json.dumps([fault_entry(f) for f in faults], separators=(",", ":")),
        resource + NETWORK_UNHEALTHY_SUFFIX: ",".join(_card_order(network)),
        resource + RECOVERING_SUFFIX: ",".join(_card_order(recovering)),
        resource + UNHEALTHY_SUFFIX: ",".join(_card_order(unhealthy)),
    }
    device_info = {
        "DeviceList": dict(sorted(device_list.items())),
        "UpdateTime": int(time.time() if update_time_sec is None else update_time_sec),
    }
    doc = {
        "DeviceInfo": device_info,
        "SuperPodID": super_pod_id,
        "ServerIndex": server_index,
        "CheckCode": device_info_check_code(device_info),
    }
    return json.dumps(doc, separators=(",", ":"))


def build_switch_info(faults: Iterable[HardwareFault], *, update_time_sec: float | None = None) -> str:
    """The `SwitchInfoCfg` value (today's SwitchFaultInfo) for the node's switch faults (no card)."""
    faults = list(faults)
    for fault in faults:
        if not fault.whole_node:
            raise HardwareFaultError(f"fault {fault.describe()} names a card: a switch fault is the node's")
    events: list[str] = []
    time_map: dict[str, dict[str, Any]] = {}
    worst = max((f.level for f in faults), default=0)
    for port, fault in enumerate(faults):
        level_name = switch_handling_name(fault)
        raised_ms = round(fault.fault_time_unix_sec * 1000)
        for code in fault.fault_codes:
            alarm = int(code, 16) if re.fullmatch(r"[0-9A-Fa-f]{1,8}", code) else 0
            assembled = f"[0x{alarm:08x},na,cpu,na]"
            events.append(json.dumps({
                "EventType": alarm, "AssembledFaultCode": assembled, "PeerPortDevice": 1, "PeerPortId": port,
                "SwitchChipId": 0, "SwitchPortId": port, "Severity": 2, "Assertion": 1, "AlarmRaisedTime": raised_ms,
            }, separators=(",", ":")))
            time_map[f"{assembled}_0_{port}"] = {"fault_time": raised_ms, "fault_level": level_name}
    summary = next((switch_handling_name(f) for f in faults if f.level == worst), "")
    status = {"": "Healthy", "NotHandle": "Healthy", "SubHealthFault": "SubHealthy", "PreSeparate": "PreSeparate"}.get(
        summary, "UnHealthy")
    return json.dumps({
        "FaultCode": events, "FaultLevel": summary,
        "UpdateTime": int(time.time() if update_time_sec is None else update_time_sec),
        "NodeStatus": status, "FaultTimeAndLevelMap": time_map,
    }, separators=(",", ":"))


def configmap_data(
    faults: Iterable[HardwareFault], *, manually_separated: Iterable[str] = (), switch: bool = False, **cfg_kwargs: Any
) -> dict[str, str]:
    """Card faults into DeviceInfoCfg; node faults into SwitchInfoCfg (written with `switch` or when present)."""
    faults = list(faults)
    cards = [f for f in faults if not f.whole_node]
    node = [f for f in faults if f.whole_node]
    data = {
        DEVICE_INFO_KEY: build_device_info_cfg(cards, **cfg_kwargs),
        MANUALLY_SEPARATE_KEY: ",".join(_card_order(set(manually_separated))),
    }
    if switch or node:
        data[SWITCH_INFO_KEY] = build_switch_info(node, update_time_sec=cfg_kwargs.get("update_time_sec"))
    return data


def build_configmap(node: str, faults: Iterable[HardwareFault], **kwargs: Any) -> dict[str, Any]:
    """The Kubernetes ConfigMap object (as `kubectl get cm -o json` shows it)."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": CONFIGMAP_NAME_PREFIX + node, "namespace": CONFIGMAP_NAMESPACE},
        "data": configmap_data(faults, **kwargs),
    }


def build_nodeinfo(faults: Iterable[HardwareFault], *, device_type: str = NODED_DEVICE_TYPE) -> str:
    """NodeD's `NodeInfo` value (NodeInfoCM: FaultDevInfo and its CheckCode) for node faults."""
    dev_list = []
    worst = levels.L1
    for device_id, fault in enumerate(faults):
        if not fault.whole_node:
            raise HardwareFaultError(f"fault {fault.describe()} names a card: NodeD reports the node's devices")
        dev_list.append({"DeviceType": device_type, "DeviceId": device_id, "FaultCode": list(fault.fault_codes),
                         "FaultLevel": noded_handling_name(fault)})
        worst = max(worst, fault.level)
    status = "UnHealthy" if worst >= levels.L6 else ("PreSeparate" if any(d["FaultLevel"] == "PreSeparateFault" for d in dev_list)
                                                     else "Healthy")
    info = {"FaultDevList": dev_list, "NodeStatus": status}
    return json.dumps({"NodeInfo": info, "CheckCode": node_info_check_code(info)}, separators=(",", ":"))


def nodeinfo_data(faults: Iterable[HardwareFault], *, updated: datetime.datetime | None = None, **kwargs: Any) -> dict[str, str]:
    when = updated or datetime.datetime.now(datetime.UTC)
    return {NODEINFO_KEY: build_nodeinfo(faults, **kwargs), NODEINFO_UPDATE_KEY: when.strftime("%Y-%m-%dT%H:%M:%SZ")}


def build_nodeinfo_configmap(node: str, faults: Iterable[HardwareFault], **kwargs: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": NODEINFO_NAME_PREFIX + node, "namespace": NODEINFO_NAMESPACE,
                     "labels": {"mx-consumer-cim": "true"}},
        "data": nodeinfo_data(faults, **kwargs),
    }


def write_configmap_fault(
    directory: str | os.PathLike[str], node: str, faults: Iterable[HardwareFault], **kwargs: Any
) -> Path:
    """Writes the node's whole device-info state as a kubelet-mounted ConfigMap; returns its folder.

    The list replaces what was there (an empty list is the recovery). Layout, as kubelet's atomic
    writer makes it: `<dir>/mindx-dl-deviceinfo-<node>/{DeviceInfoCfg,ManuallySeparateNPU,…}` are
    symlinks into `..data/`, itself a symlink to a timestamped folder that is swapped by rename.
    """
    faults = _on_node(node, faults)
    return _write_mount(Path(directory) / (CONFIGMAP_NAME_PREFIX + node), configmap_data(faults, **kwargs))


def write_nodeinfo_fault(
    directory: str | os.PathLike[str], node: str, faults: Iterable[HardwareFault], **kwargs: Any
) -> Path:
    """Writes NodeD's `mindx-dl-nodeinfo-<node>` as a kubelet-mounted ConfigMap; no faults: removed
    (NodeD deletes it when the node is healthy)."""
    faults = _on_node(node, faults)
    target = Path(directory) / (NODEINFO_NAME_PREFIX + node)
    if not faults:
        shutil.rmtree(target, ignore_errors=True)
        return target
    return _write_mount(target, nodeinfo_data(faults, **kwargs))


def _on_node(node: str, faults: Iterable[HardwareFault]) -> list[HardwareFault]:
    faults = list(faults)
    for fault in faults:
        if fault.node_name != node:
            raise HardwareFaultError(f"fault {fault.describe()} is not on node {node}")
    return faults


def _write_mount(target: Path, data: Mapping[str, str]) -> Path:
    target.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y_%m_%d_%H_%M_%S", time.gmtime())
    fresh = Path(tempfile.mkdtemp(prefix=f"..{stamp}.", dir=target))
    for key, value in data.items():
        (fresh / key).write_text(value)
    data_link = target / _DATA_LINK
    old = os.readlink(data_link) if data_link.is_symlink() else None
    tmp_link = target / f"{_DATA_LINK}_tmp"
    if tmp_link.is_symlink() or tmp_link.exists():
        tmp_link.unlink()
    os.symlink(fresh.name, tmp_link)
    os.replace(tmp_link, data_link)
    for key in data:
        link = target / key
        if not link.is_symlink():
            if link.exists():
                link.unlink()
            os.symlink(f"{_DATA_LINK}/{key}", link)
    for stale in [p for p in target.iterdir() if p.is_symlink() and p.name not in data and p.name != _DATA_LINK]:
        stale.unlink()
    if old is not None and old != fresh.name:
        shutil.rmtree(target / old, ignore_errors=True)
    return target


def _card_order(cards: Iterable[str]) -> list[str]:
    """Sorted as text, as the device plugin joins its sets (`ToString`: sets.String.List())."""
    return sorted(cards)
