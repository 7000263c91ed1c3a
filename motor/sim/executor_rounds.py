"""The executor's rounds: leaving the group for a scale_up, rebuilding it, and the commit vote.

Part of ``Executor`` (``motor.sim.executor``, whose docstring has the protocol): split out so that
the stepping loop and the round machinery are each one module.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from motor.sim.config import SimConfig

log = logging.getLogger("motor.sim.executor")


class ExecutorRounds:
    """Rounds of one executor; the attributes and hooks below are ``Executor``'s."""

    _dp: Any
    cfg: SimConfig
    rank: int
    group: Any
    store: Any
    old_store_servers: list[Any]
    generation: int
    in_wave: bool
    keep_stepping: bool
    wave_completed: int
    _next_poll: float
    _poll_failures: int
    pending_round: dict[str, Any] | None

    def send(self, msg: dict[str, Any]) -> None:
        raise NotImplementedError

    def _drop_group(self) -> Any:
        raise NotImplementedError

    def _teardown(self, reason: str) -> None:
        raise NotImplementedError

    def _start_wave(self) -> None:
        raise NotImplementedError

    def _wave_event(self) -> None:
        raise NotImplementedError

    def _round(self, cmd: dict[str, Any]) -> None:
        """A rebuild, or a pause; with ``pause`` and a live group, first leave it with every member."""
        if self.pending_round is not None:
            log.warning("rank=%d request_id=%s round ignored: round %s is waiting for the pause step",
                        self.rank, cmd["request_id"], self.pending_round["request_id"])
            return
        self.pending_round = cmd
        if not (cmd["op"] == "pause" or cmd.get("pause")) or self.group is None:
            self._run_pending()
            return
        log.info("rank=%d request_id=%s leaving DP group %r at the next step, with every member",
                 self.rank, cmd["request_id"], self.group.tag)
        if not self.in_wave:
            self._start_wave()  # idle peers see the wave key, step with us, and see the pause

    def _leave_for_round(self, pauses: int) -> None:
        group = self._drop_group()
        mine = self.pending_round["request_id"] if self.pending_round is not None else None
        log.info("rank=%d left DP group %r at a batch boundary for a scale_up round (%d members pausing, "
                 "own request_id=%s)", self.rank, group.tag if group is not None else None, pauses, mine)
        if self.pending_round is None:
            self.send({"ev": "paused", "request_id": None})
        self._wave_event()

    def _run_pending(self) -> None:
        cmd, self.pending_round = self.pending_round, None
        if cmd is None:
            return
        if cmd["op"] == "rebuild":
            self._rebuild(cmd)
        else:
            self._teardown(str(cmd.get("reason", "paused")))
            self.send({"ev": "paused", "request_id": cmd["request_id"]})

    def _rebuild(self, cmd: dict[str, Any]) -> None:
        request_id = cmd["request_id"]
        started = time.monotonic()
        deadline = started + float(cmd["timeout_sec"])
        self._teardown(f"rebuild request_id={request_id}")
        delay_sec = float(cmd.get("delay_sec") or 0.0)
        if delay_sec > 0:
            log.warning("rank=%d request_id=%s rebuild slowed by %.1fs (injected)", self.rank, request_id, delay_sec)
            time.sleep(delay_sec)
        members = list(cmd["members"])
        log.info("rank=%d request_id=%s forming DP group members=%s master=%s:%d",
                 self.rank, request_id, members, cmd["master_ip"], cmd["master_port"])
        try:
            group = self._dp.form_group(
                tag=request_id, generation=self.generation + 1, members=members, rank=self.rank,
                master_ip=cmd["master_ip"], master_port=int(cmd["master_port"]),
                gloo_host=self.cfg.gloo_host, deadline=deadline,
                reuse_store=None if cmd.get("new_store") else self.store, checkin_sec=cmd.get("checkin_sec"),
            )
        except self._dp.DpGroupError as exc:
            self._rebuild_failed(request_id, started, str(exc))
            return
        if self.store is not None and self.store is not group.store and self.store.is_server:
            self.old_store_servers.append(self.store)
        self.store = group.store  # kept even when the vote fails: a retry may reuse it
        vote_error = self._vote(group, request_id, cmd.get("fail_vote"), deadline)
        if vote_error is not None:
            group.shutdown()
            self._rebuild_failed(request_id, started, vote_error, vote=True)
            return
        self.generation += 1
        self.group = group
        self.keep_stepping = self.keep_stepping or bool(cmd.get("keep_stepping"))
        self.in_wave = self.keep_stepping
        self.wave_completed = 0
        self._next_poll = time.monotonic()
        self._poll_failures = 0
        log.info("rank=%d request_id=%s DP group rebuilt in %.2fs: %s",
                 self.rank, request_id, time.monotonic() - started, group.describe())
        self.send({"ev": "rebuilt", "request_id": request_id, "group": group.describe()})
        self._wave_event()

    def _rebuild_failed(self, request_id: str, started: float, error: str, *, vote: bool = False) -> None:
        log.error("rank=%d request_id=%s rebuild failed after %.2fs: %s",
                  self.rank, request_id, time.monotonic() - started, error)
        self.send({"ev": "rebuild_failed", "request_id": request_id, "error": error, "vote": vote})

    def _vote(self, group: Any, request_id: str, against: str | None, deadline: float) -> str | None:
        """Every member says whether it can commit the round; None when all can, else why not."""
        if against is not None:
            log.warning("rank=%d request_id=%s voting against the round (injected): %s", self.rank, request_id, against)
        try:
            yes = group.allreduce_sum(0 if against is not None else 1,
                                      max(0.001, min(self.cfg.collective_timeout_sec, deadline - time.monotonic())))
        except self._dp.CollectiveError as exc:
            return f"recovery vote of round {request_id} failed: {exc}"
        if yes == group.size:
            return None
        mine = f"; this rank voted no: {against}" if against is not None else ""
        return f"recovery vote of round {request_id} failed: {yes} of {group.size} members voted to commit{mine}"
