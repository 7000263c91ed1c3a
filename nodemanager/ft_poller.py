"""EngineFtManager: polls each local engine's FT status and turns changes into fault evidence.

Polling of an engine starts only after its first readiness (``watch``) and stops when it is
stopped on purpose, retired or dead (``unwatch``; a read that was in flight then is discarded, since
the engine going away on purpose, or the process death the supervisor reports, is not status
evidence); a relaunch starts a fresh watch with fresh
dedupe state. Every ``engine_status_poll_interval_sec`` (fixed rate, one task per engine so a hung
engine never delays the others) the status is read with the same identity-checked bridge the
Status RPC uses, bounded by ``engine_request_timeout_sec``:

* ``unhealthy`` → UNHEALTHY, ``dead`` → DEAD; the first timeout or connection failure at run time
  is DEAD evidence too; an identity-contract violation or malformed answer → PROTOCOL_ERROR;
* ``diagnosing`` (vLLM's transient state while it queries its all2all mask) is no news yet: nothing
  is reported, but it is an observed change, so the verdict that follows is reported;
* each is reported when the engine's entry changes (never again while the same entry persists); a
  return to ``healthy`` after a report sends RECOVERED once; a committed round re-arms every
  survivor (`rearm`), so the next fault is reported even if its entry reads the same;
* an entry the Controller read itself and took as evidence (`taken`: a Status call flagged
  taken_as_evidence) counts as reported, as if this poller had sent it, with one difference: a
  committed round supersedes what the Controller took, so no RECOVERED is owed for it then, and
  while a round holds this pod's guard (`defer_recovered`) that RECOVERED waits for the round's end,
  so a round is not answered with a RECOVERED per survivor (an aborted round leaves it owed, and the
  next healthy poll sends it).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

from gen.motor.v1 import controller_pb2
from motor.common.text import rank_ranges
from motor.common.waiting import end_tasks
from nodemanager.clock import SYSTEM_CLOCK, Clock
from nodemanager.engine_answers import EngineProtocolError, EngineStatusEntry, EngineTimeout, EngineUnreachable
from nodemanager.engine_http import EngineAddress, EngineHttpClient
from nodemanager.metrics import NodeManagerMetrics

log = logging.getLogger("nodemanager.ft_poller")

UNHEALTHY = controller_pb2.SOFTWARE_FAULT_KIND_UNHEALTHY
DEAD = controller_pb2.SOFTWARE_FAULT_KIND_DEAD
ENGINE_DEAD = controller_pb2.SOFTWARE_FAULT_KIND_ENGINE_DEAD
PROTOCOL_ERROR = controller_pb2.SOFTWARE_FAULT_KIND_PROTOCOL_ERROR
RECOVERED = controller_pb2.SOFTWARE_FAULT_KIND_RECOVERED
HEALTHY_OBSERVATION = 0  # not a report kind: the engine said healthy


def kind_name(kind: int) -> str:
    return "HEALTHY" if kind == HEALTHY_OBSERVATION else controller_pb2.SoftwareFaultKind.Name(kind).removeprefix(
        "SOFTWARE_FAULT_KIND_")


@dataclass(frozen=True)
class FaultReport:
    endpoint_id: int
    kind: int  # controller_pb2.SoftwareFaultKind
    evidence: str
    status: EngineStatusEntry | None = None
    observed_at_unix_sec: float = 0.0
    # When the engine was first seen diagnosing before this verdict (0: not seen).
    diagnosing_observed_at_unix_sec: float = 0.0


DIAGNOSING_OBSERVATION = -1  # not a report kind: the engine is still diagnosing


class FaultDeduper:
    """Per endpoint: what was last seen and which fault is reported and not yet recovered (pure).

    A fault's identity is the whole status entry the engine pushed (status, fault_info, mask,
    last_ft_request_id, ft_error), never fault_info alone: vLLM's fault_info is only the exception's
    type name, the same on every fault. The engine replaces the entry on every change, so a changed
    entry is a new fault; any other observation in between (diagnosing, healthy) re-arms, and so do a
    committed round and a restart (`reset`), so a survivor that fails again right after a rebuild is
    always reported, whether or not a poll saw it healthy in between.
    """

    def __init__(self) -> None:
        self._seen: dict[int, tuple] = {}
        self._reported: dict[int, int] = {}
        # Endpoints whose reported fault the Controller read and took itself (never sent from here).
        self._taken: set[int] = set()

    def observe(self, endpoint_id: int, observation: int, identity: tuple = (), *, taken: bool = False) -> int | None:
        """The kind to report for this observation, or None when nothing is to be reported. With
        `taken` the Controller has this observation already: a kind returned is recorded as taken."""
        key = (observation, *identity)
        previous = self._seen.get(endpoint_id)
        self._seen[endpoint_id] = key
        if observation == DIAGNOSING_OBSERVATION:
            return None
        if observation == HEALTHY_OBSERVATION:
            self._taken.discard(endpoint_id)
            return RECOVERED if self._reported.pop(endpoint_id, None) is not None else None
        if previous == key and endpoint_id in self._reported:
            return None
        self._reported[endpoint_id] = observation
        if taken:
            self._taken.add(endpoint_id)
        else:
            self._taken.discard(endpoint_id)
        return observation

    def is_taken(self, endpoint_id: int) -> bool:
        """The fault reported and not yet recovered is one the Controller took, not one sent."""
        return endpoint_id in self._taken

    def reset(self, endpoint_id: int) -> None:
        self._seen.pop(endpoint_id, None)
        self._reported.pop(endpoint_id, None)
        self._taken.discard(endpoint_id)

    def rearm(self, endpoint_id: int) -> None:
        """After a committed round. Forget what was seen, keep what was reported: the next fault is
        news even if it reads like the last one, and a return to healthy still sends RECOVERED; but a
        fault the Controller took is forgotten whole (its commit superseded it: nothing is owed)."""
        if endpoint_id in self._taken:
            self.reset(endpoint_id)
        else:
            self._seen.pop(endpoint_id, None)

    def last(self, endpoint_id: int) -> int | None:
        """The fault reported and not yet recovered, if any."""
        return self._reported.get(endpoint_id)


def entry_identity(entry: EngineStatusEntry | None) -> tuple:
    if entry is None:
        return ()
    return (entry.status, entry.ft_state, entry.fault_info, entry.mask, entry.last_ft_request_id, entry.ft_error)


def classify(entry: EngineStatusEntry) -> int:
    """The observation an entry is; diagnosing is no evidence yet (nothing to report)."""
    if entry.status == "dead":
        return DEAD
    if entry.status == "unhealthy":
        return UNHEALTHY
    if entry.status == "diagnosing":
        return DIAGNOSING_OBSERVATION
    return HEALTHY_OBSERVATION


_GOLDEN = 0.6180339887498949


def poll_phase(endpoint_id: int) -> float:
    """This rank's poll phase, a fraction of the period: ranks spread evenly over it (golden-ratio
    sequence), on every pod alike, so a fault that every survivor shows at once (a failed collective)
    is seen by the first of many staggered polls instead of one synchronised tick a period apart,
    and an instance's reads never arrive in one burst."""
    return (endpoint_id * _GOLDEN) % 1.0


