"""Fault-tolerance status of one engine rank (pure, no I/O); the apply rules are in ``apply_rules``.

Status model (vLLM fault-tolerance framework, external-LB mode, one entry per process):

* ``status``: ``healthy`` | ``diagnosing`` (a fault was seen; the engine is querying its all2all
  mask, commands are refused) | ``unhealthy`` (the DP domain is broken, with ``fault_info`` and
  ``mask``; the only state in which an ``apply`` runs) | ``dead`` (the executor is gone, or a
  scale_down's vote failed: a full restart is required).
* ``last_ft_request_id`` / ``ft_error``: set when a command is rejected or fails.

Two dialects (``FtDialect``) of the same machine:

* ``vllm`` (vLLM 0.33.0 and PR #46370): no ``ft_state``; every status change replaces the whole
  entry, so ``last_ft_request_id``/``ft_error`` vanish at the next change; ``fault_info`` is only
  the exception's type name, the same on every fault (a consumer cannot use it to tell faults apart).
* ``rfc`` (the RFC-era vLLM-Ascend): ``ft_state`` absent | ``recovering`` (an accepted apply runs) |
  ``failed`` (the last apply was rejected or did not complete); ``last_ft_request_id`` survives
  status changes; ``fault_info`` describes the fault.

Choices where the upstream contract is silent (callers rely on these):

* RFC dialect: a rejected apply on a HEALTHY rank leaves it ``healthy``, so it reads (``healthy``,
  ``failed``). ``failed`` is set on purpose: a poller that only looked for (``healthy``, no
  ``ft_state``) would otherwise take the rejection for a completed scale-down.
* RFC dialect: a new fault (healthy -> unhealthy) clears a stale ``ft_state: failed``/``ft_error``
  so the rank reads (``unhealthy``, –), i.e. apply-ready, for the next round.
* Both: duplicate deliveries are recognised by request id even after the visible
  ``last_ft_request_id`` is gone (``handled_id``).
* ``standby``: ``healthy`` but in no serving group, so inference is refused -- a joiner (``--join``)
  before its ``scale_up`` commits, or a survivor whose peers left the group for a ``scale_up`` round
  before this rank's own apply came. The entry does not show it: the rank is ready for the round.
* ``scale_up`` leaves ``healthy`` as it is accepted (``begin_scale_up``, before the 202): ``unhealthy``
  (rfc: with ``ft_state: recovering``) until the grown group commits.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

SCHEMA_VERSION = 1


# vLLM's fault_info: the type name of the exception, never a description.
VLLM_FAULT_INFO = "RuntimeError"
VLLM_DEAD_INFO = "EngineDeadError"
RECOVERY_FAILED_INFO = "Recovery failed; full restart required"


class EngineStatus(StrEnum):
    HEALTHY = "healthy"
    DIAGNOSING = "diagnosing"
    UNHEALTHY = "unhealthy"
    DEAD = "dead"


class FtDialect(StrEnum):
    VLLM = "vllm"
    RFC = "rfc"
    # SGLang's instance-level manager (motor.sim.instance_ft) over ranks running the RFC machine.
    SGLANG = "sglang"


class FtState(StrEnum):
    RECOVERING = "recovering"
    FAILED = "failed"


@dataclass
class FtStatus:
    """Mutable FT status of one rank; every transition is one method."""

    rank: int
    dialect: FtDialect = FtDialect.RFC
    status: EngineStatus = EngineStatus.HEALTHY
    fault_info: str | None = None
    mask: list[int] | None = None
    ft_state: FtState | None = None
    last_ft_request_id: str | None = None
    ft_error: str | None = None
    recovering_id: str | None = None  # the running recovery's request id (shown as ft_state in rfc)
    handled_id: str | None = None  # the last request accepted, rejected or ended: duplicate detection
    standby: bool = False  # healthy, in no serving group (see the module docstring)

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
    def vllm(self) -> bool:
        return self.dialect is FtDialect.VLLM

    @property
    def serving(self) -> bool:
        return self.status is EngineStatus.HEALTHY and self.recovering_id is None and not self.standby

    def _push(self, status: EngineStatus, fault_info: str | None = None, mask: Sequence[int] | None = None) -> None:
        """A status change: vLLM replaces the whole entry; the RFC dialect keeps last_ft_request_id."""
        self.status = status
        self.fault_info = fault_info
        self.mask = sorted(mask) if mask is not None else None
        self.ft_state = None
        self.ft_error = None
        if self.vllm:
            self.last_ft_request_id = None

    def _record(self, request_id: str, error: str) -> None:
        """A command rejected or failed: named on the entry (until the next change, in vllm)."""
        self.handled_id = request_id
        self.last_ft_request_id = request_id
        self.ft_error = error
        if not self.vllm:
            self.ft_state = FtState.FAILED

    def mark_diagnosing(self) -> bool:
        """A fault was seen and its extent is being queried; returns True if the status changed."""
        if self.status is not EngineStatus.HEALTHY or self.recovering_id is not None:
            return False
        self._push(EngineStatus.DIAGNOSING)
        return True

    def mark_fault(self, info: str, mask: Sequence[int] | None = None) -> bool:
        """A collective/communication fault (after diagnosis, if any); True if the status changed."""
        if self.status not in (EngineStatus.HEALTHY, EngineStatus.DIAGNOSING) or self.recovering_id is not None:
            return False
        self._push(EngineStatus.UNHEALTHY, info, mask)
        return True

    def set_mask(self, mask: Sequence[int]) -> bool:
        if self.status is not EngineStatus.UNHEALTHY or self.recovering_id is not None:
            return False
        self.mask = sorted(mask)
        return True

    def mark_dead(self, info: str) -> None:
        if self.status is EngineStatus.DEAD:
            return
        running, self.recovering_id = self.recovering_id, None
        if self.vllm:
            self._push(EngineStatus.DEAD, info)
        else:  # the RFC dialect only changes status and fault_info
            self.status = EngineStatus.DEAD
            self.fault_info = info
        if running is not None:
            self._record(running, f"executor died during recovery {running}: {info}")

    def reject(self, request_id: str, error: str) -> None:
        self._record(request_id, error)

    def begin_recovery(self, request_id: str) -> None:
        self.recovering_id = request_id
        self.handled_id = request_id
        if not self.vllm:  # vLLM shows nothing until the outcome
            self.ft_state = FtState.RECOVERING
            self.ft_error = None
            self.last_ft_request_id = request_id

    def begin_scale_up(self, request_id: str) -> None:
        """A scale_up is accepted on a healthy rank: it leaves healthy before the 202 goes out."""
        self._push(EngineStatus.UNHEALTHY)
        self.begin_recovery(request_id)

    def finish_recovery(self, request_id: str) -> None:
        self.recovering_id = None
        self.standby = False
        self.handled_id = request_id
        self._push(EngineStatus.HEALTHY)
        if not self.vllm:
            self.last_ft_request_id = request_id

    def fail_recovery(self, request_id: str, error: str, *, fatal: bool = False) -> None:
        """``fatal``: the survivors could not commit a scale_down; in vllm every survivor is then dead."""
        self.recovering_id = None
        if self.status is not EngineStatus.DEAD:
            if self.vllm and fatal:
                self._push(EngineStatus.DEAD, RECOVERY_FAILED_INFO)
            else:
                self.status = EngineStatus.UNHEALTHY
        self._record(request_id, error)
