"""The one table from MindCluster fault handling names (and "L1".."L6") to Motor's `FaultLevel`.

Every name MindCluster writes is understood, by source (Ascend/mind-cluster, read 2025):

- Device plugin, per card (`-Fault` entries: `large_model_fault_level`, `fault_level`,
  `fault_handling`, the same value; `fault_time_and_level_map[code].fault_level`; `fault_code.go`):
  the processor ladder L1..L6 in this order (MindX DL "故障级别及处理"): NotHandleFault,
  RestartRequest, RestartBusiness, FreeRestartNPU, RestartNPU, SeparateNPU; and outside it
  SubHealthFault, PreSeparateNPU, ManuallySeparateNPU, and the healthy NormalNPU / NormalNetwork.
- Device plugin, switch (A3/A5 `SwitchInfoCfg.FaultLevel` and its per-code levels;
  `convertToSwitchLevelStr`): NotHandle, SubHealthFault, RestartRequest, PreSeparate, Separate.
  SwitchFaultCode.json's ResetFaultCodes are folded into SeparateFaultCodes when loaded
  (`LoadSwitchFaultCode`), so a ResetFault code is published as "Separate": L6, and the name
  "ResetFault" (a relayed report) is L6 too.
- NodeD (`NodeInfo.FaultDevList[].FaultLevel`): NotHandleFault, PreSeparateFault, SeparateFault.
  Its NodeStatus words (Healthy / PreSeparate / UnHealthy, and the switch's SubHealthy) are node
  states, read by `node_info` / `switch_info`, not levels.

Placement of the names outside the ladder, each with the reason:

- PreSeparateNPU → L1 (decision; test `test_pre_separate_npu_placement`). MindCluster's own
  meaning is "暂不影响业务，后续不再调度任务到该芯片": the device plugin keeps a card in use healthy
  (`isHealthy`: PreSeparateNPU and used → Healthy), ClusterD's fault-recover service filters it out
  with NotHandleFault (`filterLevel`), and Volcano leaves it to the platform. Motor acts on impact
  to running ranks: a PreSeparateNPU card that does break a collective shows up in the engine's FT
  status (the software path), and hardware evidence only corroborates. Its name is kept on the
  fault (`fault_handling`), so it stays visible. (MindCluster's severity *order* for summarising
  several fault types puts it above RestartNPU; that order decides which name a card shows, not
  what happens to a running job.) The switch's "PreSeparate" and NodeD's "PreSeparateFault" are
  the same decision.
- SubHealthFault → L1: handled per the job's subHealthyStrategy, whose default is "ignore".
- ManuallySeparateNPU → L6: a card isolated (after a frequency/duration upgrade) until a person
  releases it; at least as final as SeparateNPU.
- RestartRequestFault → L2 (relayed name of the switch's RestartRequestFaultCodes).
- NormalNPU / NormalNetwork: "no fault". `level_from_name` returns None and `is_healthy_name` says
  so; the device plugin writes them for the ring-mates of a card under hot reset (an entry with an
  empty fault_code), which `device_faults` reads as "no fault of its own".
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from gen.motor.v1 import controller_pb2

L1 = controller_pb2.FAULT_LEVEL_L1
L2 = controller_pb2.FAULT_LEVEL_L2
L3 = controller_pb2.FAULT_LEVEL_L3
L4 = controller_pb2.FAULT_LEVEL_L4
L5 = controller_pb2.FAULT_LEVEL_L5
L6 = controller_pb2.FAULT_LEVEL_L6

VALID_LEVELS: frozenset[int] = frozenset({L1, L2, L3, L4, L5, L6})

# Canonical MindCluster processor handling name of each level (what a device plugin writes).
CANONICAL_NAME: Mapping[int, str] = MappingProxyType(
    {
        L1: "NotHandleFault",
        L2: "RestartRequest",
        L3: "RestartBusiness",
        L4: "FreeRestartNPU",
        L5: "RestartNPU",
        L6: "SeparateNPU",
    }
)

LEVEL_BY_NAME: Mapping[str, int] = MappingProxyType(
    {
        # The documented L1..L6 ladder, by name and by number.
        **{name: level for level, name in CANONICAL_NAME.items()},
        **{f"L{level}": level for level in CANONICAL_NAME},
        # Device plugin names outside the ladder (see the module docstring for each reason).
        "PreSeparateNPU": L1,
        "SubHealthFault": L1,
        "ManuallySeparateNPU": L6,
        # Switch levels (SwitchInfoCfg); "RestartRequest" and "SubHealthFault" are shared above.
        "NotHandle": L1,
        "PreSeparate": L1,
        "Separate": L6,
        "ResetFault": L6,
        "RestartRequestFault": L2,
        # NodeD levels (NodeInfo.FaultDevList[].FaultLevel); "NotHandleFault" is shared above.
        "PreSeparateFault": L1,
        "SeparateFault": L6,
    }
)

# MindCluster writes these for cards that are fine again; they carry no fault.
HEALTHY_NAMES: frozenset[str] = frozenset({"NormalNPU", "NormalNetwork"})

# The names each MindCluster writer uses (what a document of that source may hold).
DEVICE_PLUGIN_NAMES: frozenset[str] = frozenset(CANONICAL_NAME.values()) | {
    "SubHealthFault", "PreSeparateNPU", "ManuallySeparateNPU"}
SWITCH_NAMES: frozenset[str] = frozenset({"NotHandle", "SubHealthFault", "RestartRequest", "PreSeparate", "Separate"})
NODED_NAMES: frozenset[str] = frozenset({"NotHandleFault", "PreSeparateFault", "SeparateFault"})
# The switch's and NodeD's name of a ladder level, where they have one.
SWITCH_NAME_OF_LEVEL: Mapping[int, str] = MappingProxyType({L1: "NotHandle", L2: "RestartRequest", L6: "Separate"})
NODED_NAME_OF_LEVEL: Mapping[int, str] = MappingProxyType({L1: "NotHandleFault", L6: "SeparateFault"})


def level_from_name(name: str) -> int | None:
    """FaultLevel value of a MindCluster handling name or "L1".."L6"; None when unknown or healthy.

    Names are matched exactly (after trimming spaces): MindCluster spells them one way, and a
    near-miss is reported rather than guessed.
    """
    return LEVEL_BY_NAME.get(name.strip())


def is_healthy_name(name: str) -> bool:
    return name.strip() in HEALTHY_NAMES


def is_valid_level(level: int) -> bool:
    return level in VALID_LEVELS


def is_severe(level: int) -> bool:
    """L4–L6: the card (or node) is lost to the running service; RFC §4.2/§4.4 act on these."""
    return L4 <= level <= L6


def level_text(level: int) -> str:
    """'L4' for a valid level, else the enum name or number (for messages)."""
    if level in VALID_LEVELS:
        return f"L{level}"
    try:
        return controller_pb2.FaultLevel.Name(level)
    except ValueError:
        return str(level)
