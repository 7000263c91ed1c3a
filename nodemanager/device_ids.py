"""The registration check of `engines[].device_infos[].device_id` against the pod's annotations.

The Controller maps a MindCluster card fault to a rank by the card's host name (RFC §4.2), so the
device ids a NodeManager registers must be the cards the device plugin gave this pod, as it names
them: `huawei.com/AscendReal` (the cards really mounted, written by the device plugin), else
`huawei.com/Ascend910` / `huawei.com/npu` / `huawei.com/<resource>` (Volcano's or kubelet's
allocation). A container-local index ("0", "davinci0") is refused by the config already; here, with
`pod_annotations_file` set (a downwardAPI volume of `metadata.annotations`), an id the annotations do
not list fails the registration attempt, which is retried (kubelet refreshes the file) and logged.
Parsing is pure; `check_device_ids` reads the file.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

REAL_ANNOTATION = "huawei.com/AscendReal"
RESOURCE_ANNOTATION_PREFIX = "huawei.com/"
# The allocation annotations, in order of preference after AscendReal (then any other huawei.com/).
RESOURCE_ANNOTATIONS = ("huawei.com/Ascend910", "huawei.com/npu", "huawei.com/Ascend310P", "huawei.com/Ascend310")
# kubelet's own device names (`huawei.com/kltDev`): under Volcano not the cards really mounted.
_NOT_CARD_LISTS = frozenset({REAL_ANNOTATION, "huawei.com/kltDev"})


class DeviceIdMismatch(RuntimeError):
    """A configured device id is not a card of this pod; the message names ids and annotations."""


def parse_downward_annotations(text: str) -> tuple[dict[str, str], list[str]]:
    """kubelet's downwardAPI file (`key="quoted value"` per line, Go %q quoting) → (annotations, problems)."""
    annotations: dict[str, str] = {}
    problems: list[str] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        key, sep, quoted = line.partition("=")
        if not sep or not key or not (len(quoted) >= 2 and quoted[0] == '"' and quoted[-1] == '"'):
            problems.append(f"line {number} {line[:80]!r} is not key=\"value\"")
            continue
        try:
            value = ast.literal_eval(quoted)
        except (ValueError, SyntaxError):
            problems.append(f"line {number}: value of {key!r} is not a quoted string")
            continue
        if not isinstance(value, str):
            problems.append(f"line {number}: value of {key!r} is not a string")
            continue
        annotations[key] = value
    return annotations, problems


def pod_cards(annotations: Mapping[str, str]) -> tuple[str, frozenset[str]]:
    """(annotation used, card names) of the pod; ("", ∅) when no allocation annotation is there."""
    real = annotations.get(REAL_ANNOTATION, "")
    if real.strip():
        return REAL_ANNOTATION, frozenset(_split(real))
    others = sorted(k for k in annotations if k.startswith(RESOURCE_ANNOTATION_PREFIX) and k not in RESOURCE_ANNOTATIONS)
    for key in [k for k in RESOURCE_ANNOTATIONS if k in annotations] + others:
        if key not in _NOT_CARD_LISTS:
            names = _split(annotations[key])
            # A resource annotation lists card names ("Ascend910-0,Ascend910-1"); other huawei.com/
            # annotations (JSON, numbers) do not.
            if names and all("-" in n and not n.startswith(("{", "[")) for n in names):
                return key, frozenset(names)
    return "", frozenset()


def unlisted_device_ids(device_ids: Iterable[str], annotations: Mapping[str, str]) -> tuple[list[str], str, frozenset[str]]:
    """(configured ids the pod's annotations do not list, annotation used, its cards)."""
    used, cards = pod_cards(annotations)
    return sorted({d for d in device_ids if d not in cards}), used, cards


def check_device_ids(path: str | None, device_ids: Iterable[str]) -> str:
    """Raises DeviceIdMismatch when a device id is not the pod's; returns what was checked (for a log)."""
    ids = sorted(set(device_ids))
    if path is None:
        return "device ids not checked against the pod's annotations (pod_annotations_file unset)"
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise DeviceIdMismatch(f"pod_annotations_file={path!r} unreadable ({exc}); device ids {ids} unchecked") from None
    annotations, problems = parse_downward_annotations(text)
    missing, used, cards = unlisted_device_ids(ids, annotations)
    if not used:
        raise DeviceIdMismatch(
            f"pod_annotations_file={path!r} has no {REAL_ANNOTATION} or huawei.com/<resource> card list yet "
            f"(keys {sorted(annotations)}{'; ' + '; '.join(problems) if problems else ''}); device ids {ids} unchecked")
    if missing:
        raise DeviceIdMismatch(
            f"device ids {missing} are not cards of this pod: {used}={','.join(sorted(cards))!r}; configure "
            "engines[].device_infos[].device_id from that annotation (the host's card names), not container indices")
    return f"device ids {ids} are cards of this pod ({used})"


def _split(value: str) -> list[str]:
    return [part.strip() for part in value.split(",") if part.strip()]
