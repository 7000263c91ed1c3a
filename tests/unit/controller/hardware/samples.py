"""MindCluster documents as its components write them, built here from their Go structures.

Read from Ascend/mind-cluster (2025) and Ascend/ascend-device-plugin v5.0.0 (Dec 2023); field names
and JSON tags as in the structs, in declaration order, Go's compact encoding (map keys sorted), and
every CheckCode computed the way MindCluster computes it — sha256 hex of json.Marshal of the hashed
struct — over the literal text written here (not by Motor's code):

- device plugin, `NodeDeviceInfoCache{DeviceInfo NodeDeviceInfo; SuperPodID; ServerIndex; CheckCode;
  RackID *int32 omitempty}` (2023: `{DeviceInfo; CheckCode}`), `NodeDeviceInfo{DeviceList
  map[string]string; UpdateTime int64}`, `DeviceFault{fault_type, npu_name, large_model_fault_level,
  fault_level, fault_handling, fault_code, fault_time_and_level_map}` (2023: without fault_handling
  and the map), card lists joined from sorted sets (`ToString`);
- switch, `SwitchFaultInfo{FaultCode []string; FaultLevel; UpdateTime; NodeStatus;
  FaultTimeAndLevelMap}` with FaultCode items the JSON of `simpleSwitchFaultInfo` (2024: bare
  "%08x" alarm ids, no map);
- NodeD, `NodeInfoCM{NodeInfo FaultDevInfo; CheckCode}`, `FaultDevInfo{FaultDevList []*FaultDev;
  NodeStatus}` (before 2025: `{FaultDevList; HeartbeatTime; HeartbeatInterval; NodeStatus}`),
  `FaultDev{DeviceType; DeviceId; FaultCode []string; FaultLevel}`.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

NODE = "worker-7"
R910 = "huawei.com/Ascend910"
RNPU = "huawei.com/npu"


def go(value: Any) -> str:
    """Go's compact json for these samples (ASCII only, no <>&, dicts already in Go's order)."""
    return json.dumps(value, separators=(",", ":"))


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


# --- device plugin: -Fault entries ----------------------------------------------------------


def fault(npu: str, handling: str, codes: list[str], times_ms: dict[str, int] | None = None,
          per_code: dict[str, str] | None = None, fault_type: str = "CardUnhealthy") -> dict[str, Any]:
    """Today's DeviceFault (field order of the struct); the time map's keys sorted as Go writes a map."""
    times = times_ms or {}
    return {
        "fault_type": fault_type,
        "npu_name": npu,
        "large_model_fault_level": handling,
        "fault_level": handling,
        "fault_handling": handling,
        "fault_code": ",".join(codes),
        "fault_time_and_level_map": {
            code: {"fault_time": times.get(code, 0), "fault_level": (per_code or {}).get(code, handling)}
            for code in sorted(codes)
        },
    }


def fault_2023(npu: str, level: str, codes: list[str], fault_type: str = "CardUnhealthy") -> dict[str, Any]:
    """2023's DeviceFault: fault_type, npu_name, large_model_fault_level, fault_level, fault_code."""
    return {"fault_type": fault_type, "npu_name": npu, "large_model_fault_level": level, "fault_level": level,
            "fault_code": ",".join(codes)}


def normal(npu: str, network: bool) -> dict[str, Any]:
    """A ring-mate of a card under hot reset: Health/NetworkHealth set Unhealthy without a code."""
    name = "NormalNetwork" if network else "NormalNPU"
    return fault(npu, name, [], fault_type="CardNetworkUnhealthy" if network else "CardUnhealthy")


# An eight-card A2/A3 node: a card lost for good with two codes, the same code on two cards, a
# link-down network fault (PreSeparateNPU), an ignorable one (still available).
FAULTS = [
    fault("Ascend910-2", "SeparateNPU", ["A8028801", "80E18402"], {"80E18402": 1760000000123, "A8028801": 1760000000456},
          {"A8028801": "NotHandleFault"}),
    fault("Ascend910-1", "RestartNPU", ["80CB8002"], {"80CB8002": 1760000010000}),
    fault("Ascend910-5", "RestartNPU", ["80CB8002"], {"80CB8002": 1760000011000}),
    fault("Ascend910-6", "PreSeparateNPU", ["81078603"], {"81078603": 1760000020000}, fault_type="CardNetworkUnhealthy"),
    fault("Ascend910-7", "NotHandleFault", ["80E21007"], {"80E21007": 1760000030000}),
]
FAULT_LIST_TEXT = go(FAULTS)


