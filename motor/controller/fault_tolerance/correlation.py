"""The hardware-first correlation window of RFC §4.4. Pure.

A mappable L4–L6 hardware fault that arrives before any software evidence opens a window of
`hardware_ft_correlation_window_sec`. Within it, only an FT snapshot that matches lets the normal
decision through: all-UNHEALTHY (fast-recovery check), or a complete U+D whose DEAD set contains
every hardware-mapped rank (scale-down, with the software DEAD set as apply parameters; the hardware
ranks only validate). When the window ends without such a snapshot, the instance is reconfigured.

Only an all-UNHEALTHY snapshot (fast recovery not applicable: waiting for a DEAD) is a match that
goes on waiting: the window is then matched and the software collection timeout decides from
there, as RFC §4.4 sends it; a later scale-down must still carry every hardware rank among its DEAD
ranks. An incomplete snapshot is no match, even one holding every hardware rank's DEAD: when the
window ends without a complete U+D, the instance is reconfigured.

A hardware fault that comes while software evidence is already being collected waits for nothing
(the FT snapshot decides) but is evidence for that decision, as it is for a running round (RFC
§4.2): it joins the window matched. A matched entry belongs to the collection window it matched: it
does not hold the decision back (the snapshot pulls and the idle probe go on as without it), and it
ends when that window does, so it never judges a later, unrelated fault. Unless the FT framework
never saw any of its ranks in that window: a card fault that joined another rank's window, which
then closed by that rank's recovery, is still unperceived. It goes back to waiting as a hardware
fault at rest, within the window counted from its arrival.
"""

from __future__ import annotations

from collections.abc import Hashable
import dataclasses
from dataclasses import dataclass

from motor.controller.fault_tolerance.decision import Action, Decision, WaitKind


@dataclass(frozen=True)
class PendingHardware:
    key: Hashable
    ranks: frozenset[int]
    deadline_sec: float
    description: str
    # The FT framework perceived it: no correlation deadline any more.
    matched: bool = False
    # Matched: the start of the collection window it matched; the entry ends with that window.
    window_started_sec: float | None = None
    # The fault's level (controller_pb2.FaultLevel, 0: not said) and codes: the fast-recovery policy's input.
    level: int = 0
    codes: tuple[str, ...] = ()
    # When it arrived, and which of its ranks had software evidence while it was matched.
    arrived_sec: float = 0.0
    perceived: frozenset[int] = frozenset()


@dataclass(frozen=True)
class Verdict:
    """What the window makes of a decision: let it through, hold it, or replace it."""

    action: str  # "proceed", "wait" or "reconfigure"
    reason: str = ""
    hardware_ranks: frozenset[int] = frozenset()


class HardwareCorrelation:
    def __init__(self, window_sec: float) -> None:
        if window_sec <= 0:
            raise ValueError(f"window_sec must be > 0, got {window_sec}")
        self.window_sec = window_sec
        self._pending: dict[int, dict[Hashable, PendingHardware]] = {}

    def open(self, instance_id: int, key: Hashable, ranks: frozenset[int], now_sec: float, description: str,
             level: int = 0, codes: tuple[str, ...] = ()) -> bool:
        """Opens (or keeps) the window for one hardware fault; False when that fault already waits."""
        waiting = self._pending.setdefault(instance_id, {})
        if key in waiting:
            return False
        waiting[key] = PendingHardware(key, frozenset(ranks), now_sec + self.window_sec, description,
                                       level=level, codes=codes, arrived_sec=now_sec)
        return True

    def join(self, instance_id: int, key: Hashable, ranks: frozenset[int], window_started_sec: float,
             description: str, now_sec: float, level: int = 0, codes: tuple[str, ...] = ()) -> bool:
        """Software came first: the fault is evidence for the decision of the open collection window,
        with no deadline of its own; False when that fault is already known."""
        waiting = self._pending.setdefault(instance_id, {})
        if key in waiting:
            return False
        waiting[key] = PendingHardware(key, frozenset(ranks), now_sec + self.window_sec, description, matched=True,
                                       window_started_sec=window_started_sec, level=level, codes=codes,
                                       arrived_sec=now_sec)
        return True

    def pending(self, instance_id: int) -> list[PendingHardware]:
        return list(self._pending.get(instance_id, {}).values())

    def clear(self, instance_id: int) -> list[PendingHardware]:
        return list(self._pending.pop(instance_id, {}).values())

    def deadlines(self) -> list[float]:
        return [p.deadline_sec for waiting in self._pending.values() for p in waiting.values() if not p.matched]

    def _end_stale(self, instance_id: int, window_started_sec: float | None, evidence_ranks: frozenset[int]) -> None:
        """Matched entries whose collection window ended (its evidence cleared) end with it, but one
        none of whose ranks the FT framework saw waits again as at rest; the others of the open
        window note which of their ranks have evidence now."""
        waiting = self._pending.get(instance_id)
        if not waiting:
            return
        for key, p in list(waiting.items()):
            if not p.matched:
                continue
            if p.window_started_sec == window_started_sec:
                waiting[key] = dataclasses.replace(p, perceived=p.perceived | (p.ranks & evidence_ranks))
            elif p.perceived:
                del waiting[key]
            else:
                waiting[key] = dataclasses.replace(p, matched=False, window_started_sec=None,
                                                   deadline_sec=p.arrived_sec + self.window_sec)
        if not waiting:
            del self._pending[instance_id]

    def judge(self, instance_id: int, decision: Decision, now_sec: float,
              window_started_sec: float | None, evidence_ranks: frozenset[int] = frozenset()) -> Verdict:
        """`window_started_sec`: the start of the instance's open collection window (None: none open);
        `evidence_ranks`: the ranks with UNHEALTHY or DEAD evidence in it."""
        self._end_stale(instance_id, window_started_sec, evidence_ranks)
        waiting = self.pending(instance_id)
        if not waiting:
            return Verdict("proceed")
        ranks = frozenset().union(*(p.ranks for p in waiting))
        if decision.action is Action.SCALE_DOWN and ranks <= decision.dead:
            return Verdict("proceed", "complete U+D contains every hardware-mapped rank", ranks)
        if decision.action in (Action.FAST_RECOVERY, Action.RECONFIGURE):
            return Verdict("proceed", "", ranks)
        faults = "; ".join(p.description for p in waiting)
        if decision.action is Action.WAIT and decision.wait_kind is WaitKind.DEAD_RANK:
            self._pending[instance_id] = {
                p.key: p if p.matched else dataclasses.replace(p, matched=True, window_started_sec=window_started_sec,
                                                               perceived=p.ranks & evidence_ranks)
                for p in waiting}
            return Verdict("proceed", "the FT framework saw the hardware fault: the collection timeout decides", ranks)
        unmatched = [p for p in waiting if not p.matched]
        if unmatched and now_sec >= min(p.deadline_sec for p in unmatched):
            return Verdict(
                "reconfigure",
                f"hardware fault ({faults}) on ranks {sorted(ranks)} had no matching FT snapshot within "
                f"{self.window_sec:g}s",
                ranks,
            )
        if not unmatched and decision.action is Action.SCALE_DOWN:
            return Verdict("reconfigure", f"hardware fault ({faults}) on ranks {sorted(ranks)} but the FT snapshot's "
                           f"dead ranks are {sorted(decision.dead)}", ranks)
        if not unmatched:
            return Verdict("proceed", "", ranks)  # the snapshot decides, its pulls and probes go on
        return Verdict("wait", "waiting for the FT framework to see the hardware fault", ranks)
