"""When the NodeManager exits on its own: every engine dead, or StopPod.

With ``exit_when_all_engines_dead`` the NodeManager exits with status 3 once every non-retired local
engine has died (not stopped on purpose; all retired is no death). A live scale-down guard freezes
that exit: the round in flight may be retiring exactly those engines, and the Controller decides
what becomes of the pod. StopPod records the stop in the pod first (`pod_stop`: a restarted
NodeManager keeps every local rank retired) and exits with status 0. `decide` is the rule, pure;
`ExitPolicy` applies it on every unintended exit and once a second (the watchdog), logs a frozen
exit once, and calls the exit hook at most once.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Callable, Container, Mapping

from nodemanager.config import NodeManagerConfig
from nodemanager.guard import GuardState
from nodemanager.pod_state import PodState
from nodemanager.pod_stop import PodStopRecord
from nodemanager.supervisor import ProcessSupervisor, RunState

log = logging.getLogger("nodemanager.exit_policy")

EXIT_ALL_ENGINES_DEAD = 3
_WATCHDOG_SEC = 1.0

ExitHook = Callable[[int, str], None]


class Decision(enum.Enum):
    STAY = "stay"
    FROZEN = "frozen"  # every engine is dead, but a scale-down guard is live
    EXIT = "exit"


def all_engines_dead(states: Mapping[int, RunState], retired: Container[int]) -> bool:
    """Every non-retired engine has died (not stopped on purpose); False when all are retired."""
    ids = [i for i in states if i not in retired]
    return bool(ids) and all(states[i] is RunState.EXITED for i in ids)


def decide(*, enabled: bool, exiting: bool, states: Mapping[int, RunState], retired: Container[int],
           guard_live: bool) -> Decision:
    if not enabled or exiting or not all_engines_dead(states, retired):
        return Decision.STAY
    return Decision.FROZEN if guard_live else Decision.EXIT


class ExitPolicy:
    def __init__(self, config: NodeManagerConfig, supervisor: ProcessSupervisor, state: PodState, guard: GuardState,
                 exit_hook: ExitHook, stop_record: PodStopRecord | None = None) -> None:
        self._stop_record = stop_record
        self._enabled = config.exit_when_all_engines_dead
        self._instance = config.instance_id
        self._pod_ip = config.pod_ip
        self._supervisor = supervisor
        self._state = state
        self._guard = guard
        self._exit_hook = exit_hook
        # Set once the pod is on its way out (an exit asked for, or the NodeManager stopping): engine
        # exits are expected from then on.
        self.exiting = False
        self._frozen_logged = False

    def all_engines_dead(self) -> bool:
        return all_engines_dead(self._states(), self._state.retired)

    def check(self) -> None:
        holder = self._guard.live_holder()
        decision = decide(enabled=self._enabled, exiting=self.exiting, states=self._states(),
                          retired=self._state.retired, guard_live=holder is not None)
        if decision is Decision.STAY:
            self._frozen_logged = False
            return
        if decision is Decision.FROZEN:
            if not self._frozen_logged:
                log.warning("instance=%d request_id=%s every engine is dead, but the guard is live (%.1fs left): "
                            "not exiting", self._instance, holder, self._guard.remaining_sec())
                self._frozen_logged = True
            return
        self.exiting = True
        counted = [i for i in self._supervisor.ids if not self._state.is_retired(i)]
        reason = f"every non-retired local engine {counted} died"
        log.error("instance=%d pod=%s %s: exiting (exit_when_all_engines_dead)", self._instance, self._pod_ip, reason)
        self._exit_hook(EXIT_ALL_ENGINES_DEAD, reason)

    def expect_exits(self) -> None:
        """The NodeManager is stopping its engines: their exits are no deaths from now on."""
        self.exiting = True

    def stop_pod(self, request_id: str, reason: str) -> None:
        log.warning("instance=%d pod=%s request_id=%s StopPod (%s): stopping engines and exiting", self._instance,
                    self._pod_ip, request_id or "-", reason or "no reason given")
        self.exiting = True
        if self._stop_record is not None:
            try:
                self._stop_record.save(self._supervisor.ids, request_id, reason)
            except OSError as exc:  # the stop itself must still happen
                log.error("instance=%d request_id=%s stop not recorded in %s: a restart relaunches the engines: %s",
                          self._instance, request_id or "-", self._stop_record.storage.where, exc)
        self._exit_hook(0, f"StopPod request_id={request_id!r} reason={reason!r}")

    async def watchdog(self) -> None:
        while True:
            await asyncio.sleep(_WATCHDOG_SEC)
            self.check()

    def _states(self) -> dict[int, RunState]:
        return {i: self._supervisor.slot(i).state for i in self._supervisor.ids}
