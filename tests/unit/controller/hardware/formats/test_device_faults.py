"""The device plugin's DeviceFault entries of a `-Fault` list: levels, codes and times from every field
that carries them, and every malformed entry or item skipped with a problem naming it."""

from __future__ import annotations

import json

from motor.controller.hardware import levels
from motor.controller.hardware.formats.configmap import parse_configmap

from ..samples import NODE, device_info_cfg, device_info_text, device_list


def _entry(**overrides):
    entry = {
        "fault_type": "CardUnhealthy", "npu_name": "Ascend910-3", "large_model_fault_level": "RestartNPU",
        "fault_level": "RestartNPU", "fault_handling": "RestartNPU", "fault_code": "80CB8002",
        "fault_time_and_level_map": {"80CB8002": {"fault_time": 1760000500000, "fault_level": "RestartNPU"}},
    }
    entry.update(overrides)
    return {k: v for k, v in entry.items() if v is not _DROP}


_DROP = object()


def _doc_with(entries) -> str:
    return device_info_cfg(device_info_text(device_list(faults=json.dumps(entries, separators=(",", ":")))), check_code="")


def test_bad_entries_are_skipped_and_named_good_ones_kept() -> None:
    good = _entry()
    entries = [
        "Ascend910-0",                                                    # not an object
        _entry(npu_name=4),                                               # npu_name not a string
        _entry(npu_name="Ascend910-1", fault_handling="ExplodeNPU"),      # unknown level name
        _entry(npu_name=""),                                              # no card
        _entry(npu_name="Ascend910-4", fault_code=["80CB8002"]),          # code not a string
        _entry(npu_name="Ascend910-5", fault_type=7),                     # fault_type not a string
        _entry(npu_name="Ascend910-6", fault_handling="", fault_level="", large_model_fault_level="",
               fault_time_and_level_map={}),                              # no level anywhere
        _entry(npu_name="Ascend910-7", fault_level=3, fault_handling=""),  # level not a string
        good,
    ]
    faults, problems = parse_configmap(_doc_with(entries), node_name=NODE)
    assert [(f.npu_name, f.fault_codes, f.level) for f in faults] == [("Ascend910-3", ("80CB8002",), levels.L5)]
    assert len(problems) == 8, problems
    where = '["huawei.com/Ascend910-Fault"]'
    assert f"{where}[0] is str, not an object" in problems[0]
    assert "npu_name=4 is not a string" in problems[1]
    assert "npu_name='Ascend910-1'" in problems[2] and "fault_handling='ExplodeNPU' is not a known MindCluster level" in problems[2]
    assert f"{where}[3]: npu_name=''" in problems[3] and "names a card in every entry" in problems[3]
    assert "fault_code=['80CB8002'] is not a comma-joined string" in problems[4]
    assert "fault_type=7" in problems[5]
    assert "Ascend910-6" in problems[6] and "no fault_handling/fault_level/large_model_fault_level" in problems[6]
    assert "fault_level=3 is not a string" in problems[7]
    assert all("skipped" in p for p in problems)


def test_an_entry_without_any_code_keeps_its_level() -> None:
    # The plugin writes fault_code "" when a card's level comes from its frequency/duration rules only.
    faults, problems = parse_configmap(_doc_with([_entry(fault_code="", fault_time_and_level_map={})]), node_name=NODE)
    assert problems == []
    assert [(f.npu_name, f.fault_codes, f.level) for f in faults] == [("Ascend910-3", (), levels.L5)]


def test_partly_bad_codes_keep_the_good_ones() -> None:
    faults, problems = parse_configmap(_doc_with([_entry(fault_code=" 80cb8002 ,8O;X,, 0x80e18402")]), node_name=NODE)
    assert faults[0].fault_codes == ("80CB8002", "80E18402")
    assert len(problems) == 1 and "'8O;X'" in problems[0]


def test_bad_time_map_items_are_dropped_entry_kept() -> None:
    entry = _entry(
        fault_code="80CB8002,80E18402",
        fault_time_and_level_map={
            "80CB8002": {"fault_time": "yesterday", "fault_level": "RestartNPU"},
            "80E18402": {"fault_time": 1760000600000, "fault_level": "SeparateNPU"},
            "bad key!": {"fault_time": 1, "fault_level": "RestartNPU"},
            "80C98009": "not an object",
        },
    )
    faults, problems = parse_configmap(_doc_with([entry]), node_name=NODE)
    assert [f.fault_time_unix_sec for f in faults] == [1760000600.0]
    assert len(problems) == 3
    assert "fault_time='yesterday'" in problems[0]
    assert "'bad key!'" in problems[1] and "'80C98009'" in problems[2]


def test_level_from_time_map_when_entry_levels_empty() -> None:
    entry = _entry(
        fault_handling="", fault_level="", large_model_fault_level="", fault_code="80CB8002,80E18402",
        fault_time_and_level_map={
            "80CB8002": {"fault_time": 1760000000000, "fault_level": "RestartNPU"},
            "80E18402": {"fault_time": 1760000000000, "fault_level": "SeparateNPU"},
        },
    )
    faults, problems = parse_configmap(_doc_with([entry]), node_name=NODE)
    assert problems == [] and faults[0].level == levels.L6 and faults[0].fault_handling == ""


def test_codes_from_time_map_when_fault_code_empty() -> None:
    faults, problems = parse_configmap(_doc_with([_entry(fault_code="")]), node_name=NODE)
    assert problems == [] and faults[0].fault_codes == ("80CB8002",)


def test_fault_handling_wins_over_other_level_fields() -> None:
    entry = _entry(fault_handling="SeparateNPU", fault_level="RestartNPU", large_model_fault_level="NotHandleFault")
    faults, _ = parse_configmap(_doc_with([entry]), node_name=NODE)
    assert faults[0].level == levels.L6


def test_healthy_entries_are_skipped_quietly() -> None:
    assert parse_configmap(_doc_with([_entry(fault_handling="NormalNPU")]), node_name=NODE) == ([], [])


def test_no_time_map_means_time_zero_not_update_time() -> None:
    faults, problems = parse_configmap(_doc_with([_entry(fault_time_and_level_map=_DROP)]), node_name=NODE)
    assert problems == [] and faults[0].fault_time_unix_sec == 0.0


def test_duplicate_identity_keeps_the_worse() -> None:
    entries = [_entry(), _entry(fault_handling="SeparateNPU")]
    faults, _ = parse_configmap(_doc_with(entries), node_name=NODE)
    assert len(faults) == 1 and faults[0].level == levels.L6
