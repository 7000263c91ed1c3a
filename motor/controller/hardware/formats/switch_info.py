"""The device plugin's `SwitchInfoCfg` (A3/A5 super-node switch) → one whole-node HardwareFault. Pure.

`SwitchFaultInfo` (proto.go; no JSON tags, so Go field names):

    {"FaultCode": [...], "FaultLevel": "Separate", "UpdateTime": <s>, "NodeStatus": "UnHealthy",
     "FaultTimeAndLevelMap": {"<AssembledFaultCode>_<chip>_<port>": {"fault_time": <ms>, "fault_level": "Separate"}}}

- FaultCode items: today each is the JSON text of one switch event (`getSimpleSwitchFaultStr`:
  EventType, AssembledFaultCode "[0x<alarm id>,<fault id|na>,<peer device>,na]", PeerPortDevice,
  PeerPortId, SwitchChipId, SwitchPortId, Severity, Assertion, AlarmRaisedTime in ms); the 2024
  plugin wrote the bare alarm id ("%08x") and had no FaultTimeAndLevelMap.
- FaultLevel: the worst level of the current events: NotHandle, SubHealthFault, RestartRequest,
  PreSeparate, Separate (ResetFault codes are published as Separate). NodeStatus: Healthy,
  SubHealthy, PreSeparate, UnHealthy (while a card is reset the plugin reports Healthy and NotHandle).
- A card type without a switch (and A5 today) writes the empty struct: FaultCode null, FaultLevel "".

The switch joins every NPU of the node, so its fault is the node's (npu_name ""), the RFC's empty
card name. Its codes are the events' alarm ids (hex, as the model normalises them); its time the
latest event time; its level FaultLevel, else the worst per-code level.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from motor.controller.hardware import levels
from motor.controller.hardware.formats.names import FAULT_TYPE_SWITCH, fault_time_ms, is_number
from motor.controller.hardware.model import HardwareFault, HardwareFaultError, normalize_fault_codes

SWITCH_NODE_STATUSES = frozenset({"Healthy", "SubHealthy", "PreSeparate", "UnHealthy"})
_ASSEMBLED_RE = re.compile(r"^\[0x(?P<alarm>[0-9A-Fa-f]{1,8}),[^,\[\]]*,[^,\[\]]*,[^,\[\]]*\]$")
_MS_PER_SEC = 1000.0


def parse_switch_info(raw: Any, node: str, where: str, source: str) -> tuple[list[HardwareFault], list[str]]:
    """The SwitchInfoCfg value (JSON text or decoded) → ([the node's switch fault] or [], problems)."""
    if raw is None or raw == "":
        return [], []
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError as exc:
            return [], [f"{where} is not JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"]
    if not isinstance(raw, Mapping):
        return [], [f"{where} is {type(raw).__name__}, not an object"]
    problems: list[str] = []
    status = raw.get("NodeStatus", "")
    if not isinstance(status, str) or (status and status not in SWITCH_NODE_STATUSES):
        problems.append(f"{where}.NodeStatus={status!r} is not one of {sorted(SWITCH_NODE_STATUSES)}")
    items = raw.get("FaultCode")
    if items is None:
        items = []
    if not isinstance(items, list):
        return [], problems + [f"{where}.FaultCode={items!r} is not a list"]
    codes: set[str] = set()
    times_ms: list[int] = []
    for index, item in enumerate(items):
        code, when_ms, problem = _event(item, f"{where}.FaultCode[{index}]")
        if problem:
            problems.append(problem)
            continue
        codes.add(code)
        if when_ms is not None:
            times_ms.append(when_ms)
    map_levels, map_times, map_problems = _time_map(raw.get("FaultTimeAndLevelMap"), f"{where}.FaultTimeAndLevelMap")
    problems += map_problems
    times_ms += map_times
    level_name = raw.get("FaultLevel", "")
    if not isinstance(level_name, str):
        return [], problems + [f"{where}.FaultLevel={level_name!r} is not a string"]
    if not codes:
        if level_name.strip() and levels.level_from_name(level_name) not in (None, levels.L1):
            problems.append(f"{where}.FaultLevel={level_name!r} but no usable FaultCode: no switch fault taken")
        return [], problems
    level = levels.level_from_name(level_name) if level_name.strip() else None
    if level_name.strip() and level is None:
        return [], problems + [f"{where}.FaultLevel={level_name!r} is not a switch level; switch fault skipped"]
    if level is None:
        if not map_levels:
            return [], problems + [f"{where}: FaultLevel is empty and no per-code level; switch fault skipped"]
        level = max(map_levels)
    try:
        fault = HardwareFault(
            node_name=node,
            npu_name="",
            fault_codes=tuple(sorted(codes)),
            level=level,
            fault_type=FAULT_TYPE_SWITCH,
            fault_handling=level_name.strip(),
            fault_time_unix_sec=max(times_ms) / _MS_PER_SEC if times_ms else 0.0,
            source=source,
        )
    except HardwareFaultError as exc:
        return [], problems + [f"{where}: {exc}; switch fault skipped"]
    return [fault], problems


def alarm_code(assembled: str) -> str | None:
    """'[0x00f103b0,155904,na,na]' → '00F103B0'; None when not an assembled switch code."""
    match = _ASSEMBLED_RE.match(assembled.strip())
    if match is None:
        return None
    return f"{int(match.group('alarm'), 16):08X}"


def _event(item: Any, where: str) -> tuple[str, int | None, str]:
    """One FaultCode item → (alarm id, event time in ms or None, problem)."""
    if not isinstance(item, str):
        return "", None, f"{where}={item!r} is not a string; ignored"
    text = item.strip()
    if text.startswith("{"):
        try:
            event = json.loads(text)
        except json.JSONDecodeError as exc:
            return "", None, f"{where} is not a switch event ({exc.msg}); ignored"
        if not isinstance(event, Mapping):
            return "", None, f"{where} is not a switch event object; ignored"
        assembled = event.get("AssembledFaultCode")
        code = alarm_code(assembled) if isinstance(assembled, str) else None
        if code is None:
            return "", None, f"{where}: AssembledFaultCode={assembled!r} is not [0x<alarm>,<id>,<peer>,na]; ignored"
        raised = event.get("AlarmRaisedTime")
        return code, int(raised) if is_number(raised) and raised > 0 else None, ""
    # The 2024 plugin: the bare alarm id.
    normalized, bad = normalize_fault_codes(text)
    if bad or len(normalized) != 1:
        return "", None, f"{where}={item!r} is neither a switch event nor an alarm id; ignored"
    return normalized[0], None, ""


def _time_map(value: Any, where: str) -> tuple[list[int], list[int], list[str]]:
    """FaultTimeAndLevelMap → (levels, times in ms, problems); bad items dropped."""
    if value is None or value == {}:
        return [], [], []
    if not isinstance(value, Mapping):
        return [], [], [f"{where} is {type(value).__name__}, not an object; ignored"]
    found_levels: list[int] = []
    times: list[int] = []
    problems: list[str] = []
    for key, item in value.items():
        item_where = f"{where}[{key!r}]"
        if not isinstance(item, Mapping):
            problems.append(f"{item_where} is not an object; ignored")
            continue
        when_ms, problem = fault_time_ms(item.get("fault_time"), item_where)
        if when_ms is not None:
            times.append(when_ms)
        elif problem:
            problems.append(problem)
        name = item.get("fault_level")
        if isinstance(name, str) and name.strip():
            level = levels.level_from_name(name)
            if level is None:
                problems.append(f"{item_where}: fault_level={name!r} is not a switch level")
            else:
                found_levels.append(level)
    return found_levels, times, problems
