"""The device plugin's device-info ConfigMap → HardwareFaults. Pure.

`kube-system/mindx-dl-deviceinfo-<node>` (`NodeDeviceInfoCache`, field names as in the Go struct;
`configmap` hands it here, whatever shape it arrived in):

    data:
      DeviceInfoCfg: '{"DeviceInfo":{"DeviceList":{"huawei.com/Ascend910":"Ascend910-0,…",
                       "huawei.com/Ascend910-Fault":"[{…},{…}]",        ← a JSON string in JSON
                       "huawei.com/Ascend910-NetworkUnhealthy":"…",
                       "huawei.com/Ascend910-Recovering":"…",           ← since 2024 (hot reset)
                       "huawei.com/Ascend910-Unhealthy":"Ascend910-4", …},
                       "UpdateTime":1744182144},                          ← seconds
                       "SuperPodID":-2,"ServerIndex":-2,                  ← since 2024
                       "RackID":0,                                        ← A5 super pods only
                       "CheckCode":"<sha256 hex>"}'
      SwitchInfoCfg: '{"FaultCode":[…],"FaultLevel":"",…}'  ← A3/A5 (`switch_info`)
      ManuallySeparateNPU: "Ascend910-1"        ← cards isolated until a person releases them
      UpgradeFaultReason: '{"Ascend910-1":[{"fault_code":…,"fault_level":…,…}]}'
      Description: …

2023's plugin wrote `{"DeviceInfo":{…},"CheckCode":…}` only, its fault entries without
fault_handling and times, and no -Recovering list; both formats are read. The resource is
`huawei.com/Ascend910` (A2/A3), `huawei.com/npu` (A5), `huawei.com/Ascend310P`, … or an operator's
DevicePublicType: every DeviceList key ending in a known suffix is read, whatever its resource.

Per card, the evidence is:
- its `-Fault` entries (`device_faults`); a NormalNPU / NormalNetwork entry is "no fault of its own";
- the card lists, for a card with no entry at least as severe: `-Recovering` (under hot reset, L5),
  `-Unhealthy` (withdrawn by the plugin without a fault of its own — a ring-mate of a card being
  reset — L5), `-NetworkUnhealthy` (L1, the plugin's default network level); levels in `names`;
- `ManuallySeparateNPU` (L6).
The switch fault is the node's. CheckCode (`check_code`) is sha256 over Go's json.Marshal of
DeviceInfo; a mismatch is reported but the entries are still used (losing a real fault is worse than
trusting an edited document). Whatever is malformed is reported in `problems` (naming the key or
entry and the value) and skipped; every well-formed piece of the same document is kept.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from motor.controller.hardware import levels
from motor.controller.hardware.formats.card_names import split_card_list
from motor.controller.hardware.formats.check_code import device_info_check_code
from motor.controller.hardware.formats.device_faults import decode_fault_list, parse_fault_entry
from motor.controller.hardware.formats.names import (
    CONFIGMAP_NAME_PREFIX,
    DEVICE_INFO_KEY,
    FAULT_LIST_SUFFIX,
    FAULT_TYPE_MANUALLY_SEPARATED,
    FAULT_TYPE_NETWORK_LISTED,
    FAULT_TYPE_RECOVERING,
    FAULT_TYPE_WITHDRAWN,
    MANUALLY_SEPARATE_KEY,
    NETWORK_LISTED_LEVEL,
    NETWORK_UNHEALTHY_SUFFIX,
    RECOVERING_LEVEL,
    RECOVERING_SUFFIX,
    SWITCH_INFO_KEY,
    UNHEALTHY_SUFFIX,
    UPGRADE_REASON_KEY,
    WITHDRAWN_LEVEL,
    ParseResult,
    is_number,
)
from motor.controller.hardware.formats.switch_info import parse_switch_info
from motor.controller.hardware.model import FaultKey, HardwareFault, normalize_fault_codes

# A card listed under one of these suffixes, without an entry at least this severe: (type, level).
_CARD_LISTS = (
    (RECOVERING_SUFFIX, FAULT_TYPE_RECOVERING, RECOVERING_LEVEL),
    (UNHEALTHY_SUFFIX, FAULT_TYPE_WITHDRAWN, WITHDRAWN_LEVEL),
    (NETWORK_UNHEALTHY_SUFFIX, FAULT_TYPE_NETWORK_LISTED, NETWORK_LISTED_LEVEL),
)


def parse_device_info(
    data: Mapping[str, Any], node_name: str, source: str = "configmap", label: str = ""
) -> ParseResult:
    """A device-info ConfigMap's data (DeviceInfoCfg, SwitchInfoCfg, ManuallySeparateNPU, …) → (faults, problems)."""
    label = label or f"{CONFIGMAP_NAME_PREFIX}{node_name}"

    faults: dict[FaultKey, HardwareFault] = {}
    problems: list[str] = []
    if DEVICE_INFO_KEY in data:
        found, found_problems = _parse_device_info_cfg(data[DEVICE_INFO_KEY], node_name, label, source)
        problems += found_problems
        for fault in found:
            _keep_worst(faults, fault)
    elif MANUALLY_SEPARATE_KEY not in data and SWITCH_INFO_KEY not in data:
        problems.append(f"{label}: no {DEVICE_INFO_KEY} key (keys: {sorted(map(str, data))})")
    if SWITCH_INFO_KEY in data:
        found, found_problems = parse_switch_info(data[SWITCH_INFO_KEY], node_name, f"{label}: {SWITCH_INFO_KEY}", source)
        problems += found_problems
        for fault in found:
            _keep_worst(faults, fault)
    if MANUALLY_SEPARATE_KEY in data:
        reasons, reason_problems = _parse_upgrade_reasons(data.get(UPGRADE_REASON_KEY), label)
        problems += reason_problems
        found, found_problems = _parse_manually_separated(
            data[MANUALLY_SEPARATE_KEY], reasons, node_name, label, source
        )
        problems += found_problems
        for fault in found:
            _keep_worst(faults, fault)
    ordered = sorted(faults.values(), key=lambda f: (f.npu_name, f.fault_codes, f.fault_type))
    return ParseResult(ordered, problems)




