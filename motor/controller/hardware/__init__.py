"""Hardware-fault intake (RFC §4.2, §4.4): MindCluster device-info ConfigMaps, Node NotReady and the
ReportHardwareFault RPC → HardwareFaults → original DP ranks per instance.

Modules: `levels` (the one level table), `model` (HardwareFault), `parser` (formats → faults),
`dedup` (new or changed only), `resolver` (faults → ranks), `monitor` (ResourceMonitor, RPC and
directory sources), `kube` (Kubernetes list+watch), `inject` (real-format fault injection).
"""

from motor.controller.hardware.levels import is_severe, level_from_name
from motor.controller.hardware.model import FaultKey, HardwareFault, HardwareFaultError
from motor.controller.hardware.monitor import (
    DirectoryConfigMapSource,
    FaultCallback,
    HardwareFaultSource,
    HardwareMonitorError,
    ResourceMonitor,
    RpcSource,
    SourceNotStarted,
)
from motor.controller.hardware.parser import ParseResult, parse_configmap, parse_node
from motor.controller.hardware.resolver import (
    InstanceMapping,
    InstanceTopology,
    ResolveResult,
    TopologyResolver,
    Unmappable,
)

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
