"""The one table from MindCluster fault handling names (and "L1".."L6") to Motor's `FaultLevel`.

MindCluster's Ascend Device Plugin writes, per faulty card, three fields that mean the same thing
(`large_model_fault_level`, `fault_level`, `fault_handling`; its documentation recommends reading
`fault_handling`). The six processor levels are documented as L1..L6 in this order (MindX DL 5.0
"故障级别及处理": L1 NotHandleFault … L6 SeparateNPU), and the proto's FaultLevel follows it.

MindCluster also has names outside that ladder. They are mapped here, each with the reason:

- PreSeparateNPU ("暂不影响业务，后续不再调度任务到该芯片": the running service is not affected,
  only new scheduling avoids the card) → L1. Motor acts on impact to running ranks; if the card
  does break a collective, the engine's own FT status reports it (software path), and hardware
  evidence only corroborates. Its fault_handling text is kept on the fault, so it stays visible.
- SubHealthFault (handled per the job's subHealthyStrategy, whose default is "ignore") → L1.
- ManuallySeparateNPU (a card isolated after a frequency/duration upgrade until a person releases
  it; also a ConfigMap key listing such cards) → L6: at least as final as SeparateNPU.
- Node-level names written by NodeD / switch faults (for reports relayed over the RPC):
  PreSeparateFault → L1 (same reasoning as PreSeparateNPU), SeparateFault → L6,
  ResetFault → L5 (the device must be reset), RestartRequestFault → L2.
- NormalNPU / NormalNetwork are MindCluster's "healthy" states, not faults: `level_from_name`
  returns None for them and `is_healthy_name` says so, so a parser can skip them quietly.
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
        # Names outside the ladder (see the module docstring for each reason).
        "PreSeparateNPU": L1,
        "SubHealthFault": L1,
        "ManuallySeparateNPU": L6,
        "PreSeparateFault": L1,
        "SeparateFault": L6,
        "ResetFault": L5,
        "RestartRequestFault": L2,
    }
)

# MindCluster writes these for cards that are fine again; they carry no fault.
HEALTHY_NAMES: frozenset[str] = frozenset({"NormalNPU", "NormalNetwork"})


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
