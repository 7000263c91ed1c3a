"""What `motorctl hw-fault` sends over the ReportHardwareFault RPC, and which names each MindCluster
source (device plugin, switch, NodeD) writes for a level: shared by the RPC request and the
real-format documents of `configmaps`."""

from __future__ import annotations

import re
import time

from gen.motor.v1 import controller_pb2
from motor.controller.hardware import levels
from motor.controller.hardware.formats.names import FAULT_TYPE_CARD, FAULT_TYPE_NODED, FAULT_TYPE_SWITCH
from motor.controller.hardware.model import HardwareFault, HardwareFaultError

VIA_DEVICE_INFO = "deviceinfo"
VIA_SWITCH = "switch"
VIA_NODE_INFO = "nodeinfo"
VIAS = (VIA_DEVICE_INFO, VIA_SWITCH, VIA_NODE_INFO)
NODED_DEVICE_TYPE = "CPU"


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
    via: str | None = None,
) -> controller_pb2.ReportHardwareFaultRequest:
    """A ReportHardwareFault request; `level` is a FaultLevel value, "L1".."L6" or a MindCluster name
    (any source's: SeparateNPU, Separate, SeparateFault, …). `via` names the publishing source
    (deviceinfo for a card, nodeinfo or switch for a node; default: deviceinfo with a card, else
    nodeinfo) and fills fault_type and the handling name that source would write.

    Raises HardwareFaultError (naming the value) for what the Controller would refuse, and for a
    level the chosen source cannot write.
    """
    via = via or (VIA_DEVICE_INFO if npu_name else VIA_NODE_INFO)
    if via not in VIAS:
        raise HardwareFaultError(f"via={via!r} is not one of {list(VIAS)}")
    if (via == VIA_DEVICE_INFO) != bool(npu_name):
        raise HardwareFaultError(f"via={via!r} with npu_name={npu_name!r}: the device plugin lists cards, "
                                 "NodeD and the switch report the node")
    written = ""
    if isinstance(level, str):
        resolved = levels.level_from_name(level)
        if resolved is None:
            raise HardwareFaultError(f"level={level!r} is not L1..L6 or a MindCluster handling name")
        if not re.fullmatch(r"L[1-6]", level.strip()):
            written = level.strip()
        level = resolved
    if not levels.is_valid_level(level):
        raise HardwareFaultError(f"level={levels.level_text(level)} is not one of FAULT_LEVEL_L1..FAULT_LEVEL_L6")
    handling_default = source_handling_name(via, level, written)
    req = controller_pb2.ReportHardwareFaultRequest(
        node_name=node_name,
        npu_name=npu_name,
        fault_code=fault_code,
        level=level,
        fault_type=fault_type if fault_type is not None else fault_type_of(via),
        fault_handling=fault_handling if fault_handling is not None else handling_default,
        fault_time_unix_sec=fault_time_unix_sec,
        source=source,
    )
    HardwareFault.from_request(req, now_sec=time.time())  # refuse now what the Controller would refuse
    return req


def fault_type_of(via: str) -> str:
    return {VIA_DEVICE_INFO: FAULT_TYPE_CARD, VIA_SWITCH: FAULT_TYPE_SWITCH}.get(via, f"{FAULT_TYPE_NODED}:{NODED_DEVICE_TYPE}")


def source_handling_name(via: str, level: int, written: str) -> str:
    """The handling name `via` writes for `level` (`written` when it is one of that source's names)."""
    names, of_level = {
        VIA_DEVICE_INFO: (levels.DEVICE_PLUGIN_NAMES, levels.CANONICAL_NAME),
        VIA_SWITCH: (levels.SWITCH_NAMES, levels.SWITCH_NAME_OF_LEVEL),
        VIA_NODE_INFO: (levels.NODED_NAMES, levels.NODED_NAME_OF_LEVEL),
    }[via]
    if written in names:
        return written
    if level in of_level:
        return of_level[level]
    raise HardwareFaultError(f"level={written or levels.level_text(level)!r} cannot be published by {via} "
                             f"(its names: {sorted(names)})")


def switch_handling_name(fault: HardwareFault) -> str:
    return source_handling_name(VIA_SWITCH, fault.level, fault.fault_handling)


def noded_handling_name(fault: HardwareFault) -> str:
    return source_handling_name(VIA_NODE_INFO, fault.level, fault.fault_handling)