def device_list(resource: str = R910, faults: list[dict[str, Any]] | str = FAULTS, available: str = "",
                unhealthy: str = "", network: str = "", recovering: str | None = "") -> dict[str, str]:
    """DeviceList (a Go map: the caller's keys get sorted by `device_info_text`); recovering=None: 2023 (no key)."""
    listed = {
        resource: available,
        resource + "-Fault": faults if isinstance(faults, str) else go(faults),
        resource + "-NetworkUnhealthy": network,
        resource + "-Unhealthy": unhealthy,
    }
    if recovering is not None:
        listed[resource + "-Recovering"] = recovering
    return listed


EIGHT_CARDS = device_list(available="Ascend910-0,Ascend910-3,Ascend910-4,Ascend910-7",
                          unhealthy="Ascend910-1,Ascend910-2,Ascend910-5", network="Ascend910-6")


def device_info_text(listed: dict[str, str] | None = None, update_time_sec: int = 1760000100) -> str:
    """The DeviceInfo object's text as Go's json.Marshal writes it (DeviceList keys sorted)."""
    listed = EIGHT_CARDS if listed is None else listed
    return go({"DeviceList": dict(sorted(listed.items())), "UpdateTime": update_time_sec})


def device_info_cfg(info_text: str | None = None, super_pod_id: int = -2, server_index: int = -2,
                    check_code: str | None = None, rack_id: int | None = None) -> str:
    """Today's NodeDeviceInfoCache: DeviceInfo, SuperPodID, ServerIndex, CheckCode[, RackID (A5)]."""
    info_text = device_info_text() if info_text is None else info_text
    code = sha(info_text) if check_code is None else check_code
    rack = f',"RackID":{rack_id}' if rack_id is not None else ""
    return (f'{{"DeviceInfo":{info_text},"SuperPodID":{super_pod_id},"ServerIndex":{server_index},'
            f'"CheckCode":"{code}"{rack}}}')


def device_info_cfg_2023(info_text: str) -> str:
    """2023's NodeDeviceInfoCache: DeviceInfo, CheckCode."""
    return f'{{"DeviceInfo":{info_text},"CheckCode":"{sha(info_text)}"}}'


DEVICE_INFO_CFG = device_info_cfg()

# Hot reset of a four-card ring: card 1 has the fault; 0, 2, 3 are its ring-mates, set Unhealthy
# and resetting with no code of their own (network entry first, as getDeviceFaults appends).
RING_FAULTS = [
    normal("Ascend910-0", True), normal("Ascend910-0", False),
    normal("Ascend910-1", True), fault("Ascend910-1", "RestartNPU", ["80CB8002"], {"80CB8002": 1760000040000}),
    normal("Ascend910-2", True), normal("Ascend910-2", False),
    normal("Ascend910-3", True), normal("Ascend910-3", False),
]
RING = "Ascend910-0,Ascend910-1,Ascend910-2,Ascend910-3"
HOT_RESET = device_list(faults=RING_FAULTS, available="Ascend910-4,Ascend910-5,Ascend910-6,Ascend910-7",
                        unhealthy=RING, network=RING, recovering=RING)
# 2023: no -Recovering list and no entry for the ring-mates: only -Unhealthy says they are withdrawn.
HOT_RESET_2023 = device_list(faults=[fault_2023("Ascend910-1", "RestartNPU", ["80CB8002"])],
                             available="Ascend910-4,Ascend910-5,Ascend910-6,Ascend910-7", unhealthy=RING,
                             recovering=None)
# Atlas A5: resource huawei.com/npu, cards npu-<phyId>.
A5_CARDS = device_list(resource=RNPU, faults=[fault("npu-1", "SeparateNPU", ["80E18402"], {"80E18402": 1760000050000})],
                       available="npu-0,npu-2,npu-3", unhealthy="npu-1")
# An operator's deviceNameCustomization.json: DevicePublicType vendor.io/accel910, prefix "custom910-".
CUSTOM_CARDS = device_list(resource="vendor.io/accel910",
                           faults=[fault("custom910-3", "RestartNPU", ["80CB8002"], {"80CB8002": 1760000060000})],
                           available="custom910-0,custom910-1,custom910-2", unhealthy="custom910-3")


