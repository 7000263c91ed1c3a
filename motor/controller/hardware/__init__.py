"""Hardware-fault intake (RFC §4.2, §4.4): what MindCluster publishes, every source of it, and the
ReportHardwareFault RPC → HardwareFaults → original DP ranks per instance.

Sources read (see `formats` for why Volcano's vcjob-fault-npu-cm is not): the device plugin's
`kube-system/mindx-dl-deviceinfo-<node>` (DeviceInfoCfg: `-Fault` entries and the -Unhealthy /
-NetworkUnhealthy / -Recovering card lists; SwitchInfoCfg; ManuallySeparateNPU), NodeD's
`mindx-dl/mindx-dl-nodeinfo-<node>` (NodeInfo), the Kubernetes Node Ready condition, and the RPC.
2023's and today's formats alike; every level name of every source (`levels`); every card name form
(`cardnames`: Ascend910-N, Ascend310P-N, npu-N on A5, 310P mixed insert, an operator's prefix from
`hardware_monitor.card_name_prefixes`, vNPUs, share slices) mapped to its physical card.

Modules:
- pure: `levels` (the one level table), `model` (HardwareFault), `formats` (MindCluster names and
  constants, ParseResult), `cardnames` (card name forms → physical card), `checkcode` (MindCluster's
  CheckCodes, Go's json.Marshal), `fault_list` (one `…-Fault` list → faults), `switch_parser`
  (SwitchInfoCfg → the node's switch fault), `nodeinfo_parser` (NodeD's NodeInfo → node faults),
  `parser` (a device-info or node-info ConfigMap → faults), `node_parser` (Node NotReady → fault),
  `dedup` (new or changed only; first-sighting stamps), `resolver` (faults → ranks);
- sources: `source` (callback type, source protocol, document → new faults), `rpc_source`
  (ReportHardwareFault), `directory_source` (mounted ConfigMaps, polled), `kube_api` (the
  Kubernetes calls, client loaded lazily), `kube` (list+watch of both ConfigMap kinds and Nodes);
- `monitor` (ResourceMonitor: sources from config, one callback); `inject` (real-format documents) and `inject_rpc` (the ReportHardwareFault request, the names each source writes) for fault
  injection: device-info, switch info, NodeD nodeinfo, RPC requests).

The registered `device_infos[].device_id` are the host's card names (the pod's
`huawei.com/AscendReal` annotation; the NodeManager checks them at registration with
`pod_annotations_file`, `nodemanager.device_ids`), never container-local indices.
"""

from motor.controller.hardware.cardnames import CardName, CardNames, parse_card_name
from motor.controller.hardware.directory_source import DirectoryConfigMapSource
from motor.controller.hardware.formats import ParseResult
from motor.controller.hardware.levels import is_severe, level_from_name
from motor.controller.hardware.model import FaultKey, HardwareFault, HardwareFaultError
from motor.controller.hardware.monitor import HardwareMonitorError, ResourceMonitor
from motor.controller.hardware.node_parser import parse_node
from motor.controller.hardware.parser import parse_configmap
from motor.controller.hardware.resolver import (
    InstanceMapping,
    InstanceTopology,
    ResolveResult,
    TopologyResolver,
    Unmappable,
)
from motor.controller.hardware.rpc_source import RpcSource, SourceNotStarted
from motor.controller.hardware.source import FaultCallback, HardwareFaultSource

__all__ = [
    "CardName",
    "CardNames",
    "DirectoryConfigMapSource",
    "FaultCallback",
    "FaultKey",
    "HardwareFault",
    "HardwareFaultError",
    "HardwareFaultSource",
    "HardwareMonitorError",
    "InstanceMapping",
    "InstanceTopology",
    "ParseResult",
    "ResolveResult",
    "ResourceMonitor",
    "RpcSource",
    "SourceNotStarted",
    "TopologyResolver",
    "Unmappable",
    "is_severe",
    "level_from_name",
    "parse_card_name",
    "parse_configmap",
    "parse_node",
]
