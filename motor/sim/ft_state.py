"""Fault-tolerance status of one engine rank (pure, no I/O); the apply rules are in ``apply_rules``.

Status model (vLLM fault-tolerance framework, external-LB mode, one entry per process):

* ``status``: ``healthy`` | ``unhealthy`` (a collective failed / the DP domain is broken; this rank
  can take an ``apply``) | ``dead`` (the executor is gone; terminal for this process).
* ``ft_state``: absent | ``recovering`` (an accepted apply is running) | ``failed`` (the last apply
  was rejected or did not complete; ``ft_error`` says why).
* ``last_ft_request_id``: the request id of the last apply that was accepted, rejected or completed.

Choices where the upstream contract is silent (callers rely on these):

* A rejected apply sets ``ft_state: failed``, ``ft_error`` and ``last_ft_request_id``; on a
  HEALTHY rank the status stays ``healthy``, so it reads (``healthy``, ``failed``). ``failed`` is
  set on purpose: a poller that only looked for (``healthy``, no ``ft_state``) would otherwise take
  the rejection for a completed scale-down.
* A new fault (healthy -> unhealthy) clears a stale ``ft_state: failed``/``ft_error`` so the rank
  reads (``unhealthy``, –), i.e. apply-ready, for the next round.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

SCHEMA_VERSION = 1


class EngineStatus(StrEnum):
    HEALTHY = "healthy"
    UNHEALTHY = "unhealthy"
    DEAD = "dead"


class FtState(StrEnum):
    RECOVERING = "recovering"
    FAILED = "failed"


@dataclass
class FtStatus:
    """Mutable FT status of one rank; every transition is one method."""

    rank: int
    status: EngineStatus = EngineStatus.HEALTHY
    fault_info: str | None = None
    mask: list[int] | None = None
    ft_state: FtState | None = None
    last_ft_request_id: str | None = None
    ft_error: str | None = None

    def to_entry(self) -> dict[str, Any]:
        entry: dict[str, Any] = {"id": self.rank, "status": self.status.value}
        if self.fault_info is not None:
            entry["fault_info"] = self.fault_info
        if self.mask is not None:
            entry["mask"] = list(self.mask)
        if self.ft_state is not None:
            entry["ft_state"] = self.ft_state.value
        if self.last_ft_request_id is not None:
            entry["last_ft_request_id"] = self.last_ft_request_id
        if self.ft_error is not None:
            entry["ft_error"] = self.ft_error
        return entry

    @property
    def serving(self) -> bool:
        return self.status is EngineStatus.HEALTHY and self.ft_state is not FtState.RECOVERING

    def mark_fault(self, info: str, mask: Sequence[int] | None = None) -> bool:
        """A collective/communication fault; returns True if the status changed."""
        if self.status is not EngineStatus.HEALTHY or self.ft_state is FtState.RECOVERING:
            return False
        self.status = EngineStatus.UNHEALTHY
        self.fault_info = info
        self.mask = sorted(mask) if mask is not None else None
        self.ft_state = None
        self.ft_error = None
        return True

    def set_mask(self, mask: Sequence[int]) -> bool:
        if self.status is not EngineStatus.UNHEALTHY or self.ft_state is FtState.RECOVERING:
            return False
        self.mask = sorted(mask)
        return True

    def mark_dead(self, info: str) -> None:
        if self.status is EngineStatus.DEAD:
            return
        self.status = EngineStatus.DEAD
        self.fault_info = info
        if self.ft_state is FtState.RECOVERING:
            self.ft_state = FtState.FAILED
            self.ft_error = f"executor died during recovery {self.last_ft_request_id}: {info}"

    def reject(self, request_id: str, error: str) -> None:
        self.ft_state = FtState.FAILED
        self.ft_error = error
        self.last_ft_request_id = request_id

    def begin_recovery(self, request_id: str) -> None:
        self.ft_state = FtState.RECOVERING
        self.ft_error = None
        self.last_ft_request_id = request_id

    def finish_recovery(self, request_id: str) -> None:
        self.status = EngineStatus.HEALTHY
        self.fault_info = None
        self.mask = None
        self.ft_state = None
        self.ft_error = None
        self.last_ft_request_id = request_id

    def fail_recovery(self, request_id: str, error: str) -> None:
        if self.status is not EngineStatus.DEAD:
            self.status = EngineStatus.UNHEALTHY
        self.ft_state = FtState.FAILED
        self.ft_error = error
        self.last_ft_request_id = request_id
