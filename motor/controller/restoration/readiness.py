"""Whether a scaled-down instance can be restored now, and why not. Pure: times are passed in.

A retired rank has a ready place when the pod that hosts it (the original pod back after a
restart, or the replacement that took its place) is registered and has heartbeated within
`heartbeat_timeout_sec`: its NodeManager will start the rank when the restoration asks. A pod
told to stop (StopPod) has no place until it registers again (back after a restart, or replaced). A restoration also needs the
instance serving on its survivors (SCALED_DOWN_RUNNING) with no strategy running, and every pod of
its survivors alive too (the rebuild stops and starts every pod's engines).
"""

from __future__ import annotations

from dataclasses import dataclass

from motor.controller.instances import InstanceRecord
from motor.controller.model.runtime import FtPhase, FtRuntime


@dataclass(frozen=True)
class Readiness:
    # Retired ranks with no ready place, and the silent pods that host them.
    unplaced: tuple[int, ...] = ()
    silent_pods: tuple[str, ...] = ()
    # Why a restoration cannot start apart from places ("" when nothing else stops it).
    blocked: str = ""
    # Nothing to restore: every original rank serves.
    full: bool = False

    @property
    def ready(self) -> bool:
        return not self.full and not self.unplaced and not self.blocked

    def why(self) -> str:
        """What the restoration waits for, in words ("" when ready)."""
        if self.full:
            return "every original rank serves: nothing to restore"
        parts = []
        if self.unplaced:
            parts.append(f"ranks {list(self.unplaced)} have no ready place yet (pod {', '.join(self.silent_pods)} "
                         "stopped or silent, not registered again or replaced)")
        if self.blocked:
            parts.append(self.blocked)
        return "; ".join(parts)


def readiness(runtime: FtRuntime, record: InstanceRecord | None, now_sec: float, heartbeat_timeout_sec: float,
              running: str | None) -> Readiness:
    """`running`: the name of the strategy running on the instance, None when none."""
    if not runtime.dead_committed and runtime.phase is not FtPhase.RECONFIGURING:
        return Readiness(full=True)
    if record is None or not record.assembled:
        return Readiness(blocked="the instance is not assembled")
    unplaced: set[int] = set()
    silent: list[str] = []
    survivors_silent: list[str] = []
    for pod in sorted(record.pods.values(), key=lambda p: p.pod_ip):
        if not pod.stop_requested and pod.heartbeat_seen and now_sec - pod.last_heartbeat_sec < heartbeat_timeout_sec:
            continue
        retired = set(pod.ranks) & runtime.dead_committed
        if retired:
            unplaced |= retired
            silent.append(pod.pod_ip)
        if set(pod.ranks) - runtime.dead_committed:
            survivors_silent.append(pod.pod_ip)
    blocked = []
    if running is not None:
        blocked.append(f"{running} is running on the instance")
    elif runtime.phase is not FtPhase.SCALED_DOWN_RUNNING:
        blocked.append(f"the instance is {runtime.phase}, not serving on its survivors")
    if survivors_silent:
        blocked.append(f"pod {', '.join(survivors_silent)} of serving ranks is silent")
    return Readiness(tuple(sorted(unplaced)), tuple(silent), "; ".join(blocked))


def auto_due(runtime: FtRuntime, ready: Readiness, ready_since_sec: float | None, now_sec: float, *,
             min_alive_fraction: float, settle_sec: float) -> bool:
    """Whether capacity_restore.mode auto restores the instance now: ready for `settle_sec`, and
    serving on fewer than `min_alive_fraction` of its original ranks."""
    if not ready.ready or ready_since_sec is None or now_sec - ready_since_sec < settle_sec:
        return False
    alive = len(runtime.original_dp_ranks) - len(runtime.dead_committed)
    return alive < min_alive_fraction * len(runtime.original_dp_ranks)
