"""Card names as the Ascend Device Plugin writes them (ascendcommon.go, customname) → physical card."""

from __future__ import annotations

import pytest

from motor.common.config.loader import ConfigError, build_config

from motor.controller.config import ControllerConfig
from motor.controller.hardware.formats.card_names import (
    DEFAULT_CARD_NAMES,
    PHYSICAL,
    SHARE,
    VIRTUAL,
    CardNames,
    parse_card_name,
    split_card_list,
)

CUSTOM = CardNames(["custom910-", "mynpu"])


@pytest.mark.parametrize(
    ("name", "prefix", "phy_id", "form"),
    [
        # assemblePhyDevices: "<run mode>-<phyId>"
        ("Ascend910-0", "Ascend910-", 0, PHYSICAL),
        ("Ascend910-15", "Ascend910-", 15, PHYSICAL),
        ("Ascend310P-3", "Ascend310P-", 3, PHYSICAL),
        ("Ascend310-63", "Ascend310-", 63, PHYSICAL),
        # Atlas A5: run mode "npu", and Ascend910- rewritten to npu- (ReplaceDeviceInfoPublicName)
        ("npu-1", "npu-", 1, PHYSICAL),
        # 310P mixed insert: the product type (Get310PProductType) instead of the run mode
        ("Ascend310P-V-3", "Ascend310P-V-", 3, PHYSICAL),
        ("Ascend310P-VPro-2", "Ascend310P-VPro-", 2, PHYSICAL),
        ("Ascend310P-IPro-0", "Ascend310P-IPro-", 0, PHYSICAL),
        # share mode "<name>-<phyId>-<index>" (getNPUsByShareMode) and soft share (addSoftShareDev)
        ("Ascend310P-0-99", "Ascend310P-", 0, SHARE),
        ("Ascend910-3-1", "Ascend910-", 3, SHARE),
        ("npu-7-0", "npu-", 7, SHARE),
        # vNPU "<name>-<template>-<vdevId>-<phyId>" (assembleSpecVirtualDevice), "_<vgroup>" in AscendReal
        ("Ascend910-2c-100-0", "Ascend910-", 0, VIRTUAL),
        ("Ascend910-16c-111-7", "Ascend910-", 7, VIRTUAL),
        ("Ascend910-5c.1cpu.8g-101-2", "Ascend910-", 2, VIRTUAL),
        ("Ascend910-10c.3cpu.16g.ndvpp-102-3", "Ascend910-", 3, VIRTUAL),
        ("Ascend310P-4c.4cpu.dvpp-100-1", "Ascend310P-", 1, VIRTUAL),
        ("Ascend310P-2c.1cpu-103-1", "Ascend310P-", 1, VIRTUAL),
        ("Ascend910-2c-100-0_1", "Ascend910-", 0, VIRTUAL),
    ],
)
def test_every_published_form_names_its_physical_card(name: str, prefix: str, phy_id: int, form: str) -> None:
    card = parse_card_name(name)
    assert card is not None, name
    assert (card.name, card.prefix, card.phy_id, card.form) == (name, prefix, phy_id, form)


@pytest.mark.parametrize(
    "name",
    ["", "davinci-x", "davinci0", "0", "3", "ascend910-2", "Ascend910", "Ascend910-", "Ascend910-2 ", " Ascend910-2",
     "Ascend910B-2", "Ascend910-x", "Ascend910-01", "Ascend910-2-", "Ascend910-2c-100", "Ascend910-2c-100-0-1",
     "Ascend910-2x-100-0", "npu", "npu-", "NPU-1", "custom910-3", "Ascend310P-V", "Ascend310P-X-3",
     "Ascend910-1,Ascend910-2", "huawei.com/Ascend910", "npu-core-0"],
)
def test_unknown_forms_are_not_guessed(name: str) -> None:
    assert parse_card_name(name) is None, name


def test_custom_prefixes_as_written_in_device_name_customization() -> None:
    # DevicePublicNamePre replaces "Ascend910-" in every published name (vNPUs and slices too).
    assert CUSTOM.parse("custom910-3") == CUSTOM.parse("custom910-3")
    got = {n: (c.prefix, c.phy_id, c.form) for n in ("custom910-3", "custom910-2c-100-5", "custom910-1-0", "mynpu4")
           if (c := CUSTOM.parse(n)) is not None}
    assert got == {"custom910-3": ("custom910-", 3, PHYSICAL), "custom910-2c-100-5": ("custom910-", 5, VIRTUAL),
                   "custom910-1-0": ("custom910-", 1, SHARE), "mynpu4": ("mynpu", 4, PHYSICAL)}
    # MindCluster's own forms stay known.
    assert CUSTOM.parse("Ascend910-1") is not None and CUSTOM.parse("npu-1") is not None
    assert DEFAULT_CARD_NAMES.parse("custom910-3") is None


def test_longest_prefix_wins() -> None:
    assert CardNames().prefixes[:3] == ("Ascend310P-IPro-", "Ascend310P-VPro-", "Ascend310P-V-")
    card = parse_card_name("Ascend310P-VPro-3")
    assert card is not None and card.prefix == "Ascend310P-VPro-"


def test_same_card_is_the_physical_id() -> None:
    cards = [parse_card_name(n) for n in ("Ascend910-2", "Ascend910-2c-100-2", "Ascend910-2-1")]
    assert all(c is not None for c in cards)
    first = cards[0]
    assert first is not None and all(first.same_card(c) for c in cards if c is not None)
    other = parse_card_name("Ascend910-3")
    assert other is not None and not first.same_card(other)


@pytest.mark.parametrize("prefix", ["", "9npu-", "n", "x" * 17, "bad_prefix-", "npu/", "with space-"])
def test_bad_custom_prefixes_are_refused(prefix: str) -> None:
    with pytest.raises(ValueError, match="not device plugin prefixes"):
        CardNames([prefix])
    with pytest.raises(ConfigError, match=r"hardware_monitor\.card_name_prefixes"):
        build_config(ControllerConfig, {"hardware_monitor": {"card_name_prefixes": [prefix]}})


def test_config_takes_custom_prefixes() -> None:
    cfg = build_config(ControllerConfig, {"hardware_monitor": {"card_name_prefixes": ["custom910-"]}})
    assert cfg.hardware_monitor.card_name_prefixes == ["custom910-"]
    assert ControllerConfig().hardware_monitor.card_name_prefixes == []


def test_card_lists_split_like_the_plugin_joins() -> None:
    assert split_card_list("Ascend910-0,Ascend910-1") == ["Ascend910-0", "Ascend910-1"]
    assert split_card_list("") == [] and split_card_list(" npu-1 ,,") == ["npu-1"]


def test_describe_forms_names_the_prefixes() -> None:
    text = CUSTOM.describe_forms()
    assert "custom910-" in text and "npu-" in text and "<template>" in text
