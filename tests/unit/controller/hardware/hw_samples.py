"""Device-info ConfigMap samples in MindCluster's published format, written for these tests.

Shaped after the Ascend Device Plugin documentation ("mindx-dl-deviceinfo-<nodename>" / DeviceInfoCfg
tables, and the `kubectl describe cm -n kube-system mindx-dl-deviceinfo-${node_name}` example of the
MindCluster 7.3 fault-information page): compact JSON as Go writes it, the fault list a JSON string
inside the JSON, times in milliseconds per code, UpdateTime in seconds, CheckCode = sha256 of the
DeviceInfo text exactly as written (computed here from the literal text, not by Motor's code).
"""

from __future__ import annotations

import hashlib
import json

NODE = "worker-7"

# An eight-card node: a card lost for good with two codes, the same code on two cards, a link-down
# network fault (PreSeparateNPU), an ignorable one.
FAULT_LIST_TEXT = (
    '[{"fault_type":"CardUnhealthy","npu_name":"Ascend910-2","large_model_fault_level":"SeparateNPU",'
    '"fault_level":"SeparateNPU","fault_handling":"SeparateNPU","fault_code":"A8028801,80E18402",'
    '"fault_time_and_level_map":{"80E18402":{"fault_time":1760000000123,"fault_level":"SeparateNPU"},'
    '"A8028801":{"fault_time":1760000000456,"fault_level":"NotHandleFault"}}},'
    '{"fault_type":"CardUnhealthy","npu_name":"Ascend910-1","large_model_fault_level":"RestartNPU",'
    '"fault_level":"RestartNPU","fault_handling":"RestartNPU","fault_code":"80CB8002",'
    '"fault_time_and_level_map":{"80CB8002":{"fault_time":1760000010000,"fault_level":"RestartNPU"}}},'
    '{"fault_type":"CardUnhealthy","npu_name":"Ascend910-5","large_model_fault_level":"RestartNPU",'
    '"fault_level":"RestartNPU","fault_handling":"RestartNPU","fault_code":"80CB8002",'
    '"fault_time_and_level_map":{"80CB8002":{"fault_time":1760000011000,"fault_level":"RestartNPU"}}},'
    '{"fault_type":"CardNetworkUnhealthy","npu_name":"Ascend910-6","large_model_fault_level":"PreSeparateNPU",'
    '"fault_level":"PreSeparateNPU","fault_handling":"PreSeparateNPU","fault_code":"81078603",'
    '"fault_time_and_level_map":{"81078603":{"fault_time":1760000020000,"fault_level":"PreSeparateNPU"}}},'
    '{"fault_type":"CardUnhealthy","npu_name":"Ascend910-7","large_model_fault_level":"NotHandleFault",'
    '"fault_level":"NotHandleFault","fault_handling":"NotHandleFault","fault_code":"80E21007",'
    '"fault_time_and_level_map":{"80E21007":{"fault_time":1760000030000,"fault_level":"NotHandleFault"}}}]'
)


def device_info_text(fault_list_text: str, update_time_sec: int = 1760000100, resource: str = "huawei.com/Ascend910",
                     available: str = "Ascend910-0,Ascend910-3,Ascend910-4,Ascend910-7",
                     network_unhealthy: str = "Ascend910-6", unhealthy: str = "Ascend910-1,Ascend910-2,Ascend910-5") -> str:
    """The DeviceInfo object's text as Go's json.Marshal writes it (DeviceList keys sorted)."""
    return (
        '{"DeviceList":{'
        f'"{resource}":"{available}",'
        f'"{resource}-Fault":{json.dumps(fault_list_text)},'
        f'"{resource}-NetworkUnhealthy":"{network_unhealthy}",'
        f'"{resource}-Recovering":"",'
        f'"{resource}-Unhealthy":"{unhealthy}"'
        f'}},"UpdateTime":{update_time_sec}}}'
    )


def device_info_cfg(info_text: str, super_pod_id: int = 0, server_index: int = 3, check_code: str | None = None) -> str:
    code = hashlib.sha256(info_text.encode()).hexdigest() if check_code is None else check_code
    return f'{{"DeviceInfo":{info_text},"SuperPodID":{super_pod_id},"ServerIndex":{server_index},"CheckCode":"{code}"}}'


DEVICE_INFO_CFG = device_info_cfg(device_info_text(FAULT_LIST_TEXT))

# A node whose state was lost (documented: npu_name and levels empty, code heartbeatTimeOut) and a
# card whose network is not connected (documented code "Disconnected").
NODE_FAULT_LIST_TEXT = (
    '[{"fault_type":"NodeUnhealthy","npu_name":"","large_model_fault_level":"","fault_level":"",'
    '"fault_handling":"","fault_code":"heartbeatTimeOut","fault_time_and_level_map":'
    '{"heartbeatTimeOut":{"fault_time":1760000200000,"fault_level":""}}},'
    '{"fault_type":"CardNetworkUnhealthy","npu_name":"Ascend910-0","large_model_fault_level":"SeparateNPU",'
    '"fault_level":"SeparateNPU","fault_handling":"SeparateNPU","fault_code":"Disconnected",'
    '"fault_time_and_level_map":{"Disconnected":{"fault_time":1760000201000,"fault_level":"SeparateNPU"}}}]'
)


def configmap_object(node: str, data: dict[str, str]) -> dict[str, object]:
    """As `kubectl get cm -n kube-system mindx-dl-deviceinfo-<node> -o json` prints it."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": f"mindx-dl-deviceinfo-{node}",
            "namespace": "kube-system",
            "resourceVersion": "4711",
            "labels": {"mx-consumer-cim": "true"},
        },
        "data": data,
    }


def full_data(device_info_cfg_text: str = DEVICE_INFO_CFG) -> dict[str, str]:
    """All data keys the device plugin writes (switch info and description included)."""
    return {
        "DeviceInfoCfg": device_info_cfg_text,
        "SwitchInfoCfg": '{"FaultCode":[],"FaultLevel":"","UpdateTime":1760000100,"NodeStatus":"Healthy","FaultTimeAndLevelMap":{}}',
        "ManuallySeparateNPU": "",
        "Description": "available cards in this ConfigMap are being retired; Volcano maintains them",
    }


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
