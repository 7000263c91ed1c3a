"""The one level table: MindCluster names and L1..L6 → FaultLevel, and what counts as severe."""

from __future__ import annotations

import pytest

from gen.motor.v1 import controller_pb2
from motor.controller.hardware import levels


@pytest.mark.parametrize(
    ("name", "level"),
    [
        ("NotHandleFault", controller_pb2.FAULT_LEVEL_L1),
        ("RestartRequest", controller_pb2.FAULT_LEVEL_L2),
        ("RestartBusiness", controller_pb2.FAULT_LEVEL_L3),
        ("FreeRestartNPU", controller_pb2.FAULT_LEVEL_L4),
        ("RestartNPU", controller_pb2.FAULT_LEVEL_L5),
        ("SeparateNPU", controller_pb2.FAULT_LEVEL_L6),
        ("L1", controller_pb2.FAULT_LEVEL_L1),
        ("L4", controller_pb2.FAULT_LEVEL_L4),
        ("L6", controller_pb2.FAULT_LEVEL_L6),
        ("PreSeparateNPU", controller_pb2.FAULT_LEVEL_L1),
        ("SubHealthFault", controller_pb2.FAULT_LEVEL_L1),
        ("ManuallySeparateNPU", controller_pb2.FAULT_LEVEL_L6),
        # Switch levels (convertToSwitchLevelStr); ResetFault codes are published as Separate.
        ("NotHandle", controller_pb2.FAULT_LEVEL_L1),
        ("PreSeparate", controller_pb2.FAULT_LEVEL_L1),
        ("Separate", controller_pb2.FAULT_LEVEL_L6),
        ("ResetFault", controller_pb2.FAULT_LEVEL_L6),
        ("RestartRequestFault", controller_pb2.FAULT_LEVEL_L2),
        # NodeD levels (getFaultLevel)
        ("PreSeparateFault", controller_pb2.FAULT_LEVEL_L1),
        ("SeparateFault", controller_pb2.FAULT_LEVEL_L6),
        (" SeparateNPU ", controller_pb2.FAULT_LEVEL_L6),
    ],
)
def test_names_map_to_levels(name: str, level: int) -> None:
    assert levels.level_from_name(name) == level


@pytest.mark.parametrize("name", ["", "separatenpu", "L0", "L7", "l4", "separate", "NormalNPU", "NormalNetwork",
                                  "Healthy", "UnHealthy", "SubHealthy"])
def test_unknown_and_healthy_names_have_no_level(name: str) -> None:
    assert levels.level_from_name(name) is None


def test_healthy_names() -> None:
    assert levels.is_healthy_name("NormalNPU") and levels.is_healthy_name("NormalNetwork")
    assert not levels.is_healthy_name("NotHandleFault")


def test_canonical_names_round_trip() -> None:
    for level, name in levels.CANONICAL_NAME.items():
        assert levels.level_from_name(name) == level
        assert levels.level_from_name(f"L{level}") == level


@pytest.mark.parametrize(
    ("level", "severe"),
    [(0, False), (1, False), (2, False), (3, False), (4, True), (5, True), (6, True), (7, False)],
)
def test_is_severe_is_l4_to_l6(level: int, severe: bool) -> None:
    assert levels.is_severe(level) is severe


def test_level_text() -> None:
    assert levels.level_text(controller_pb2.FAULT_LEVEL_L5) == "L5"
    assert levels.level_text(0) == "FAULT_LEVEL_UNSPECIFIED"
    assert levels.level_text(42) == "42"


def test_the_table_is_read_only() -> None:
    with pytest.raises(TypeError):
        levels.LEVEL_BY_NAME["Mine"] = 1  # type: ignore[index]


# Every name each MindCluster writer uses, with its level (device plugin fault_code.go and device.go,
# NodeD constants.go): the table knows all of them, and nothing else is in the per-source sets.
SOURCE_NAMES = {
    "device plugin": (levels.DEVICE_PLUGIN_NAMES, {
        "NotHandleFault": 1, "RestartRequest": 2, "RestartBusiness": 3, "FreeRestartNPU": 4, "RestartNPU": 5,
        "SeparateNPU": 6, "SubHealthFault": 1, "PreSeparateNPU": 1, "ManuallySeparateNPU": 6}),
    "switch": (levels.SWITCH_NAMES, {"NotHandle": 1, "SubHealthFault": 1, "RestartRequest": 2, "PreSeparate": 1,
                                     "Separate": 6}),
    "NodeD": (levels.NODED_NAMES, {"NotHandleFault": 1, "PreSeparateFault": 1, "SeparateFault": 6}),
}


@pytest.mark.parametrize("source", sorted(SOURCE_NAMES))
def test_every_name_of_every_source(source: str) -> None:
    names, expected = SOURCE_NAMES[source]
    assert set(names) == set(expected)
    assert {name: levels.level_from_name(name) for name in names} == expected


def test_pre_separate_npu_placement() -> None:
    # Decision (levels docstring): MindCluster does not act on a running job for PreSeparateNPU (the
    # device plugin keeps a used card healthy, ClusterD filters it with NotHandleFault), so Motor logs
    # it (L1) and lets the engine's FT status speak; the same for the switch's and NodeD's names.
    for name in ("PreSeparateNPU", "PreSeparate", "PreSeparateFault"):
        level = levels.level_from_name(name)
        assert level == controller_pb2.FAULT_LEVEL_L1 and not levels.is_severe(level)


def test_source_names_of_ladder_levels() -> None:
    assert dict(levels.SWITCH_NAME_OF_LEVEL) == {1: "NotHandle", 2: "RestartRequest", 6: "Separate"}
    assert dict(levels.NODED_NAME_OF_LEVEL) == {1: "NotHandleFault", 6: "SeparateFault"}
    for table in (levels.SWITCH_NAME_OF_LEVEL, levels.NODED_NAME_OF_LEVEL):
        assert all(levels.level_from_name(name) == level for level, name in table.items())