def _parse_device_info_cfg(raw: Any, node: str, label: str, source: str) -> tuple[list[HardwareFault], list[str]]:
    where = f"{label}: {DEVICE_INFO_KEY}"
    if isinstance(raw, str):
        try:
            cfg = json.loads(raw)
        except json.JSONDecodeError as exc:
            return [], [f"{where} is not JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"]
    else:
        cfg = raw
    if not isinstance(cfg, Mapping):
        return [], [f"{where} is {type(cfg).__name__}, not an object"]
    info = cfg.get("DeviceInfo")
    if not isinstance(info, Mapping):
        return [], [f"{where}.DeviceInfo is missing or not an object"]
    problems: list[str] = []
    raw_update = info.get("UpdateTime")
    if raw_update is not None and not (is_number(raw_update) and raw_update >= 0):
        problems.append(f"{where}.DeviceInfo.UpdateTime={raw_update!r} is not a time in seconds")
    device_list = info.get("DeviceList")
    if not isinstance(device_list, Mapping):
        return [], problems + [f"{where}.DeviceInfo.DeviceList is missing or not an object"]
    check_code = cfg.get("CheckCode")
    if isinstance(check_code, str) and check_code and all(isinstance(v, str) for v in device_list.values()):
        try:
            computed = device_info_check_code(info)
        except ValueError as exc:
            computed = f"<{exc}>"
        if computed != check_code:
            problems.append(
                f"{where}.CheckCode={check_code[:12]}… does not match the content ({computed[:12]}…): "
                "edited or truncated; its entries are still used"
            )
    faults: list[HardwareFault] = []
    fault_keys = sorted(k for k in device_list if isinstance(k, str) and k.endswith(FAULT_LIST_SUFFIX))
    for key in fault_keys:
        entries, entry_problems = decode_fault_list(device_list[key], f'{where}.DeviceInfo.DeviceList["{key}"]')
        problems += entry_problems
        for index, entry in enumerate(entries):
            entry_where = f'{where}.DeviceInfo.DeviceList["{key}"][{index}]'
            fault, entry_problems = parse_fault_entry(entry, entry_where, node, source)
            problems += entry_problems
            if fault is not None:
                faults.append(fault)
    listed, list_problems = _card_list_faults(device_list, faults, node, f"{where}.DeviceInfo.DeviceList", source)
    return faults + listed, problems + list_problems


