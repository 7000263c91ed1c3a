"""The executor: the rank's "EngineCore" child process that owns the DP group and steps the model.

Why a child process: an executor failure must leave the API (status route) up, and when the
executor dies its sockets must go with it so that peers notice at once (connection reset)
instead of waiting for the gloo timeout. A SIGKILLed child gives exactly that; it also keeps
torch out of the API process.

Scheduling (like vLLM's DP engine-core busy loop): while any member has work the members step
in lockstep, each step one all-reduce of "unfinished requests" (a rank without work runs a
dummy step); the wave ends when the all-reduce says everyone is done. Idle ranks run no
collectives. A rank that gets work while idle starts wave ``n`` by creating the store key
``wave/<n>``; idle peers poll that key. Store failures while idle are only logged (the RFC's
idle row: survivors stay HEALTHY when a peer dies while idle); failing to start a wave or a
failed/timed-out collective is a fault: the group is shut down (so peers blocked in the same
collective fail at once) and the API process is told (UNHEALTHY).

A rebuild (an accepted apply) forms the new group (every member must check in within the
rebuild's ``checkin_sec`` when given, else before its deadline), then the members vote with one
all-reduce: the round commits only if every member votes yes. A ``scale_up`` survivor's group is
live and its peers may be stepping with it, so it does not break it: with ``pause`` its rebuild
waits for the next step (starting a wave when idle), whose all-reduce carries a pause count beside
the work count; every member sees it in the same step and leaves the group there, at one batch
boundary, without a fault. A member that had no round of its own reports ``paused`` (the API
process then waits for its apply). A ``--join`` executor forms no group at start and waits for its
round. With ``keep_stepping`` (vLLM after a committed scale_down) the members
never go idle again: they run a dummy step every ``--idle-step-interval-sec`` while there is no
work, so a peer that dies later is seen without traffic.

Protocol with the API process (dicts over a multiprocessing Pipe):
  in:  add{rid, state, max_tokens} | abort{rid} | teardown{reason} | shutdown
       | rebuild{request_id, members, master_ip, master_port, new_store, timeout_sec, checkin_sec,
                 delay_sec, fail_vote, keep_stepping, pause}
       | pause{request_id, reason}  (leave the group as a scale_up does, form none)
  out: loaded | group{group, initial} | joining | init_failed{error} | tokens{items}
       | rejected{rid, reason} | fault{info, wave} | fault_mask{mask} | wave{...}
       | rebuilt{request_id, group} | rebuild_failed{request_id, error, vote} | paused{request_id}
"""

from __future__ import annotations

import ctypes
import logging
import os
import queue
import signal
import threading
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from motor.sim.config import SimConfig
from motor.sim.executor_rounds import ExecutorRounds
from motor.sim.toy_model import extend_state, next_token

log = logging.getLogger("motor.sim.executor")

_PR_SET_PDEATHSIG = 1
_IDLE_POLL_BACKOFF_SEC = 1.0
_POLL_WARN_EVERY_SEC = 30.0
_PROBE_WINDOW_SEC = 1.0
_CMD_WAIT_SEC = 1.0


