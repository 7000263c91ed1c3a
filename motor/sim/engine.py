"""The API process's view of the rank (vLLM's AsyncLLM + FT manager): requests, FT status, applies.

All state here is touched only on the event loop; the executor's messages arrive through
``ExecutorHandle`` and are handled by ``_on_event``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from motor.common.waiting import get_within
from motor.sim.config import SimConfig
from motor.sim.engine_rounds import SUPPORTED_INSTRUCTIONS, EngineRounds
from motor.sim.executor_client import ExecutorHandle
from motor.sim.ft_state import SCHEMA_VERSION, VLLM_DEAD_INFO, VLLM_FAULT_INFO, EngineStatus, FtStatus
from motor.sim.injection_state import InjectionState
from motor.sim.placement import initial_placement
from motor.sim.toy_model import text_state

log = logging.getLogger("motor.sim.engine")


class EngineUnavailable(Exception):
    """The rank cannot serve (faulted, recovering, dead); HTTP 503."""


class StartupError(RuntimeError):
    pass


@dataclass
class _Stream:
    queue: asyncio.Queue[tuple[int, bool] | EngineUnavailable] = field(default_factory=asyncio.Queue)


class SimEngine(EngineRounds):
    def __init__(self, cfg: SimConfig) -> None:
        self.cfg = cfg
        self.rank = cfg.dp_rank
        self.ft = FtStatus(rank=cfg.dp_rank, dialect=cfg.ft_dialect)
        # What went wrong, in words: the vllm dialect's fault_info is only a type name.
        self.fault_detail: str | None = None
        self._diagnosis: asyncio.TimerHandle | None = None
        self._diagnosed_mask: list[int] | None = None
        # A joiner (--join) is in no group until its scale_up commits, and serves nothing meanwhile.
        self.members: tuple[int, ...] = () if cfg.join else tuple(range(cfg.dp_size))
        self.removed: tuple[int, ...] = ()
        self.master: tuple[str, int] | None = None if cfg.join else (cfg.dp_master_ip, cfg.dp_master_port)
        self.ft.standby = cfg.join
        self.standby_reason: str | None = (
            f"dp rank {self.rank} waits to join a DP group (started with --join)" if cfg.join else None)
        self._standby_timer: asyncio.TimerHandle | None = None
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
        self._cancel_standby_timer()
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
        if self.ft.standby and self.ft.status is EngineStatus.HEALTHY:
            return self.standby_reason
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
                    item = await get_within(stream.queue, self._token_wait_sec)
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
        elif ev == "joining":
            if self._ready is not None and not self._ready.done():
                self._ready.set_result(None)
        elif ev == "paused":
            self._on_paused(msg.get("request_id"))
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

    # -- fault tolerance (the rounds: engine_rounds) ---------------------------------------
    def status_doc(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"schema_version": SCHEMA_VERSION, "total_engines": 1, "engines": [self.ft.to_entry()]}
        if self.scale_up_supported:
            doc["supported_instructions"] = list(SUPPORTED_INSTRUCTIONS)
        return doc

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
            "standby": self.ft.standby,  # healthy, in no serving group: a joiner, or paused for a scale_up
            "members": list(self.members),
            "removed_dp_ranks": list(self.removed),
            "master": {"ip": self.master[0], "port": self.master[1]} if self.master is not None else None,
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