def _card_list_faults(
    device_list: Mapping[str, Any], entries: list[HardwareFault], node: str, where: str, source: str
) -> tuple[list[HardwareFault], list[str]]:
    """-Recovering / -Unhealthy / -NetworkUnhealthy cards without an entry at least as severe."""
    worst: dict[str, int] = {}
    for fault in entries:
        worst[fault.npu_name] = max(worst.get(fault.npu_name, 0), fault.level)
    faults: list[HardwareFault] = []
    problems: list[str] = []
    for suffix, fault_type, level in _CARD_LISTS:
        for key in sorted(k for k in device_list if isinstance(k, str) and k.endswith(suffix)):
            value = device_list[key]
            if not isinstance(value, str):
                problems.append(f'{where}["{key}"]={value!r} is not a comma-joined string of card names')
                continue
            for card in split_card_list(value):
                if worst.get(card, 0) >= level:
                    continue
                worst[card] = level
                faults.append(HardwareFault(node, card, (), level, fault_type, "", 0.0, source))
    return faults, problems


def _parse_upgrade_reasons(value: Any, label: str) -> tuple[dict[str, tuple[str, ...]], list[str]]:
    """UpgradeFaultReason → {card: codes that upgraded it}; informational, so problems only warn."""
    where = f"{label}: {UPGRADE_REASON_KEY}"
    if value is None or value == "":
        return {}, []
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            return {}, [f"{where} is not JSON ({exc.msg}); upgrade codes unknown"]
    if not isinstance(value, Mapping):
        return {}, [f"{where} is {type(value).__name__}, not an object; upgrade codes unknown"]
    result: dict[str, tuple[str, ...]] = {}
    problems: list[str] = []
    for card, reasons in value.items():
        if not isinstance(reasons, list):
            problems.append(f"{where}[{card!r}] is not a list; upgrade codes unknown")
            continue
        codes: set[str] = set()
        for reason in reasons:
            raw = reason.get("fault_code") if isinstance(reason, Mapping) else None
            if isinstance(raw, str):
                normalized, _ = normalize_fault_codes(raw)
                codes.update(normalized)
        result[str(card).strip()] = tuple(sorted(codes))
    return result, problems


def _parse_manually_separated(
    value: Any, reasons: Mapping[str, tuple[str, ...]], node: str, label: str, source: str
) -> tuple[list[HardwareFault], list[str]]:
    if not isinstance(value, str):
        return [], [f"{label}: {MANUALLY_SEPARATE_KEY}={value!r} is not a comma-joined string of card names"]
    faults = []
    for card in sorted({c.strip() for c in value.split(",") if c.strip()}):
        faults.append(
            HardwareFault(
                node_name=node,
                npu_name=card,
                fault_codes=reasons.get(card, ()),
                level=levels.LEVEL_BY_NAME[FAULT_TYPE_MANUALLY_SEPARATED],
                fault_type=FAULT_TYPE_MANUALLY_SEPARATED,
                fault_handling=FAULT_TYPE_MANUALLY_SEPARATED,
                # No time of its own (UpdateTime changes on every refresh; see device_faults).
                fault_time_unix_sec=0.0,
                source=source,
            )
        )
    return faults, []


def _keep_worst(faults: dict[FaultKey, HardwareFault], fault: HardwareFault) -> None:
    """Two entries with one identity (e.g. under two resource names): keep the more severe, later one."""
    known = faults.get(fault.key)
    if known is None or (fault.level, fault.fault_time_unix_sec) > (known.level, known.fault_time_unix_sec):
        faults[fault.key] = fault


__all__ = ["parse_device_info"]
