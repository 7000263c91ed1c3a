"""The API process's view of the rank (vLLM's AsyncLLM + FT manager): requests, FT status, applies.

All state here is touched only on the event loop; the executor's messages arrive through
``ExecutorHandle`` and are handled by ``_on_event``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from motor.sim.apply_body import ApplyRequest, Instruction
from motor.sim.apply_rules import GroupContext, RecoveryPlan, decide_apply
from motor.sim.config import SimConfig
from motor.sim.executor_client import ExecutorHandle
from motor.sim.ft_state import (
    RECOVERY_FAILED_INFO,
    SCHEMA_VERSION,
    VLLM_DEAD_INFO,
    VLLM_FAULT_INFO,
    EngineStatus,
    FtStatus,
)
from motor.sim.injection_state import InjectionState
from motor.sim.placement import initial_placement
from motor.sim.toy_model import text_state

log = logging.getLogger("motor.sim.engine")

_RECOVERY_GRACE_SEC = 15.0  # the executor enforces the deadline itself; this only catches a wedged one


class EngineUnavailable(Exception):
    """The rank cannot serve (faulted, recovering, dead); HTTP 503."""


class StartupError(RuntimeError):
    pass


@dataclass
class _Stream:
    queue: asyncio.Queue[tuple[int, bool] | EngineUnavailable] = field(default_factory=asyncio.Queue)


class SimEngine:
    def __init__(self, cfg: SimConfig) -> None:
        self.cfg = cfg
        self.rank = cfg.dp_rank
        self.ft = FtStatus(rank=cfg.dp_rank, dialect=cfg.ft_dialect)
        # What went wrong, in words: the vllm dialect's fault_info is only a type name.
        self.fault_detail: str | None = None
        self._diagnosis: asyncio.TimerHandle | None = None
        self._diagnosed_mask: list[int] | None = None
        self.members: tuple[int, ...] = tuple(range(cfg.dp_size))
        self.removed: tuple[int, ...] = ()
        self.master: tuple[str, int] = (cfg.dp_master_ip, cfg.dp_master_port)
        self.placement = initial_placement(cfg.num_experts, cfg.num_redundant_experts, cfg.dp_size)
        self.injections = InjectionState()
        self.group_info: dict[str, Any] | None = None
        self.wave_info: dict[str, Any] = {"completed": 0, "active": False, "steps": 0}
        self.started_at = time.time()
        self._streams: dict[str, _Stream] = {}
        self._rebuilds: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self._ready: asyncio.Future[None] | None = None
        self._executor: ExecutorHandle | None = None
        self._recovery_task: asyncio.Task[None] | None = None
        self._stopping = False
        self._token_wait_sec = 2 * cfg.collective_timeout_sec + cfg.per_token_latency_sec + 10.0

    # -- lifecycle ------------------------------------------------------------------------
    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._ready = loop.create_future()
        self._executor = ExecutorHandle(self.cfg, loop, self._on_event)
        self._executor.start()
        bound_sec = self.cfg.dp_init_timeout_sec + self.cfg.model_load_sec + 120.0  # + torch import
        try:
            await asyncio.wait_for(asyncio.shield(self._ready), timeout=bound_sec)
        except TimeoutError:
            raise StartupError(f"executor not ready within {bound_sec:.0f}s") from None

    async def stop(self) -> None:
        self._stopping = True
        self.injections.clear()
        self._fail_streams("engine is shutting down")
        if self._recovery_task is not None:
            self._recovery_task.cancel()
        if self._executor is not None:
            await self._executor.stop()

    @property
    def executor_pid(self) -> int | None:
        return self._executor.pid if self._executor is not None else None

    # -- serving --------------------------------------------------------------------------
    def unavailable_reason(self) -> str | None:
        if self.ft.serving:
            return None
        if self.ft.recovering_id is not None:
            return f"dp rank {self.rank} is recovering (request_id={self.ft.recovering_id})"
        return f"dp rank {self.rank} is {self.ft.status.value}: {self.fault_detail}"

    async def generate(self, prompt: str, max_tokens: int) -> AsyncIterator[int]:
        """Token ids for ``prompt``; raises EngineUnavailable when the rank cannot (or can no longer) serve."""
        reason = self.unavailable_reason()
        if reason is not None:
            raise EngineUnavailable(reason)
        assert self._executor is not None
        rid = uuid.uuid4().hex
        stream = _Stream()
        self._streams[rid] = stream
        finished = False
        try:
            if not self._executor.send({"op": "add", "rid": rid, "state": text_state(prompt), "max_tokens": max_tokens}):
                raise EngineUnavailable(f"dp rank {self.rank} executor is unreachable")
            for _ in range(max_tokens):
                try:
                    item = await asyncio.wait_for(stream.queue.get(), timeout=self._token_wait_sec)
                except TimeoutError:
                    raise EngineUnavailable(
                        f"dp rank {self.rank} produced no token within {self._token_wait_sec:.0f}s"
                    ) from None
                if isinstance(item, EngineUnavailable):
                    raise item
                tid, finished = item
                yield tid
                if finished:
                    break
        finally:
            self._streams.pop(rid, None)
            if not finished and self.ft.serving:
                self._executor.send({"op": "abort", "rid": rid})

    def _fail_streams(self, reason: str) -> None:
        streams, self._streams = self._streams, {}
        for stream in streams.values():
            stream.queue.put_nowait(EngineUnavailable(reason))
        if streams:
            log.warning("rank=%d aborted %d in-flight requests: %s", self.rank, len(streams), reason)

    # -- executor events ------------------------------------------------------------------
    def _on_event(self, msg: dict[str, Any]) -> None:
        ev = msg.get("ev")
        if ev == "tokens":
            for rid, tid, finished in msg["items"]:
                stream = self._streams.get(rid)
                if stream is not None:
                    stream.queue.put_nowait((tid, finished))
        elif ev == "wave":
            self.wave_info = {"completed": msg["completed"], "active": msg["active"], "steps": msg["steps"]}
        elif ev == "rejected":
            stream = self._streams.get(msg["rid"])
            if stream is not None:
                stream.queue.put_nowait(EngineUnavailable(f"dp rank {self.rank}: {msg['reason']}"))
        elif ev == "fault":
            self._on_fault(msg["info"])
        elif ev == "fault_mask":
            if self.ft.status is EngineStatus.DIAGNOSING:
                self._diagnosed_mask = msg["mask"]
            elif self.ft.set_mask(msg["mask"]):
                log.warning("rank=%d fault mask %s", self.rank, msg["mask"])
        elif ev in ("rebuilt", "rebuild_failed"):
            fut = self._rebuilds.get(msg["request_id"])
            if fut is not None and not fut.done():
                fut.set_result(msg)
        elif ev == "loaded":
            log.info("rank=%d model %s loaded", self.rank, self.cfg.model)
        elif ev == "group":
            self.group_info = msg["group"]
            if msg.get("initial"):
                # --dp-master-port 0 (single rank) binds any port: remember the real one.
                self.master = (msg["group"]["master"]["ip"], int(msg["group"]["master"]["port"]))
                if self._ready is not None and not self._ready.done():
                    self._ready.set_result(None)
        elif ev == "init_failed":
            if self._ready is not None and not self._ready.done():
                self._ready.set_exception(StartupError(f"initial DP group failed: {msg['error']}"))
        elif ev == "exit":
            self._on_executor_exit(msg)
        else:
            log.warning("rank=%d unknown executor event %r", self.rank, ev)

    def _on_fault(self, info: str) -> None:
        """healthy -> diagnosing (for --diagnosing-sec, while the mask is probed) -> unhealthy."""
        diagnose_sec = self.cfg.diagnosing_sec
        changed = self.ft.mark_diagnosing() if diagnose_sec > 0 else self._mark_unhealthy(info, None)
        if changed:
            self.fault_detail = info
        if changed and diagnose_sec > 0:
            self._diagnosed_mask = None
            self._diagnosis = asyncio.get_running_loop().call_later(diagnose_sec, self._end_diagnosis, info)
            log.warning("rank=%d status diagnosing for %.1fs: %s", self.rank, diagnose_sec, info)
        self._fail_streams(self.unavailable_reason() or f"dp rank {self.rank} faulted: {info}")

    def _end_diagnosis(self, info: str) -> None:
        self._diagnosis = None
        self._mark_unhealthy(info, self._diagnosed_mask)

    def _mark_unhealthy(self, info: str, mask: list[int] | None) -> bool:
        changed = self.ft.mark_fault(VLLM_FAULT_INFO if self.ft.vllm else info, mask)
        if changed:
            log.warning("rank=%d status unhealthy (mask=%s): %s", self.rank, mask, info)
        return changed

    def _on_executor_exit(self, msg: dict[str, Any]) -> None:
        info = f"executor process {self.executor_pid} exited ({msg['description']})"
        if self._ready is not None and not self._ready.done():
            self._ready.set_exception(StartupError(info))
        if self._stopping:
            return
        if self._diagnosis is not None:
            self._diagnosis.cancel()
            self._diagnosis = None
        if self.ft.status is not EngineStatus.DEAD:
            self.fault_detail = info
        self.ft.mark_dead(VLLM_DEAD_INFO if self.ft.vllm else info)
        log.error("rank=%d status dead: %s", self.rank, info)
        self._fail_streams(f"dp rank {self.rank} is dead: {info}")
        for request_id, fut in list(self._rebuilds.items()):
            if not fut.done():
                fut.set_result({"ev": "rebuild_failed", "request_id": request_id, "error": info})

    # -- fault tolerance ------------------------------------------------------------------
    def status_doc(self) -> dict[str, Any]:
        return {"schema_version": SCHEMA_VERSION, "total_engines": 1, "engines": [self.ft.to_entry()]}

    def group_context(self) -> GroupContext:
        return GroupContext(
            rank=self.rank, dp_size=self.cfg.dp_size, members=self.members, removed=self.removed,
            master_ip=self.master[0], master_port=self.master[1],
        )

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

        Returns the detail of an HTTP 400 (vllm dialect: the rank is not unhealthy), else None (202).
        """
        decision = decide_apply(self.ft, req, self.group_context(), self.placement)
        for warning in decision.warnings:
            log.warning("rank=%d request_id=%s %s", self.rank, req.request_id, warning)
        if decision.ignored is not None:
            log.warning("rank=%d request_id=%s apply %s ignored: %s",
                        self.rank, req.request_id, req.instruction.value, decision.ignored)
            return None
        if decision.rejection is not None:
            self.ft.reject(req.request_id, decision.rejection)
            log.warning("rank=%d request_id=%s apply %s rejected: %s",
                        self.rank, req.request_id, req.instruction.value, decision.rejection)
            return decision.rejection if decision.not_ready and self.ft.vllm else None
        plan = decision.plan
        assert plan is not None
        self.ft.begin_recovery(plan.request_id)
        log.info("rank=%d request_id=%s apply %s accepted: members=%s removed=%s newly_removed=%s master=%s:%d",
                 self.rank, plan.request_id, plan.instruction.value, list(plan.members), list(plan.removed),
                 list(plan.newly_removed), plan.master_ip, plan.master_port)
        self._recovery_task = asyncio.create_task(self._recover(plan), name=f"recover-{plan.request_id}")
        return None

    async def _recover(self, plan: RecoveryPlan) -> None:
        assert self._executor is not None
        rid = plan.request_id
        started = time.monotonic()
        timeout_sec = self.cfg.engine_recovery_timeout_sec
        injected_failure = self.injections.take_fail_next_apply()
        if injected_failure is not None:
            self._executor.send({"op": "teardown", "reason": f"injected apply failure request_id={rid}"})
            self._fail_recovery(plan, f"injected failure: {injected_failure}", 0.0)
            return
        if self.injections.take_stall_next_apply():
            self._executor.send({"op": "teardown", "reason": f"injected apply stall request_id={rid}"})
            log.warning("rank=%d request_id=%s recovery stalled (injected); it will not complete", self.rank, rid)
            return
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._rebuilds[rid] = fut
        try:
            sent = self._executor.send({
                "op": "rebuild", "request_id": rid, "members": list(plan.members),
                "master_ip": plan.master_ip, "master_port": plan.master_port, "new_store": plan.new_store,
                "timeout_sec": timeout_sec, "delay_sec": self.injections.slow_rebuild_sec,
                "fail_vote": self.injections.take_fail_vote(),
                # vLLM only (the RFC-era engine waits for peers until the recovery timeout): a round
                # fails when a survivor does not check in within the window; once a scale_down
                # committed, idle ranks keep stepping so that a later death shows without traffic.
                "checkin_sec": self.cfg.scale_down_checkin_sec if self.ft.vllm else None,
                "keep_stepping": self.ft.vllm and bool(plan.removed),
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
            self._fail_recovery(plan, f"{plan.instruction.value} failed: {result['error']}", elapsed)
            return
        group = result["group"]
        self.members = plan.members
        self.removed = plan.removed
        self.master = (group["master"]["ip"], int(group["master"]["port"]))
        self.placement = plan.placement
        self.group_info = group
        self.ft.finish_recovery(rid)
        self.fault_detail = None
        log.info("rank=%d request_id=%s recovered in %.2fs: healthy, members=%s dense_rank=%d",
                 self.rank, rid, elapsed, list(plan.members), group["dense_rank"])

    def _fail_recovery(self, plan: RecoveryPlan, error: str, elapsed_sec: float) -> None:
        # vLLM: survivors that cannot commit a scale_down are beyond repair; a failed retry is not.
        fatal = plan.instruction is Instruction.SCALE_DOWN
        self.ft.fail_recovery(plan.request_id, error, fatal=fatal)
        if self.ft.status is EngineStatus.DEAD:
            self.fault_detail = f"{RECOVERY_FAILED_INFO}: {error}"
        log.error("rank=%d request_id=%s recovery failed after %.2fs (status %s): %s",
                  self.rank, plan.request_id, elapsed_sec, self.ft.status.value, error)

    # -- injection hooks ------------------------------------------------------------------
    def log_injection(self, body: dict[str, Any]) -> None:
        log.warning("rank=%d fault injection: %s", self.rank, body)

    def kill_executor(self) -> None:
        if self._executor is not None:
            self._executor.kill()

    def kill_process_soon(self) -> None:
        """Let the 200 go out, then die hard (executor first: it must not linger)."""
        def die() -> None:
            self.kill_executor()
            os.kill(os.getpid(), signal.SIGKILL)

        asyncio.get_running_loop().call_later(0.05, die)

    def inject_unhealthy(self, reason: str) -> None:
        info = f"injected: {reason}"
        if self._executor is not None:
            self._executor.send({"op": "teardown", "reason": info})
        self._on_fault(info)

    def admin_state(self) -> dict[str, Any]:
        dense = self.group_info.get("dense_rank") if self.group_info else None
        return {
            "dp_rank": self.rank,
            "dp_size": self.cfg.dp_size,
            "pid": os.getpid(),
            "executor_pid": self.executor_pid,
            "executor_alive": bool(self._executor and self._executor.alive),
            "model": self.cfg.model,
            "status": self.ft.to_entry(),
            "serving": self.ft.serving,
            "members": list(self.members),
            "removed_dp_ranks": list(self.removed),
            "master": {"ip": self.master[0], "port": self.master[1]},
            "group": self.group_info,
            "group_size": len(self.members),
            "dense_rank": dense,
            "placement": self.placement.to_json(),
            "local_experts": list(self.placement.by_rank.get(self.rank, ())),
            "wave": dict(self.wave_info),
            "in_flight_requests": len(self._streams),
            "injections": self.injections.to_json(),
            "config": self.cfg.to_json(),
        }
