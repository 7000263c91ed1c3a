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
        ("PreSeparateFault", controller_pb2.FAULT_LEVEL_L1),
        ("SeparateFault", controller_pb2.FAULT_LEVEL_L6),
        ("ResetFault", controller_pb2.FAULT_LEVEL_L5),
        ("RestartRequestFault", controller_pb2.FAULT_LEVEL_L2),
        (" SeparateNPU ", controller_pb2.FAULT_LEVEL_L6),
    ],
)
def test_names_map_to_levels(name: str, level: int) -> None:
    assert levels.level_from_name(name) == level


@pytest.mark.parametrize("name", ["", "separatenpu", "L0", "L7", "l4", "Separate", "NormalNPU", "NormalNetwork"])
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
