"""The API process's FT rounds: an apply decided at once (``apply_rules``), then run on the executor.

Part of ``SimEngine`` (``motor.sim.engine``): split out so that serving and executor events, and
the rounds, are each one module. All of it runs on the event loop.

``scale_up``: the status leaves ``healthy`` before the 202 (``FtStatus.begin_scale_up``); a
survivor's executor leaves its live group with every member at one batch boundary, then forms the
grown group through the fresh store. A survivor whose peers left the group for a round before its
own apply came is ``standby`` (healthy, refusing inference) until that apply comes, and faults when
it has not come within the check-in window (vllm: ``--scale-down-checkin-sec``; rfc:
``--engine-recovery-timeout-sec``), so it is never left healthy without a group.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any

from motor.sim.apply_body import ApplyRequest, Instruction
from motor.sim.apply_rules import GroupContext, RecoveryPlan, decide_apply
from motor.sim.config import SimConfig
from motor.sim.executor_client import ExecutorHandle
from motor.sim.ft_state import RECOVERY_FAILED_INFO, EngineStatus, FtDialect, FtStatus
from motor.sim.injection_state import InjectionState
from motor.sim.placement import ExpertPlacement

log = logging.getLogger("motor.sim.engine")

_RECOVERY_GRACE_SEC = 15.0  # the executor enforces the deadline itself; this only catches a wedged one
# What the status document declares (the vllm and rfc dialects; SGLang's manager declares its own).
SUPPORTED_INSTRUCTIONS = ("retry", "scale_down", "scale_up")


class EngineRounds:
    """The rounds of one rank; the attributes and hooks below are ``SimEngine``'s."""

    cfg: SimConfig
    rank: int
    ft: FtStatus
    fault_detail: str | None
    members: tuple[int, ...]
    removed: tuple[int, ...]
    master: tuple[str, int] | None
    placement: ExpertPlacement
    injections: InjectionState
    group_info: dict[str, Any] | None
    standby_reason: str | None
    _executor: ExecutorHandle | None
    _rebuilds: dict[str, asyncio.Future[dict[str, Any]]]
    _recovery_task: asyncio.Task[None] | None
    _standby_timer: asyncio.TimerHandle | None

    def _fail_streams(self, reason: str) -> None:
        raise NotImplementedError

    def _on_fault(self, info: str) -> None:
        raise NotImplementedError

    @property
    def scale_up_supported(self) -> bool:
        return self.cfg.ft_dialect is not FtDialect.SGLANG

    def group_context(self) -> GroupContext:
        ip, port = self.master if self.master is not None else ("", 0)
        return GroupContext(rank=self.rank, dp_size=self.cfg.dp_size, members=self.members, removed=self.removed,
                            master_ip=ip, master_port=port)

    def journal_apply(self, req: ApplyRequest) -> None:
        """One line per well-formed apply received, before it is judged (append-only, survives a restart)."""
        if not self.cfg.apply_journal:
            return
        line = {"at_unix_sec": time.time(), "rank": self.rank, "request_id": req.request_id,
                "instruction": req.instruction.value, "params": req.params}
        with open(self.cfg.apply_journal, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(line) + "\n")

    def apply(self, req: ApplyRequest) -> str | None:
        """Decide at once (visible in status before the answer goes out); rebuild in the background.

        Returns the detail of an HTTP 400 (vllm dialect: the rank is not unhealthy; any refused
        scale_up), else None (202).
        """
        if req.instruction is Instruction.SCALE_UP and not self.scale_up_supported:
            return f"Invalid instruction: '{req.instruction.value}'."
        decision = decide_apply(self.ft, req, self.group_context(), self.placement)
        for warning in decision.warnings:
            log.warning("rank=%d request_id=%s %s", self.rank, req.request_id, warning)
        if decision.ignored is not None:
            log.warning("rank=%d request_id=%s apply %s ignored: %s",
                        self.rank, req.request_id, req.instruction.value, decision.ignored)
            return None
        if decision.http_refusal is not None:
            log.warning("rank=%d request_id=%s apply %s refused (status untouched): %s",
                        self.rank, req.request_id, req.instruction.value, decision.http_refusal)
            return decision.http_refusal
        if decision.rejection is not None:
            self.ft.reject(req.request_id, decision.rejection)
            log.warning("rank=%d request_id=%s apply %s rejected: %s",
                        self.rank, req.request_id, req.instruction.value, decision.rejection)
            return decision.rejection if decision.not_ready and self.ft.vllm else None
        plan = decision.plan
        assert plan is not None
        if plan.instruction is Instruction.SCALE_UP:
            self._cancel_standby_timer()
            self.ft.begin_scale_up(plan.request_id)
            self._fail_streams(f"dp rank {self.rank} is leaving its DP group for scale_up {plan.request_id}")
        else:
            self.ft.begin_recovery(plan.request_id)
        log.info("rank=%d request_id=%s apply %s accepted: members=%s removed=%s newly_removed=%s added=%s "
                 "master=%s:%d", self.rank, plan.request_id, plan.instruction.value, list(plan.members),
                 list(plan.removed), list(plan.newly_removed), list(plan.added), plan.master_ip, plan.master_port)
        self._recovery_task = asyncio.create_task(self._recover(plan), name=f"recover-{plan.request_id}")
        return None

    def _abandon_group(self, plan: RecoveryPlan, why: str) -> None:
        """An injected failure or stall: leave the group (a scale_up survivor with every member), form none."""
        assert self._executor is not None
        if plan.pause_group:
            self._executor.send({"op": "pause", "request_id": plan.request_id, "reason": why})
        else:
            self._executor.send({"op": "teardown", "reason": why})

    async def _recover(self, plan: RecoveryPlan) -> None:
        assert self._executor is not None
        rid = plan.request_id
        started = time.monotonic()
        timeout_sec = self.cfg.engine_recovery_timeout_sec
        injected_failure = self.injections.take_fail_next_apply()
        if injected_failure is not None:
            self._abandon_group(plan, f"injected apply failure request_id={rid}")
            self._fail_recovery(plan, f"injected failure: {injected_failure}", 0.0)
            return
        if self.injections.take_stall_next_apply():
            self._abandon_group(plan, f"injected apply stall request_id={rid}")
            log.warning("rank=%d request_id=%s recovery stalled (injected); it will not complete", self.rank, rid)
            return
        scale_up = plan.instruction is Instruction.SCALE_UP
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._rebuilds[rid] = fut
        try:
            sent = self._executor.send({
                "op": "rebuild", "request_id": rid, "members": list(plan.members),
                "master_ip": plan.master_ip, "master_port": plan.master_port, "new_store": plan.new_store,
                "timeout_sec": timeout_sec, "delay_sec": self.injections.slow_rebuild_sec,
                "fail_vote": self.injections.take_fail_vote(), "pause": plan.pause_group,
                # vLLM only (the RFC-era engine waits for peers until the recovery timeout): a round
                # fails when a member does not check in within the window; once a scale_down
                # committed, idle ranks keep stepping so that a later death shows without traffic
                # (a scale_up always follows one, and its joiners must step as the survivors do).
                "checkin_sec": self.cfg.scale_down_checkin_sec if self.ft.vllm else None,
                "keep_stepping": self.ft.vllm and (bool(plan.removed) or scale_up),
            })
            if not sent:
                result: dict[str, Any] = {"ev": "rebuild_failed", "error": "executor is unreachable"}
            else:
                try:
                    result = await asyncio.wait_for(fut, timeout=timeout_sec + _RECOVERY_GRACE_SEC)
                except TimeoutError:
                    result = {"ev": "rebuild_failed", "error": f"rebuild did not finish within {timeout_sec:g}s"}
        finally:
            self._rebuilds.pop(rid, None)
        elapsed = time.monotonic() - started
        if self.ft.status is EngineStatus.DEAD:
            return
        if result["ev"] != "rebuilt":
            self._fail_recovery(plan, f"{plan.instruction.value} failed: {result['error']}", elapsed,
                                vote_failed=bool(result.get("vote")))
            return
        group = result["group"]
        self.members = plan.members
        self.removed = plan.removed
        self.master = (group["master"]["ip"], int(group["master"]["port"]))
        self.placement = plan.placement
        self.group_info = group
        self.ft.finish_recovery(rid)
        self.fault_detail = None
        self.standby_reason = None
        log.info("rank=%d request_id=%s recovered in %.2fs: healthy, members=%s dense_rank=%d",
                 self.rank, rid, elapsed, list(plan.members), group["dense_rank"])

    def _fail_recovery(self, plan: RecoveryPlan, error: str, elapsed_sec: float, *, vote_failed: bool = False) -> None:
        # vLLM: survivors that cannot commit a scale_down are beyond repair, and so are a scale_up's
        # survivors once its vote failed; a failed retry is not, nor a joiner.
        fatal = plan.instruction is Instruction.SCALE_DOWN or (
            plan.instruction is Instruction.SCALE_UP and vote_failed and plan.pause_group)
        self.ft.fail_recovery(plan.request_id, error, fatal=fatal)
        if self.ft.status is EngineStatus.DEAD:
            self.fault_detail = f"{RECOVERY_FAILED_INFO}: {error}"
        elif self.fault_detail is None:  # a scale_up started healthy
            self.fault_detail = error
        log.error("rank=%d request_id=%s recovery failed after %.2fs (status %s): %s",
                  self.rank, plan.request_id, elapsed_sec, self.ft.status.value, error)

    # -- standby ---------------------------------------------------------------------------
    def _on_paused(self, request_id: str | None) -> None:
        """The executor left its group: for this rank's own round (nothing to do) or a peer's."""
        if request_id is not None or self.ft.recovering_id is not None:
            return
        if self.ft.status is not EngineStatus.HEALTHY or self.ft.standby:
            return
        window_sec = self.cfg.scale_down_checkin_sec if self.ft.vllm else self.cfg.engine_recovery_timeout_sec
        self.ft.standby = True
        self.standby_reason = (f"dp rank {self.rank} left its DP group with its peers for a scale_up round; "
                               f"waiting up to {window_sec:g}s for this rank's apply")
        log.warning("rank=%d %s", self.rank, self.standby_reason)
        self._fail_streams(self.standby_reason)
        self._standby_timer = asyncio.get_running_loop().call_later(window_sec, self._standby_expired, window_sec)

    def _standby_expired(self, window_sec: float) -> None:
        self._standby_timer = None
        if self.ft.standby and self.ft.recovering_id is None and self.ft.status is EngineStatus.HEALTHY:
            self._on_fault(f"the DP group paused for a scale_up round, but no scale_up apply came to rank "
                           f"{self.rank} within {window_sec:g}s")

    def _cancel_standby_timer(self) -> None:
        if self._standby_timer is not None:
            self._standby_timer.cancel()
            self._standby_timer = None