def next_phase_tick(after: float, interval_sec: float, phase: float) -> float:
    """The first time later than `after` (the loop's monotonic clock, the same for every process of
    the host) at `phase` of the period."""
    tick = after - after % interval_sec + phase * interval_sec
    return tick if tick > after else tick + interval_sec


class EngineFtManager:
    def __init__(
        self,
        http: EngineHttpClient,
        *,
        interval_sec: float,
        timeout_sec: float,
        address_of: Callable[[int], EngineAddress | None],
        report: Callable[[FaultReport], None],
        instance_id: int,
        still_polled: Callable[[int], bool] = lambda _: True,
        defer_recovered: Callable[[], bool] = lambda: False,
        metrics: NodeManagerMetrics | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self._http = http
        self._clock = clock
        self._interval = interval_sec
        self._timeout = timeout_sec
        self._address_of = address_of
        self._report = report
        self._still_polled = still_polled
        self._defer_recovered = defer_recovered
        self._instance = instance_id
        self._tasks: dict[int, asyncio.Task[None]] = {}
        self.dedupe = FaultDeduper()
        # First diagnosing observation since the last verdict, per endpoint (wall time, for the report).
        self._diagnosing_since: dict[int, float] = {}
        self.polls = 0
        self._metrics = metrics or NodeManagerMetrics()

    @property
    def watched(self) -> list[int]:
        return sorted(i for i, t in self._tasks.items() if not t.done())

    def watch(self, endpoint_id: int) -> None:
        """(Re)starts polling the engine (a new run: fresh dedupe state)."""
        self.unwatch(endpoint_id)
        self.dedupe.reset(endpoint_id)
        self._tasks[endpoint_id] = asyncio.create_task(self._loop(endpoint_id), name=f"ft-poll-rank{endpoint_id}")
        log.info("instance=%d rank=%d FT status polling started (every %gs)", self._instance, endpoint_id, self._interval)

    def rearm(self, endpoint_ids: list[int]) -> None:
        """After a committed round: the Controller dropped the survivors' old evidence, so whatever
        they report next is news; a fault it had taken itself is forgotten (no RECOVERED is owed)."""
        for endpoint_id in endpoint_ids:
            self.dedupe.rearm(endpoint_id)

    def taken(self, entries: list[EngineStatusEntry]) -> list[int]:
        """The Controller took these reads as fault evidence: each UNHEALTHY or DEAD entry counts as
        reported (a RECOVERED is owed for it until a round commits; a relaunch's `watch` starts
        afresh). Returns the endpoints whose report this saved."""
        saved = []
        for entry in entries:
            observation = classify(entry)
            if observation not in (UNHEALTHY, DEAD):
                continue
            self._diagnosing_since.pop(entry.id, None)
            if self.dedupe.observe(entry.id, observation, entry_identity(entry), taken=True) is not None:
                saved.append(entry.id)
                self._metrics.reports_taken.labels(kind_name(observation)).inc()
        if saved:
            log.info("instance=%d ranks %s taken as evidence by the Controller: not reported again", self._instance,
                     rank_ranges(saved))
        return saved

    def unwatch(self, endpoint_id: int) -> None:
        task = self._tasks.pop(endpoint_id, None)
        if task is not None and not task.done():
            task.cancel()
            log.info("instance=%d rank=%d FT status polling stopped", self._instance, endpoint_id)

    async def close(self, bound_sec: float) -> None:
        """Ends every poll loop, waiting at most `bound_sec` for them (a loop still running is logged)."""
        tasks = list(self._tasks.values())
        self._tasks.clear()
        await end_tasks(tasks, bound_sec, f"instance={self._instance} FT poller close")

    async def _loop(self, endpoint_id: int) -> None:
        loop = asyncio.get_running_loop()
        next_at = loop.time()
        first = True
        while True:
            try:
                await self.poll_once(endpoint_id)
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - a bug in one poll must not end polling
                log.exception("instance=%d rank=%d FT status poll failed unexpectedly", self._instance, endpoint_id)
            if first:  # the first read at once, then on this rank's own phase of the period
                next_at = next_phase_tick(next_at, self._interval, poll_phase(endpoint_id))
                first = False
            else:
                next_at += self._interval
            now = loop.time()
            if next_at < now:  # overran (a hung engine): skip the missed ticks, keep the rate
                next_at = now + self._interval - ((now - next_at) % self._interval)
            await asyncio.sleep(next_at - now)

    async def poll_once(self, endpoint_id: int) -> int | None:
        """One read → the kind reported, if any."""
        addr = self._address_of(endpoint_id)
        if addr is None:
            return None
        self.polls += 1
        entry: EngineStatusEntry | None = None
        started, error = self._clock.monotonic(), ""
        try:
            entry = await self._http.read_status(addr, self._timeout)
            observation = classify(entry)
            evidence = entry.describe()
        except (EngineTimeout, EngineUnreachable) as exc:
            observation, evidence = DEAD, str(exc)
            error = "timeout" if isinstance(exc, EngineTimeout) else "unreachable"
        except EngineProtocolError as exc:
            observation, evidence, error = PROTOCOL_ERROR, str(exc), "protocol"
        self._metrics.poll(self._clock.monotonic() - started, error)
        if not self._still_polled(endpoint_id):
            return None  # stopped, retired or exited while the read was in flight: not evidence
        if observation == HEALTHY_OBSERVATION and self.dedupe.is_taken(endpoint_id) and self._defer_recovered():
            return None  # the round holding the guard supersedes the taken fault when it commits
        kind = self.dedupe.observe(endpoint_id, observation, entry_identity(entry))
        if observation == DIAGNOSING_OBSERVATION:
            self._diagnosing_since.setdefault(endpoint_id, self._clock.wall())
            log.debug("instance=%d rank=%d FT status %s: no verdict yet", self._instance, endpoint_id, evidence)
            return None
        diagnosing_at = self._diagnosing_since.pop(endpoint_id, 0.0)
        if kind is None:
            return None
        log.log(logging.INFO if kind == RECOVERED else logging.WARNING, "instance=%d rank=%d FT status %s: %s",
                self._instance, endpoint_id, kind_name(kind), evidence)
        self._report(FaultReport(endpoint_id, kind, evidence, entry, self._clock.wall(), diagnosing_at))
        return kind
