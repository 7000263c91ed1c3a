"""The operator console's rows: one instance as its phase, counts and one state letter per original
rank, compact enough that a fleet of 64 × 256 ranks is one small JSON document. Pure.

A rank's state, first match wins:

  retired     committed dead (`dead_committed`): removed for good
  dead        being removed by the round in flight (`pending_removed_ranks`), or evidence/status DEAD
  restarting  a whole-instance reconfiguration restarts the engines, or the engine rebuilds its group
  unhealthy   evidence or the round's status poll says UNHEALTHY (a survivor of a peer's fault)
  diagnosing  the engine queries its all2all mask (vLLM's transient state before a verdict)
  healthy     otherwise
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gen.motor.v1 import common_pb2
from motor.controller.fault_tolerance.evidence import Health, RankEvidence
from motor.controller.model.runtime import FtPhase, FtRuntime

# One letter per state, in the `cells` string of a row; the page's legend reads the same table.
STATE_LETTERS = {"healthy": "h", "diagnosing": "g", "unhealthy": "u", "dead": "d", "retired": "r",
                 "restarting": "s"}

_STATUS_STATES = {
    common_pb2.ENGINE_HEALTH_DEAD: "dead",
    common_pb2.ENGINE_HEALTH_UNHEALTHY: "unhealthy",
    common_pb2.ENGINE_HEALTH_DIAGNOSING: "diagnosing",
}
_EVIDENCE_STATES = {Health.DEAD: "dead", Health.UNHEALTHY: "unhealthy", Health.PROTOCOL_ERROR: "unhealthy"}


def rank_state(runtime: FtRuntime, rank: int, evidence: Mapping[int, RankEvidence]) -> str:
    if rank in runtime.dead_committed:
        return "retired"
    if rank in runtime.pending_removed_ranks:
        return "dead"
    held = evidence.get(rank)
    status = runtime.engine_statuses.get(rank)
    from_status = _STATUS_STATES.get(status.status) if status is not None else None
    if (held is not None and held.health is Health.DEAD) or from_status == "dead":
        return "dead"
    reconfiguring = runtime.phase is FtPhase.RECONFIGURING or runtime.disabled_reconfiguring
    if reconfiguring or (status is not None and status.ft_state == common_pb2.FT_STATE_RECOVERING):
        return "restarting"
    if held is not None and held.health in _EVIDENCE_STATES:
        return _EVIDENCE_STATES[held.health]
    return from_status or "healthy"


def rank_cells(runtime: FtRuntime, evidence: Mapping[int, RankEvidence]) -> str:
    """One letter of STATE_LETTERS per original rank, in `original_dp_ranks` order."""
    return "".join(STATE_LETTERS[rank_state(runtime, r, evidence)] for r in runtime.original_dp_ranks)


def fleet_row(runtime: FtRuntime, evidence: Mapping[int, RankEvidence], strategy: str,
              waiting: list[str] | None = None) -> dict[str, Any]:
    """The fleet page's row of one instance. `strategy`: the one running now ("" when none);
    `waiting`: what it waits for (collection_timeout, correlation_window, backoff), without the
    deadlines, which the instance page shows (a row changes when its state does, not with time)."""
    return {
        "instance_id": runtime.instance_id,
        "phase": str(runtime.phase),
        "ranks": list(runtime.original_dp_ranks),
        "cells": rank_cells(runtime, evidence),
        "alive": len(runtime.alive_dp_ranks),
        "original": len(runtime.original_dp_ranks),
        "can_serve": runtime.can_serve,
        "gate_allowed": runtime.gate.allowed,
        "gate_reasons": [str(c) for c in runtime.gate.reason_codes],
        "strategy": strategy,
        "waiting": list(waiting or ()),
        "fallback_strategy": runtime.fallback_strategy,
        "request_id": runtime.request_id,
        "last_error": runtime.last_error,
        "migrated_requests": runtime.migrated_requests,
        "reconfiguration_attempts": runtime.reconfiguration_attempts,
        "reconfiguration_gave_up": runtime.reconfiguration_gave_up,
    }