def _die_with_parent(parent_pid: int) -> None:
    """The executor must never outlive its API process (it holds the store and gloo sockets)."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent_pid:
        os._exit(0)


@dataclass
class _Request:
    state: int  # the toy model's state of the text so far (prompt + generated)
    max_tokens: int
    produced: int = 0


class Executor(ExecutorRounds):
    def __init__(self, cfg: SimConfig, conn: Connection) -> None:
        from motor.sim import dp_group  # torch: imported in the executor process only

        self._dp = dp_group
        self.cfg = cfg
        self.rank = cfg.dp_rank
        self._conn = conn
        self._send_lock = threading.Lock()
        self._cmds: queue.Queue[dict[str, Any]] = queue.Queue()
        self.group: Any = None  # dp_group.DpGroup while the group is usable
        self.store: Any = None  # dp_group.StoreHandle, kept across teardown so a rebuild may reuse it
        # Store servers of earlier groups: like a real engine's, they keep holding their ports.
        self.old_store_servers: list[Any] = []
        self.generation = 0
        self.requests: dict[str, _Request] = {}
        self.in_wave = False
        self.keep_stepping = False  # set for good by the first committed round that asks for it
        self.wave_completed = 0
        self.steps = 0
        self._next_poll = 0.0
        self._poll_failures = 0
        self._last_poll_warning = 0.0
        # A scale_up's rebuild (or pause) waiting for the step at which every member leaves the group.
        self.pending_round: dict[str, Any] | None = None

    # -- plumbing -------------------------------------------------------------------------
    def send(self, msg: dict[str, Any]) -> None:
        try:
            with self._send_lock:
                self._conn.send(msg)
        except (OSError, EOFError, ValueError):
            os._exit(0)  # the API process is gone; nothing left to serve

    def _reader(self) -> None:
        # Runs for the process lifetime; EOF means the API process died.
        while True:
            try:
                msg = self._conn.recv()
            except (EOFError, OSError):
                os._exit(0)
            if msg.get("op") == "shutdown":
                log.info("rank=%d executor shutting down", self.rank)
                os._exit(0)
            self._cmds.put(msg)

    # -- lifecycle ------------------------------------------------------------------------
    def run(self) -> None:
        threading.Thread(target=self._reader, name="executor-cmd-reader", daemon=True).start()
        if self.cfg.model_load_sec > 0:
            log.info("rank=%d loading model %s (%.1fs)", self.rank, self.cfg.model, self.cfg.model_load_sec)
            time.sleep(self.cfg.model_load_sec)
        self.send({"ev": "loaded"})
        if self.cfg.join:
            log.info("rank=%d joiner: no DP group until a scale_up round admits this rank", self.rank)
            self.send({"ev": "joining"})
            self._loop()
            return
        deadline = time.monotonic() + self.cfg.dp_init_timeout_sec
        try:
            group = self._dp.form_group(
                tag="init", generation=0, members=range(self.cfg.dp_size), rank=self.rank,
                master_ip=self.cfg.dp_master_ip, master_port=self.cfg.dp_master_port,
                gloo_host=self.cfg.gloo_host, deadline=deadline,
            )
        except self._dp.DpGroupError as exc:
            log.error("rank=%d initial DP group failed: %s", self.rank, exc)
            self.send({"ev": "init_failed", "error": str(exc)})
            os._exit(1)
        self.group, self.store = group, group.store
        log.info("rank=%d initial DP group formed: %s", self.rank, group.describe())
        self.send({"ev": "group", "group": group.describe(), "initial": True})
        self._loop()

    def _loop(self) -> None:
        # The engine's busy loop lives as long as the process; each pass is bounded by a timeout.
        while True:
            if self.group is None and self.pending_round is not None:
                self._run_pending()  # the group went away before the pause step: nothing to leave
                continue
            if self.group is None:
                try:
                    self._handle(self._cmds.get(timeout=_CMD_WAIT_SEC))
                except queue.Empty:
                    pass
                continue
            if self.in_wave:
                self._drain()
                if self.group is not None:
                    self._step()
                continue
            wait_sec = max(0.0, self._next_poll - time.monotonic())
            try:
                self._handle(self._cmds.get(timeout=wait_sec))
                self._drain()
            except queue.Empty:
                pass
            if self.group is None or self.in_wave:
                continue
            if self.requests:
                self._start_wave()
            elif time.monotonic() >= self._next_poll:
                self._poll_wave()

    def _drain(self) -> None:
        for _ in range(self._cmds.qsize()):
            try:
                self._handle(self._cmds.get_nowait())
            except queue.Empty:
                return

    def _handle(self, cmd: dict[str, Any]) -> None:
        op = cmd.get("op")
        if op == "add":
            if self.group is None:
                self.send({"ev": "rejected", "rid": cmd["rid"], "reason": "DP group is down"})
            else:
                self.requests[cmd["rid"]] = _Request(state=cmd["state"], max_tokens=cmd["max_tokens"])
        elif op == "abort":
            self.requests.pop(cmd["rid"], None)
        elif op == "teardown":
            self._teardown(str(cmd.get("reason", "requested")))
        elif op in ("rebuild", "pause"):
            self._round(cmd)
        else:
            log.warning("rank=%d executor ignoring unknown command %r", self.rank, op)

    # -- waves ----------------------------------------------------------------------------
    def _wave_event(self) -> None:
        self.send({"ev": "wave", "completed": self.wave_completed, "active": self.in_wave, "steps": self.steps})

    def _start_wave(self) -> None:
        wave = self.wave_completed + 1
        try:
            self.group.start_wave(wave)
        except Exception as exc:
            self._fault(
                f"cannot start DP wave {wave}: DP store {self.group.store.address} unreachable: "
                f"{self._dp.clean_error(exc)}",
                wave=None,
            )
            return
        self.in_wave = True
        self._wave_event()

    def _poll_wave(self) -> None:
        now = time.monotonic()
        try:
            started = self.group.wave_started(self.wave_completed + 1)
        except Exception as exc:
            # Idle: nothing is lost yet, so this is not a fault; traffic will tell.
            self._poll_failures += 1
            if self._poll_failures == 1 or now - self._last_poll_warning >= _POLL_WARN_EVERY_SEC:
                self._last_poll_warning = now
                log.warning("rank=%d idle: DP store %s unreachable (%d polls failed), staying healthy: %s",
                            self.rank, self.group.store.address, self._poll_failures,
                            self._dp.clean_error(exc))
            self._next_poll = now + _IDLE_POLL_BACKOFF_SEC
            return
        if self._poll_failures:
            log.info("rank=%d DP store %s reachable again after %d failed polls",
                     self.rank, self.group.store.address, self._poll_failures)
            self._poll_failures = 0
        self._next_poll = now + self.cfg.wave_poll_interval_sec
        if started:
            self.in_wave = True
            self._wave_event()

    def _step(self) -> None:
        group = self.group
        wave = self.wave_completed + 1
        try:
            total, pauses = group.allreduce_sums([len(self.requests), int(self.pending_round is not None)],
                                                 self.cfg.collective_timeout_sec)
        except self._dp.CollectiveError as exc:
            self._fault(f"collective all_reduce failed in DP group {group.tag!r} wave {wave} step "
                        f"{self.steps + 1}: {exc}", wave=wave)
            return
        self.steps += 1
        if pauses:
            self._leave_for_round(pauses)
            return
        if total == 0 and self.keep_stepping:
            self._idle_tick()
            return
        if total == 0:
            self.in_wave = False
            self.wave_completed = wave
            self._next_poll = time.monotonic()
            if group.dense_rank == 0:
                group.forget_wave(wave)
            self._wave_event()
            return
        if self.cfg.per_token_latency_sec > 0:
            time.sleep(self.cfg.per_token_latency_sec)  # the forward pass
        items = []
        for rid, req in list(self.requests.items()):
            tid = next_token(req.state)
            req.state = extend_state(req.state, tid)
            req.produced += 1
            finished = req.produced >= req.max_tokens
            items.append((rid, tid, finished))
            if finished:
                del self.requests[rid]
        if items:
            self.send({"ev": "tokens", "items": items})

    def _idle_tick(self) -> None:
        """Keep-stepping without work: wait for a command at most one interval, then step again."""
        try:
            self._handle(self._cmds.get(timeout=self.cfg.idle_step_interval_sec))
        except queue.Empty:
            pass

    # -- faults and rebuilds --------------------------------------------------------------
    def _drop_group(self) -> Any:
        group, self.group = self.group, None
        self.in_wave = False
        self.requests.clear()
        if group is not None:
            group.shutdown()
        return group

    def _fault(self, info: str, *, wave: int | None) -> None:
        log.warning("rank=%d DP fault: %s", self.rank, info)
        group = self._drop_group()
        self.send({"ev": "fault", "info": info, "wave": wave})
        if group is not None and wave is not None:
            # The mask is only informative: a waiting command (an apply) cuts the probe short.
            mask = group.probe_missing(wave, min(_PROBE_WINDOW_SEC, self.cfg.collective_timeout_sec),
                                       interrupted=self._recovery_waiting)
            if mask:
                log.warning("rank=%d wave=%d ranks that did not report after the fault: %s", self.rank, wave, mask)
                self.send({"ev": "fault_mask", "mask": mask})

    def _recovery_waiting(self) -> bool:
        if self.pending_round is not None:
            return True
        with self._cmds.mutex:
            return any(cmd.get("op") in ("rebuild", "pause", "teardown") for cmd in self._cmds.queue)

    def _teardown(self, reason: str) -> None:
        if self.group is not None:
            log.warning("rank=%d tearing down DP group %r: %s", self.rank, self.group.tag, reason)
        self._drop_group()


def executor_main(conn: Connection, cfg_json: dict[str, Any], parent_pid: int | None) -> None:
    """Entry point of the executor process: the multiprocessing spawn target, or called in a child
    of the executor zygote (``parent_pid`` None: its parent is the zygote, which kills it once its API
    process's connection closes; the pipe's EOF ends it too)."""
    if parent_pid is not None:
        _die_with_parent(parent_pid)
    # The API process decides when the executor ends (shutdown command, or its own death).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    cfg = SimConfig(**cfg_json)
    logging.basicConfig(
        force=True,  # a zygote's child inherits the zygote's handler
        level=getattr(logging, cfg.log_level),
        format="%(asctime)s %(levelname)s %(name)s[executor pid=%(process)d]: %(message)s",
    )
    try:
        Executor(cfg, conn).run()
    except Exception:
        log.exception("rank=%d executor crashed", cfg.dp_rank)
        os._exit(70)
