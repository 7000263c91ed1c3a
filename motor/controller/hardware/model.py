"""HardwareFault: one MindCluster-shaped card or node fault, whatever source it came from. Pure.

Identity is `key` = (fault codes, npu_name, node_name): several cards reporting the same fault code
stay distinct faults (RFC §4.2), and so does one card name on two nodes.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from gen.motor.v1 import controller_pb2
from motor.controller.hardware import levels

FaultKey = tuple[tuple[str, ...], str, str]

# MindCluster fault codes are hex event ids ("80E18402"; NodeD's IPMI codes and the switch's alarm
# ids too), plus words Motor uses for conditions without an event id ("NodeNotReady").
_CODE_RE = re.compile(r"^[A-Za-z0-9_]{1,64}$")
_HEX_RE = re.compile(r"^(0[xX])?[0-9A-Fa-f]+$")


class HardwareFaultError(ValueError):
    """A hardware fault report is malformed; the message names the field and value."""


def normalize_fault_codes(text: str) -> tuple[tuple[str, ...], list[str]]:
    """'a8028801, 80E18402,,' → (('80E18402', 'A8028801'), problems).

    Hex codes are upper-cased and a 0x prefix dropped, words are kept as written, duplicates
    removed, and the result sorted so the same set always makes the same key whatever order the
    device plugin wrote. Tokens that are not codes are left out and named in problems.
    """
    codes: set[str] = set()
    problems: list[str] = []
    for raw in text.split(","):
        token = raw.strip()
        if not token:
            continue
        if not _CODE_RE.match(token):
            problems.append(f"fault code {token!r} is not a hex code or a word")
            continue
        if _HEX_RE.match(token):
            token = token.upper().removeprefix("0X")
        codes.add(token)
    return tuple(sorted(codes)), problems


@dataclass(frozen=True)
class HardwareFault:
    node_name: str
    # Card name as the device plugin writes it, e.g. "Ascend910-3", "npu-3"; "" means the whole node.
    npu_name: str
    fault_codes: tuple[str, ...]
    # A controller_pb2.FaultLevel value, L1..L6.
    level: int
    fault_type: str = ""
    fault_handling: str = ""
    # When the fault (last) happened; 0 when the source did not say.
    fault_time_unix_sec: float = 0.0
    source: str = ""

    def __post_init__(self) -> None:
        if not self.node_name:
            raise HardwareFaultError("node_name is empty")
        if not levels.is_valid_level(self.level):
            raise HardwareFaultError(
                f"level={levels.level_text(self.level)} is not one of FAULT_LEVEL_L1..FAULT_LEVEL_L6"
            )
        if not isinstance(self.fault_codes, tuple) or not all(isinstance(c, str) for c in self.fault_codes):
            raise HardwareFaultError(f"fault_codes={self.fault_codes!r} is not a tuple of strings")
        if not math.isfinite(self.fault_time_unix_sec) or self.fault_time_unix_sec < 0:
            raise HardwareFaultError(f"fault_time_unix_sec={self.fault_time_unix_sec!r} is not a time")

    @property
    def key(self) -> FaultKey:
        return (self.fault_codes, self.npu_name, self.node_name)

    @property
    def fault_code(self) -> str:
        """Comma-joined, as MindCluster writes it."""
        return ",".join(self.fault_codes)

    @property
    def severe(self) -> bool:
        return levels.is_severe(self.level)

    @property
    def whole_node(self) -> bool:
        return self.npu_name == ""

    def describe(self) -> str:
        """One line for logs and RPC answers."""
        return (
            f"node={self.node_name} npu={self.npu_name or '<node>'} codes={self.fault_code or '-'} "
            f"level={levels.level_text(self.level)} handling={self.fault_handling or '-'} "
            f"type={self.fault_type or '-'} source={self.source or '-'}"
        )

    def to_request(self) -> controller_pb2.ReportHardwareFaultRequest:
        return controller_pb2.ReportHardwareFaultRequest(
            node_name=self.node_name,
            npu_name=self.npu_name,
            fault_code=self.fault_code,
            level=self.level,
            fault_type=self.fault_type,
            fault_handling=self.fault_handling,
            fault_time_unix_sec=self.fault_time_unix_sec,
            source=self.source,
        )

    @classmethod
    def from_request(
        cls, req: controller_pb2.ReportHardwareFaultRequest, now_sec: float, default_source: str = "rpc"
    ) -> HardwareFault:
        """Validates a ReportHardwareFault request; raises HardwareFaultError naming the bad field.

        A zero fault time means "now" (the proto's contract). The card name is not checked here:
        an unknown format is the resolver's call (RFC §4.2: not guessed, original strategy).
        """
        if not req.node_name.strip():
            raise HardwareFaultError(f"node_name={req.node_name!r} is empty")
        if req.node_name != req.node_name.strip() or req.npu_name != req.npu_name.strip():
            raise HardwareFaultError(
                f"node_name={req.node_name!r} / npu_name={req.npu_name!r} have surrounding spaces"
            )
        if not levels.is_valid_level(req.level):
            raise HardwareFaultError(
                f"level={levels.level_text(req.level)} is not one of FAULT_LEVEL_L1..FAULT_LEVEL_L6"
            )
        codes, problems = normalize_fault_codes(req.fault_code)
        if problems:
            raise HardwareFaultError(f"fault_code={req.fault_code!r}: " + "; ".join(problems))
        when = req.fault_time_unix_sec
        if not math.isfinite(when) or when < 0:
            raise HardwareFaultError(f"fault_time_unix_sec={when!r} must be a time >= 0 (0 means now)")
        # fault_handling is informational (the level decides), so a name this table does not know
        # yet (a newer MindCluster relayed as is) is kept rather than refused.
        return cls(
            node_name=req.node_name,
            npu_name=req.npu_name,
            fault_codes=codes,
            level=req.level,
            fault_type=req.fault_type,
            fault_handling=req.fault_handling,
            fault_time_unix_sec=when if when > 0 else now_sec,
            source=req.source or default_source,
        )
