"""Fault injection in MindCluster's real formats, for the demo tooling and tests.

`write_configmap_fault` lays out a device-info ConfigMap exactly as kubelet mounts one (key files
behind a `..data` symlink that is swapped atomically), so the DirectoryConfigMapSource reads what
it would read in a cluster; `build_configmap` gives the Kubernetes object for watch tests or
`kubectl apply`; `build_report_request` builds what `motorctl hw-fault` sends over the RPC.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from gen.motor.v1 import controller_pb2
from motor.controller.hardware import levels
from motor.controller.hardware.checkcode import device_info_check_code
from motor.controller.hardware.formats import (
    CONFIGMAP_NAME_PREFIX,
    CONFIGMAP_NAMESPACE,
    DEVICE_INFO_KEY,
    FAULT_LIST_SUFFIX,
    FAULT_TYPE_CARD,
    FAULT_TYPE_CARD_NETWORK,
    FAULT_TYPE_NODE,
    MANUALLY_SEPARATE_KEY,
)
from motor.controller.hardware.model import HardwareFault, HardwareFaultError

DEFAULT_RESOURCE = "huawei.com/Ascend910"
_DATA_LINK = "..data"
_CARD_INDEX_RE = re.compile(r"^(.*?)(\d+)$")


def fault_entry(fault: HardwareFault) -> dict[str, Any]:
    """One element of the `…-Fault` list, fields in the device plugin's order."""
    if fault.whole_node and not fault.fault_handling:
        handling = ""  # MindCluster leaves the level empty for node faults (read back as L6)
    else:
        handling = fault.fault_handling or levels.CANONICAL_NAME[fault.level]
    fault_time_ms = int(round(fault.fault_time_unix_sec * 1000))
    per_code_level = handling or levels.CANONICAL_NAME[fault.level]
    return {
        "fault_type": fault.fault_type or (FAULT_TYPE_NODE if fault.whole_node else FAULT_TYPE_CARD),
        "npu_name": fault.npu_name,
        "large_model_fault_level": handling,
        "fault_level": handling,
        "fault_handling": handling,
        "fault_code": fault.fault_code,
        "fault_time_and_level_map": {
            code: {"fault_time": fault_time_ms, "fault_level": per_code_level} for code in fault.fault_codes
        },
    }


def build_device_info_cfg(
    faults: Iterable[HardwareFault],
    *,
    cards: Iterable[str] = (),
    update_time_sec: float | None = None,
    resource: str = DEFAULT_RESOURCE,
    super_pod_id: int = -2,
    server_index: int = -2,
) -> str:
    """The `DeviceInfoCfg` value: DeviceInfo with its JSON-string fault list, plus a valid CheckCode.

    `cards` are the node's cards; those with a card fault of L2 or worse are listed unhealthy (network
    ones under -NetworkUnhealthy), the rest available, as the device plugin does.
    """
    faults = list(faults)
    unhealthy = {f.npu_name for f in faults if f.npu_name and f.fault_type != FAULT_TYPE_CARD_NETWORK and f.level >= levels.L2}
    network = {f.npu_name for f in faults if f.npu_name and f.fault_type == FAULT_TYPE_CARD_NETWORK}
    all_cards = set(cards) | unhealthy | network
    device_list = {
        resource: ",".join(_card_order(all_cards - unhealthy - network)),
        resource + FAULT_LIST_SUFFIX: json.dumps([fault_entry(f) for f in faults], separators=(",", ":")),
        resource + "-NetworkUnhealthy": ",".join(_card_order(network)),
        resource + "-Recovering": "",
        resource + "-Unhealthy": ",".join(_card_order(unhealthy)),
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


def configmap_data(
    faults: Iterable[HardwareFault], *, manually_separated: Iterable[str] = (), **cfg_kwargs: Any
) -> dict[str, str]:
    return {
        DEVICE_INFO_KEY: build_device_info_cfg(faults, **cfg_kwargs),
        MANUALLY_SEPARATE_KEY: ",".join(_card_order(set(manually_separated))),
    }


def build_configmap(node: str, faults: Iterable[HardwareFault], **kwargs: Any) -> dict[str, Any]:
    """The Kubernetes ConfigMap object (as `kubectl get cm -o json` shows it)."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": CONFIGMAP_NAME_PREFIX + node, "namespace": CONFIGMAP_NAMESPACE},
        "data": configmap_data(faults, **kwargs),
    }


def write_configmap_fault(
    directory: str | os.PathLike[str], node: str, faults: Iterable[HardwareFault], **kwargs: Any
) -> Path:
    """Writes the node's whole device-info state as a kubelet-mounted ConfigMap; returns its folder.

    The list replaces what was there (an empty list is the recovery). Layout, as kubelet's atomic
    writer makes it: `<dir>/mindx-dl-deviceinfo-<node>/{DeviceInfoCfg,ManuallySeparateNPU}` are
    symlinks into `..data/`, itself a symlink to a timestamped folder that is swapped by rename.
    """
    faults = [f for f in faults]
    for fault in faults:
        if fault.node_name != node:
            raise HardwareFaultError(f"fault {fault.describe()} is not on node {node}")
    data = configmap_data(faults, **kwargs)
    target = Path(directory) / (CONFIGMAP_NAME_PREFIX + node)
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
    if old is not None and old != fresh.name:
        shutil.rmtree(target / old, ignore_errors=True)
    return target


def build_report_request(
    node_name: str,
    npu_name: str = "",
    fault_code: str = "",
    level: int | str = levels.L6,
    *,
    fault_type: str | None = None,
    fault_handling: str | None = None,
    fault_time_unix_sec: float = 0.0,
    source: str = "motorctl",
) -> controller_pb2.ReportHardwareFaultRequest:
    """A ReportHardwareFault request; `level` is a FaultLevel value, "L1".."L6" or a MindCluster name.

    Raises HardwareFaultError (naming the value) for what the Controller would refuse.
    """
    if isinstance(level, str):
        resolved = levels.level_from_name(level)
        if resolved is None:
            raise HardwareFaultError(f"level={level!r} is not L1..L6 or a MindCluster handling name")
        # "L4" stands for the ladder's own name; a MindCluster name is kept as written.
        handling_default = levels.CANONICAL_NAME[resolved] if re.fullmatch(r"L[1-6]", level.strip()) else level.strip()
        level = resolved
    else:
        handling_default = levels.CANONICAL_NAME.get(level, "")
    req = controller_pb2.ReportHardwareFaultRequest(
        node_name=node_name,
        npu_name=npu_name,
        fault_code=fault_code,
        level=level,
        fault_type=fault_type if fault_type is not None else (FAULT_TYPE_CARD if npu_name else FAULT_TYPE_NODE),
        fault_handling=fault_handling if fault_handling is not None else handling_default,
        fault_time_unix_sec=fault_time_unix_sec,
        source=source,
    )
    HardwareFault.from_request(req, now_sec=time.time())  # refuse now what the Controller would refuse
    return req


def _card_order(cards: Iterable[str]) -> list[str]:
    """Ascend910-2 before Ascend910-10, as the device plugin lists them."""

    def key(card: str) -> tuple[str, int, str]:
        match = _CARD_INDEX_RE.match(card)
        return (match.group(1), int(match.group(2)), card) if match else (card, -1, card)

    return sorted(cards, key=key)
