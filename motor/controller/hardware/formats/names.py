"""Names and constants of what MindCluster publishes, shared by the parsers, sources and injector.

Documents read (Ascend/mind-cluster; field names and JSON tags as in its Go structs):

- Device plugin, one per node, `kube-system/mindx-dl-deviceinfo-<node>` (`device_info`): `DeviceInfoCfg`
  (NodeDeviceInfoCache), `SwitchInfoCfg` (SwitchFaultInfo, A3/A5; `switch_info`),
  `ManuallySeparateNPU`, `UpgradeFaultReason`, `Description`.
- NodeD, one per node with a fault, `mindx-dl/mindx-dl-nodeinfo-<node>` (`node_info`): `NodeInfo`
  (NodeInfoCM: FaultDevInfo and its CheckCode), `updateTime`.
- Kubernetes Nodes: the Ready condition (`node_ready`).

Not read, on purpose: Volcano's `volcano-system/vcjob-fault-npu-cm` (its NodeUnhealthy /
heartbeatTimeOut node entries and per-job reasons). It is the scheduler's view, rebuilt in each of
its scheduling sessions from the documents above and from node heartbeats; reading it would report
the device plugin's faults a second time under other identities and tie Motor to Volcano's internals. A node whose
heartbeat is lost is the Node Ready condition here, NodeD's and the switch's faults are read first hand.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from motor.controller.hardware import levels
from motor.controller.hardware.model import HardwareFault

# Device plugin's device-info ConfigMap.
CONFIGMAP_NAMESPACE = "kube-system"
CONFIGMAP_NAME_PREFIX = "mindx-dl-deviceinfo-"
DEVICE_INFO_KEY = "DeviceInfoCfg"
SWITCH_INFO_KEY = "SwitchInfoCfg"
MANUALLY_SEPARATE_KEY = "ManuallySeparateNPU"
UPGRADE_REASON_KEY = "UpgradeFaultReason"
DESCRIPTION_KEY = "Description"
# DeviceList keys: "huawei.com/<resource>" (available cards) and these suffixes.
FAULT_LIST_SUFFIX = "-Fault"
UNHEALTHY_SUFFIX = "-Unhealthy"
NETWORK_UNHEALTHY_SUFFIX = "-NetworkUnhealthy"
RECOVERING_SUFFIX = "-Recovering"
CARD_LIST_SUFFIXES = (UNHEALTHY_SUFFIX, NETWORK_UNHEALTHY_SUFFIX, RECOVERING_SUFFIX)
RESOURCE_PREFIX = "huawei.com/"
RESOURCE_ASCEND910 = "huawei.com/Ascend910"
RESOURCE_NPU = "huawei.com/npu"  # Atlas A5 (and any newer card type)

# NodeD's node-info ConfigMap.
NODEINFO_NAMESPACE = "mindx-dl"
NODEINFO_NAME_PREFIX = "mindx-dl-nodeinfo-"
NODEINFO_KEY = "NodeInfo"
NODEINFO_UPDATE_KEY = "updateTime"

# Fault types the device plugin writes in `-Fault` entries.
FAULT_TYPE_CARD = "CardUnhealthy"
FAULT_TYPE_CARD_NETWORK = "CardNetworkUnhealthy"
DEVICE_PLUGIN_FAULT_TYPES = frozenset({FAULT_TYPE_CARD, FAULT_TYPE_CARD_NETWORK})
FAULT_TYPE_MANUALLY_SEPARATED = "ManuallySeparateNPU"
# Volcano's node entry (never in a device plugin's list; see the module docstring).
VOLCANO_NODE_FAULT_TYPE = "NodeUnhealthy"

# Motor's fault types for evidence without an entry of its own (not MindCluster names).
FAULT_TYPE_RECOVERING = "CardRecovering"  # listed in -Recovering: under hot reset
FAULT_TYPE_WITHDRAWN = "CardWithdrawn"  # listed in -Unhealthy without a fault of its own
FAULT_TYPE_NETWORK_LISTED = "CardNetworkListed"  # listed in -NetworkUnhealthy without a fault of its own
FAULT_TYPE_SWITCH = "SwitchFault"
FAULT_TYPE_NODED = "NodeDFault"
FAULT_TYPE_NODE_NOT_READY = "NodeNotReady"
NODE_NOT_READY_CODE = "NodeNotReady"

# A card under hot reset (-Recovering), or withdrawn by the device plugin without a fault code of
# its own (-Unhealthy: a ring-mate of the card being reset; 2023's plugin had no -Recovering list
# and wrote no entry for it): whatever ran on it is lost, as for RestartNPU.
RECOVERING_LEVEL = levels.L5
WITHDRAWN_LEVEL = levels.L5
# -NetworkUnhealthy without an entry: the plugin's default level of an unrecorded network fault is
# PreSeparateNPU (`GetNetworkFaultTypeByCode`), which Motor logs only (see `levels`).
NETWORK_LISTED_LEVEL = levels.L1
# A node whose Ready condition is False/Unknown: kubelet lost, every card unusable.
NODE_NOT_READY_LEVEL = levels.L6

DEVICE_INFO = "deviceinfo"
NODE_INFO = "nodeinfo"


class ParseResult(NamedTuple):
    faults: list[HardwareFault]
    problems: list[str]


def node_from_configmap_name(name: str) -> str | None:
    """'mindx-dl-deviceinfo-node1' → 'node1'; None for any other name (see `document_kind`)."""
    if name.startswith(CONFIGMAP_NAME_PREFIX) and len(name) > len(CONFIGMAP_NAME_PREFIX):
        return name[len(CONFIGMAP_NAME_PREFIX) :]
    return None


def document_kind(name: str) -> tuple[str, str] | None:
    """A ConfigMap name → (DEVICE_INFO or NODE_INFO, node); None when MindCluster did not name it so."""
    for kind, prefix in ((DEVICE_INFO, CONFIGMAP_NAME_PREFIX), (NODE_INFO, NODEINFO_NAME_PREFIX)):
        if name.startswith(prefix) and len(name) > len(prefix):
            return kind, name[len(prefix) :]
    return None


def is_number(value: Any) -> bool:
    """JSON numbers only: a bool is an int to Python but never a time or a count here."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def fault_time_ms(value: Any, where: str) -> tuple[int | None, str]:
    """The fault_time of a fault_time_and_level_map item (device cards and switch alike) →
    (milliseconds since the epoch, or None when absent or bad; the problem, or "")."""
    if is_number(value) and value >= 0:
        return int(value), ""
    if value is None:
        return None, ""
    return None, f"{where}: fault_time={value!r} is not milliseconds since the epoch"
