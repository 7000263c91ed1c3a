"""One `huawei.com/<resource>-Fault` list of a DeviceInfoCfg → HardwareFaults. Pure.

Each entry is the device plugin's `DeviceFault` (JSON tags): fault_type (CardUnhealthy |
CardNetworkUnhealthy), npu_name (always a card), large_model_fault_level / fault_level /
fault_handling (the same value; the plugin's documentation recommends fault_handling; 2023's plugin
wrote no fault_handling), fault_code (comma-joined hex, upper case; empty when the card has no code
of its own), and since late 2024 fault_time_and_level_map {code: {fault_time (ms), fault_level}}.

A NormalNPU / NormalNetwork entry is no fault (the plugin writes one, with an empty fault_code, for
each ring-mate of a card under hot reset; the reset itself is read from the -Recovering list by
`device_info`). An entry without npu_name is not the device plugin's: Volcano's node entry (NodeUnhealthy,
heartbeatTimeOut) has that shape, and Motor does not read Volcano's documents (see `names`).
A malformed entry is skipped with a problem naming it; the time map's bad items are dropped one by one.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from motor.controller.hardware import levels
from motor.controller.hardware.formats.names import VOLCANO_NODE_FAULT_TYPE, fault_time_ms
from motor.controller.hardware.model import HardwareFault, HardwareFaultError, normalize_fault_codes

# Field order in which the level is read; the documentation recommends fault_handling.
_LEVEL_FIELDS = ("fault_handling", "fault_level", "large_model_fault_level")
_MS_PER_SEC = 1000.0


def decode_fault_list(value: Any, where: str) -> tuple[list[Any], list[str]]:
    """The list is a JSON string inside the DeviceInfoCfg JSON (or already a list in a dump)."""
    if isinstance(value, str):
        if not value.strip():
            return [], []
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            return [], [f"{where} is not a JSON array ({exc.msg} at column {exc.colno})"]
    if value is None:
        return [], []
    if not isinstance(value, list):
        return [], [f"{where} is {type(value).__name__}, not a list of faults"]
    return value, []


def parse_fault_entry(entry: Any, where: str, node: str, source: str) -> tuple[HardwareFault | None, list[str]]:
    """One entry → (fault or None when skipped or healthy, problems)."""
    if not isinstance(entry, Mapping):
        return None, [f"{where} is {type(entry).__name__}, not an object; skipped"]
    npu_name = entry.get("npu_name", "")
    if not isinstance(npu_name, str):
        return None, [f"{where}: npu_name={npu_name!r} is not a string; skipped"]
    npu_name = npu_name.strip()
    fault_type = entry.get("fault_type", "")
    if not isinstance(fault_type, str):
        return None, [f"{where}: fault_type={fault_type!r} is not a string; skipped"]
    if not npu_name:
        whose = " (Volcano's node entry, not read)" if fault_type == VOLCANO_NODE_FAULT_TYPE else ""
        return None, [(f"{where}: npu_name='' with fault_type={fault_type!r}: the device plugin names a card in "
                       f"every entry{whose}; skipped")]
    where = f"{where} (npu_name={npu_name!r})"
    problems: list[str] = []

    times_ms, map_levels, map_codes, map_problems = _parse_time_map(entry.get("fault_time_and_level_map"), where)
    problems += map_problems

    handling = ""
    level: int | None = None
    for field_name in _LEVEL_FIELDS:
        value = entry.get(field_name, "")
        if not isinstance(value, str):
            return None, problems + [f"{where}: {field_name}={value!r} is not a string; skipped"]
        if not value.strip():
            continue
        if levels.is_healthy_name(value):
            # No fault of its own (e.g. a ring-mate of a card under hot reset, empty fault_code).
            return None, problems
        level = levels.level_from_name(value)
        if level is None:
            return None, problems + [f"{where}: {field_name}={value!r} is not a known MindCluster level; skipped"]
        handling = value.strip()
        break

    raw_codes = entry.get("fault_code", "")
    if not isinstance(raw_codes, str):
        return None, problems + [f"{where}: fault_code={raw_codes!r} is not a comma-joined string; skipped"]
    codes, code_problems = normalize_fault_codes(raw_codes)
    problems += [f"{where}: {p}" for p in code_problems]
    if not codes:
        codes = tuple(sorted(map_codes))

    if level is None:
        if map_levels:
            level = max(map_levels)
        else:
            return None, problems + [f"{where}: no fault_handling/fault_level/large_model_fault_level; skipped"]
    # Without per-code times the fault time stays 0 ("not said"): UpdateTime changes on every
    # refresh of the document and would make an unchanged fault look new each time.
    when_sec = max(times_ms) / _MS_PER_SEC if times_ms else 0.0
    try:
        fault = HardwareFault(
            node_name=node,
            npu_name=npu_name,
            fault_codes=codes,
            level=level,
            fault_type=fault_type,
            fault_handling=handling,
            fault_time_unix_sec=when_sec,
            source=source,
        )
    except HardwareFaultError as exc:
        return None, problems + [f"{where}: {exc}; skipped"]
    return fault, problems


def _parse_time_map(value: Any, where: str) -> tuple[list[int], list[int], set[str], list[str]]:
    """fault_time_and_level_map → (fault times in ms, levels, codes, problems); bad items dropped."""
    if value is None or value == {}:
        return [], [], set(), []
    if not isinstance(value, Mapping):
        return [], [], set(), [f"{where}: fault_time_and_level_map is {type(value).__name__}, not an object; ignored"]
    times: list[int] = []
    found_levels: list[int] = []
    codes: set[str] = set()
    problems: list[str] = []
    for code, item in value.items():
        item_where = f"{where}: fault_time_and_level_map[{code!r}]"
        if not isinstance(item, Mapping):
            problems.append(f"{item_where} is not an object; ignored")
            continue
        normalized, code_problems = normalize_fault_codes(str(code))
        if code_problems or len(normalized) != 1:
            problems.append(f"{item_where}: key is not one fault code; ignored")
            continue
        codes.add(normalized[0])
        when_ms, problem = fault_time_ms(item.get("fault_time"), item_where)
        if when_ms is not None:
            times.append(when_ms)
        elif problem:
            problems.append(problem)
        level_name = item.get("fault_level")
        if isinstance(level_name, str) and level_name:
            level = levels.level_from_name(level_name)
            if level is not None:
                found_levels.append(level)
            elif not levels.is_healthy_name(level_name):
                problems.append(f"{item_where}: fault_level={level_name!r} is not a known MindCluster level")
    return times, found_levels, codes, problems
