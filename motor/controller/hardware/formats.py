"""Names and constants of what MindCluster publishes, shared by the parsers, sources and injector.

One device-info ConfigMap per node, `kube-system/mindx-dl-deviceinfo-<node>`, with the keys below;
the format itself is described in `parser`. Node NotReady is read from Kubernetes Nodes (`node_parser`).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from motor.controller.hardware import levels
from motor.controller.hardware.model import HardwareFault

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


class ParseResult(NamedTuple):
    faults: list[HardwareFault]
    problems: list[str]


def node_from_configmap_name(name: str) -> str | None:
    """'mindx-dl-deviceinfo-node1' → 'node1'; None for any other name."""
    if name.startswith(CONFIGMAP_NAME_PREFIX) and len(name) > len(CONFIGMAP_NAME_PREFIX):
        return name[len(CONFIGMAP_NAME_PREFIX) :]
    return None


def is_number(value: Any) -> bool:
    """JSON numbers only: a bool is an int to Python but never a time or a count here."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)
