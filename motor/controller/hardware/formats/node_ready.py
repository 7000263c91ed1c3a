"""Kubernetes Nodes → a whole-node HardwareFault when NotReady. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from motor.common.text import shorten
from motor.controller.hardware.formats.names import (
    FAULT_TYPE_NODE_NOT_READY,
    NODE_NOT_READY_CODE,
    NODE_NOT_READY_LEVEL,
    ParseResult,
)
from motor.controller.hardware.model import HardwareFault


def parse_node(node_obj: Mapping[str, Any], source: str = "k8s", level: int = NODE_NOT_READY_LEVEL) -> ParseResult:
    """A Kubernetes Node (as `kubectl get node -o json` shows it) → a whole-node fault when NotReady.

    Ready=False or Ready=Unknown (the node controller's "kubelet stopped posting status") both mean
    NotReady. No Ready condition yet (a node still registering) is not a fault.
    """
    meta = node_obj.get("metadata") if isinstance(node_obj, Mapping) else None
    name = meta.get("name") if isinstance(meta, Mapping) else None
    if not isinstance(name, str) or not name:
        return ParseResult([], [f"node object has no metadata.name ({shorten(node_obj)})"])
    status = node_obj.get("status") or {}
    conditions = status.get("conditions") if isinstance(status, Mapping) else None
    if conditions is None:
        return ParseResult([], [])
    if not isinstance(conditions, list):
        return ParseResult([], [f"node {name}: status.conditions is {type(conditions).__name__}, not a list"])
    ready = [c for c in conditions if isinstance(c, Mapping) and c.get("type") == "Ready"]
    if not ready:
        return ParseResult([], [])
    cond = ready[-1]
    state = cond.get("status")
    if state == "True":
        return ParseResult([], [])
    if state not in ("False", "Unknown"):
        return ParseResult([], [f"node {name}: Ready condition status={state!r} is not True/False/Unknown"])
    when_sec, problems = _transition_time(name, cond.get("lastTransitionTime"))
    fault = HardwareFault(
        node_name=name,
        npu_name="",
        fault_codes=(NODE_NOT_READY_CODE,),
        level=level,
        fault_type=FAULT_TYPE_NODE_NOT_READY,
        fault_handling="",
        fault_time_unix_sec=max(when_sec, 0.0),
        source=source,
    )
    return ParseResult([fault], problems)


def _transition_time(name: str, raw_time: Any) -> tuple[float, list[str]]:
    """The client gives a datetime, a `-o json` dump an ISO string; unknown stays 0 ("not said")."""
    if isinstance(raw_time, datetime):
        return raw_time.timestamp(), []
    if isinstance(raw_time, str) and raw_time:
        try:
            return datetime.fromisoformat(raw_time.replace("Z", "+00:00")).timestamp(), []
        except ValueError:
            return 0.0, [f"node {name}: Ready lastTransitionTime={raw_time!r} is not an ISO time; fault time left 0"]
    return 0.0, []