def configmap_object(node: str, data: dict[str, str], name_prefix: str = "mindx-dl-deviceinfo-",
                     namespace: str = "kube-system") -> dict[str, object]:
    """As `kubectl get cm -n <namespace> <prefix><node> -o json` prints it."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": f"{name_prefix}{node}", "namespace": namespace, "resourceVersion": "4711",
                     "labels": {"mx-consumer-cim": "true"}},
        "data": data,
    }


# --- switch (SwitchInfoCfg) -------------------------------------------------------------------

EMPTY_SWITCH = go({"FaultCode": None, "FaultLevel": "", "UpdateTime": 0, "NodeStatus": "", "FaultTimeAndLevelMap": None})


def switch_event(alarm: int, fault_id: str, peer: str, chip: int, port: int, raised_ms: int) -> str:
    """One FaultCode item: the JSON of simpleSwitchFaultInfo (getSimpleSwitchFaultStr)."""
    return go({"EventType": alarm, "AssembledFaultCode": f"[0x{alarm:08x},{fault_id},{peer},na]", "PeerPortDevice": 1,
               "PeerPortId": port, "SwitchChipId": chip, "SwitchPortId": port, "Severity": 2, "Assertion": 1,
               "AlarmRaisedTime": raised_ms})


def switch_info(level: str, status: str, events: list[tuple[int, str, str, int, int, int, str]],
                update_time_sec: int = 1760000200) -> str:
    """Today's SwitchFaultInfo; events are (alarm, fault id, peer, chip, port, raised ms, per-code level)."""
    time_map = {f"[0x{a:08x},{fid},{peer},na]_{chip}_{port}": {"fault_time": ms, "fault_level": lvl}
                for a, fid, peer, chip, port, ms, lvl in events}
    return go({"FaultCode": [switch_event(a, fid, peer, chip, port, ms) for a, fid, peer, chip, port, ms, _ in events],
               "FaultLevel": level, "UpdateTime": update_time_sec, "NodeStatus": status,
               "FaultTimeAndLevelMap": dict(sorted(time_map.items()))})


def switch_info_2024(level: str, status: str, alarms: list[int], update_time_sec: int = 1760000200) -> str:
    """The 2024 plugin's SwitchFaultInfo: bare "%08x" alarm ids, no FaultTimeAndLevelMap."""
    return go({"FaultCode": [f"{a:08x}" for a in alarms], "FaultLevel": level, "UpdateTime": update_time_sec,
               "NodeStatus": status})


def full_data(device_info_cfg_text: str = DEVICE_INFO_CFG, switch: str = EMPTY_SWITCH) -> dict[str, str]:
    """All data keys an A3 device plugin writes (WriteDeviceInfoDataIntoCM)."""
    return {
        "DeviceInfoCfg": device_info_cfg_text,
        "SwitchInfoCfg": switch,
        "ManuallySeparateNPU": "",
        "UpgradeFaultReason": "",
        "Description": "available cards in this ConfigMap are being retired; Volcano maintains them",
    }


# --- NodeD (mindx-dl-nodeinfo-<node>) ---------------------------------------------------------


def fault_dev(device_type: str, device_id: int, codes: list[str] | None, level: str) -> dict[str, Any]:
    return {"DeviceType": device_type, "DeviceId": device_id, "FaultCode": codes, "FaultLevel": level}


def node_info(devs: list[dict[str, Any]] | None, status: str, heartbeat: tuple[int, int] | None = None,
              check_code: str | None = None) -> str:
    """NodeInfoCM's text; heartbeat=(HeartbeatTime, HeartbeatInterval) for NodeD before 2025."""
    if heartbeat is None:
        info = go({"FaultDevList": devs, "NodeStatus": status})
    else:
        info = go({"FaultDevList": devs, "HeartbeatTime": heartbeat[0], "HeartbeatInterval": heartbeat[1],
                   "NodeStatus": status})
    code = sha(info) if check_code is None else check_code
    return f'{{"NodeInfo":{info},"CheckCode":"{code}"}}'


def nodeinfo_data(text: str, updated: str = "2025-10-09T09:30:00Z") -> dict[str, str]:
    return {"NodeInfo": text, "updateTime": updated}


NODED_SEPARATE = node_info([fault_dev("CPU", 0, ["0C000025"], "SeparateFault"),
                            fault_dev("Memory", 3, ["08000213", "0800021B"], "NotHandleFault")], "UnHealthy")


# --- Kubernetes Nodes --------------------------------------------------------------------------

NODE_READY = {
    "metadata": {"name": NODE, "resourceVersion": "88"},
    "status": {
        "conditions": [
            {"type": "MemoryPressure", "status": "False", "reason": "KubeletHasSufficientMemory",
             "lastTransitionTime": "2025-10-09T08:00:00Z"},
            {"type": "Ready", "status": "True", "reason": "KubeletReady", "lastTransitionTime": "2025-10-09T08:00:00Z"},
        ]
    },
}


def node_not_ready(status: str = "Unknown", when: str = "2025-10-09T09:30:00Z", reason: str = "NodeStatusUnknown") -> dict[str, object]:
    return {
        "metadata": {"name": NODE, "resourceVersion": "89"},
        "status": {"conditions": [{"type": "Ready", "status": status, "reason": reason, "lastTransitionTime": when}]},
    }
