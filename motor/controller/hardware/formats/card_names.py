"""Card names as the Ascend Device Plugin writes them → the physical card they stand for. Pure.

Every name is `<public prefix><tail>`. The prefix is the device plugin's run mode with a hyphen, or
what replaced it:

- `Ascend910-`, `Ascend310P-`, `Ascend310-`: the run modes (`AscendTools.name`);
- `npu-`: Atlas A5 (run mode `npu`; on A5 the plugin also rewrites any `Ascend910-` to `npu-` and the
  resource `huawei.com/Ascend910` to `huawei.com/npu`, `customname.ReplaceDeviceInfoPublicName`);
- `Ascend310P-V-`, `Ascend310P-VPro-`, `Ascend310P-IPro-`: 310P mixed insert, the product type
  instead of the run mode (`assemble310PMixedPhyDevices`);
- an operator's own prefix: `DevicePublicNamePre` of the plugin's `deviceNameCustomization.json`,
  which replaces `Ascend910-` / `Ascend310-` / `Ascend310P-` everywhere in the published names
  (`hardware_monitor.card_name_prefixes` in Motor, written exactly as in that file, e.g. "custom910-").

The tail names the physical id (`phyId`, the host's id of the chip) in one of three forms:

- `<phyId>`: a physical card (`assemblePhyDevices`), e.g. `Ascend910-3`, `npu-3`, `Ascend310P-V-3`;
- `<phyId>-<index>`: share mode, one of ShareCount slices of the card (`getNPUsByShareMode`, soft
  share `addSoftShareDev`), e.g. `Ascend310P-0-99`, `Ascend910-3-1`;
- `<template>-<vdevId>-<phyId>[_<vgroup>]`: a virtual NPU cut from the card (`assembleSpecVirtualDevice`;
  `AppendVGroupInfo` adds `_<vgroup>` in the pod's AscendReal annotation), template `2c`, `4c.3cpu`,
  `10c.3cpu.16g.ndvpp`, …, e.g. `Ascend910-2c-100-0`.

The physical id is what identifies the card on its node (the plugin's own `GetDeviceID` reads it the
same way): two names of one node stand for the same card when their physical ids are equal. A name
in none of these forms is unknown, and RFC §4.2 says it is not guessed.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

# Run-mode prefixes, then the 310P mixed-insert product types (`Get310PProductType`).
RUN_MODE_PREFIXES: tuple[str, ...] = ("Ascend910-", "Ascend310P-", "Ascend310-", "npu-")
MIXED_310P_PREFIXES: tuple[str, ...] = ("Ascend310P-V-", "Ascend310P-VPro-", "Ascend310P-IPro-")
DEFAULT_PREFIXES: tuple[str, ...] = RUN_MODE_PREFIXES + MIXED_310P_PREFIXES

# DevicePublicNamePre as the device plugin accepts it (`customname.deviceNamePattern`).
CUSTOM_PREFIX_RE = re.compile(r"^[a-zA-Z][a-zA-Z0-9-]{1,15}$")

PHYSICAL = "physical"
SHARE = "share"
VIRTUAL = "virtual"

_ID = r"(0|[1-9][0-9]{0,4})"
# The virtual templates' device types (`GetTemplateName2DeviceTypeMap`): cores, then cpus, memory, dvpp.
_TEMPLATE = r"[1-9][0-9]?c(?:\.[1-9][0-9]?cpu)?(?:\.[1-9][0-9]{0,2}g)?(?:\.n?dvpp)?"
_TAILS = (
    (PHYSICAL, re.compile(rf"^{_ID}$")),
    (SHARE, re.compile(rf"^{_ID}-{_ID}$")),
    (VIRTUAL, re.compile(rf"^(?P<template>{_TEMPLATE})-{_ID}-{_ID}(?:_{_ID})?$")),
)


@dataclass(frozen=True)
class CardName:
    """One published name and the physical card behind it."""

    name: str
    prefix: str
    phy_id: int
    form: str  # PHYSICAL, SHARE or VIRTUAL

    def same_card(self, other: CardName) -> bool:
        """On one node: the same physical card (a vNPU or share slice is its card's)."""
        return self.phy_id == other.phy_id


class CardNames:
    """The prefixes in use (MindCluster's and the operator's) and the parser over them."""

    def __init__(self, custom_prefixes: Iterable[str] = ()) -> None:
        custom = tuple(dict.fromkeys(custom_prefixes))
        bad = [p for p in custom if not CUSTOM_PREFIX_RE.match(p)]
        if bad:
            raise ValueError(f"card name prefixes {bad!r} are not device plugin prefixes "
                             f"(DevicePublicNamePre: {CUSTOM_PREFIX_RE.pattern})")
        self.custom_prefixes = custom
        # Longest first: "Ascend310P-VPro-3" is a mixed-insert card, not Ascend310P- with tail "VPro-3".
        self.prefixes = tuple(sorted(set(DEFAULT_PREFIXES + custom), key=lambda p: (-len(p), p)))

    def parse(self, name: str) -> CardName | None:
        """The physical card of a published name; None when the name is in no known form."""
        for prefix in self.prefixes:
            if not name.startswith(prefix):
                continue
            tail = name[len(prefix):]
            for form, pattern in _TAILS:
                match = pattern.match(tail)
                if match is None:
                    continue
                phy = match.group(3) if form == VIRTUAL else match.group(1)
                return CardName(name, prefix, int(phy), form)
        return None

    def describe_forms(self) -> str:
        """For messages: what a known name looks like."""
        return (f"<prefix><phyId>, <prefix><phyId>-<index> or <prefix><template>-<vdevId>-<phyId> with prefix "
                f"one of {list(self.prefixes)}")


DEFAULT_CARD_NAMES = CardNames()


def parse_card_name(name: str, card_names: CardNames = DEFAULT_CARD_NAMES) -> CardName | None:
    return card_names.parse(name)


def split_card_list(value: str) -> list[str]:
    """'Ascend910-0,Ascend910-1,' → the names, as the device plugin joins them (comma, no spaces)."""
    return [part.strip() for part in value.split(",") if part.strip()]
