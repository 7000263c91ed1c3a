"""Hardware-fault intake (RFC §4.2, §4.4): MindCluster device-info ConfigMaps, Node NotReady and the
ReportHardwareFault RPC → HardwareFaults → original DP ranks per instance.

Modules:
- pure: `levels` (the one level table), `model` (HardwareFault), `formats` (MindCluster names and
  constants, ParseResult), `checkcode` (the device plugin's CheckCode), `fault_list` (one `…-Fault`
  list → faults), `parser` (device-info ConfigMap → faults), `node_parser` (Node NotReady → fault),
  `dedup` (new or changed only), `resolver` (faults → ranks);
- sources: `source` (callback type, source protocol, document → new faults), `rpc_source`
  (ReportHardwareFault), `directory_source` (mounted ConfigMaps, polled), `kube_api` (the
  Kubernetes calls, client loaded lazily), `kube` (list+watch of ConfigMaps and Nodes);
- `monitor` (ResourceMonitor: sources from config, one callback); `inject` (real-format fault
  injection).
"""

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
    "parse_configmap",
    "parse_node",
]
