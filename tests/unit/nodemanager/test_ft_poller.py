"""The FT poller's verdicts over scripted status reads (no sockets): ``diagnosing`` is no news, so it
is never reported and leaves the dedupe state alone; the verdict after it is judged against what
was reported before."""

from __future__ import annotations

from collections.abc import Iterable

import pytest

from nodemanager.engine_answers import EngineStatusEntry, EngineTimeout
from nodemanager.engine_http import EngineAddress
from nodemanager.ft_poller import (
    DEAD,
    DIAGNOSING_OBSERVATION,
    RECOVERED,
    UNHEALTHY,
    EngineFtManager,
    FaultReport,
    classify,
)

RANK = 3


class ScriptedHttp:
    """Answers each read with the next scripted entry (or raises it, for a transport error)."""

    def __init__(self, answers: Iterable[EngineStatusEntry | Exception]) -> None:
        self._answers = list(answers)

    async def read_status(self, addr: EngineAddress, timeout_sec: float | None = None) -> EngineStatusEntry:
        answer = self._answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


def entry(status: str, fault_info: str | None = None) -> EngineStatusEntry:
    return EngineStatusEntry(RANK, status, fault_info=fault_info)


def scripted(answers: list[EngineStatusEntry | Exception], reports: list[FaultReport],
             guard_live: list[bool] | None = None) -> EngineFtManager:
    live = guard_live if guard_live is not None else [False]
    return EngineFtManager(
        ScriptedHttp(answers), interval_sec=1.0, timeout_sec=0.5,  # type: ignore[arg-type]
        address_of=lambda i: EngineAddress(i, "127.0.0.2", 9000), report=reports.append, instance_id=1,
        defer_recovered=lambda: live[0],
    )


async def poll_all(answers: list[EngineStatusEntry | Exception]) -> tuple[list[int | None], list[FaultReport]]:
    reports: list[FaultReport] = []
    manager = scripted(answers, reports)
    kinds = [await manager.poll_once(RANK) for _ in answers]
    return kinds, reports


async def test_a_read_the_controller_took_as_evidence_is_not_reported_again_but_recovers() -> None:
    reports: list[FaultReport] = []
    unhealthy = entry("unhealthy", "peer 1 gone")
    manager = scripted([unhealthy, entry("unhealthy", "another fault"), entry("healthy")], reports)
    others = [EngineStatusEntry(RANK + 1, "diagnosing"), EngineStatusEntry(RANK + 2, "healthy")]
    assert manager.taken([unhealthy, *others]) == [RANK], "only UNHEALTHY and DEAD entries are evidence"
    assert manager.taken([unhealthy]) == [], "taken once"
    assert await manager.poll_once(RANK) is None and reports == [], "the same entry: already reported"
    assert await manager.poll_once(RANK) == UNHEALTHY, "a changed entry is a new fault"
    assert await manager.poll_once(RANK) == RECOVERED, "healthy again after the taken fault"
    assert manager.taken([entry("dead")]) == [RANK]


def test_diagnosing_is_no_verdict() -> None:
    assert classify(entry("diagnosing")) == DIAGNOSING_OBSERVATION


async def test_diagnosing_alone_is_never_reported() -> None:
    kinds, reports = await poll_all([entry("diagnosing")] * 3 + [entry("healthy")])
    assert kinds == [None, None, None, None] and reports == []


async def test_diagnosing_before_the_verdict_reports_only_the_verdict() -> None:
    # vLLM: healthy → diagnosing (querying the all2all mask) → unhealthy with fault_info and mask.
    kinds, reports = await poll_all([entry("healthy"), entry("diagnosing"), entry("diagnosing"),
                                     entry("unhealthy", "peer 1 gone")])
    assert kinds == [None, None, None, UNHEALTHY]
    assert [(r.endpoint_id, r.kind) for r in reports] == [(RANK, UNHEALTHY)]
    assert reports[0].status is not None and reports[0].status.fault_info == "peer 1 gone"


async def test_diagnosing_after_a_report_does_not_recover_but_rearms() -> None:
    # Not RECOVERED (the engine was not seen healthy); but diagnosing is an observed change (vLLM
    # pushes it before every verdict), so a verdict that reads like the last one is a new fault.
    kinds, _ = await poll_all([entry("unhealthy", "RuntimeError"), entry("diagnosing"),
                               entry("unhealthy", "RuntimeError"), entry("diagnosing"), entry("healthy")])
    assert kinds == [UNHEALTHY, None, UNHEALTHY, None, RECOVERED]


async def test_diagnosing_does_not_hide_a_death_or_a_new_fault() -> None:
    kinds, _ = await poll_all([entry("unhealthy", "peer 1 gone"), entry("diagnosing"), entry("dead"),
                               entry("diagnosing"), EngineTimeout(RANK, "GET ... did not answer within 0.5s")])
    assert kinds == [UNHEALTHY, None, DEAD, None, DEAD]


@pytest.mark.parametrize("status", ["healthy", "diagnosing", "unhealthy", "dead"])
async def test_every_known_status_is_polled_without_error(status: str) -> None:
    kinds, _ = await poll_all([entry(status)])
    assert kinds == [{"unhealthy": UNHEALTHY, "dead": DEAD}.get(status)]


async def test_a_verdict_after_diagnosing_carries_when_diagnosing_was_first_seen() -> None:
    _, reports = await poll_all([entry("diagnosing"), entry("diagnosing"), entry("unhealthy", "RuntimeError"),
                                 entry("healthy"), entry("unhealthy", "RuntimeError")])
    first, recovered, second = reports
    assert 0 < first.diagnosing_observed_at_unix_sec <= first.observed_at_unix_sec
    assert recovered.kind == RECOVERED and second.diagnosing_observed_at_unix_sec == 0.0


def test_poll_phases_spread_ranks_over_the_period_and_ticks_follow_them() -> None:
    from nodemanager.ft_poller import next_phase_tick, poll_phase

    phases = sorted(poll_phase(r) for r in range(8))
    assert all(0.0 <= p < 1.0 for p in phases)
    assert max(b - a for a, b in zip(phases, phases[1:], strict=False)) < 0.25, "no two neighbours a quarter apart"
    assert next_phase_tick(10.2, 1.0, 0.5) == 10.5
    assert next_phase_tick(10.7, 1.0, 0.5) == 11.5
    assert next_phase_tick(10.5, 1.0, 0.5) == 11.5, "strictly later"
    assert next_phase_tick(3.0, 2.0, 0.25) == 4.5


async def test_a_taken_fault_recovers_only_after_the_round_and_a_commit_owes_nothing() -> None:
    reports: list[FaultReport] = []
    guard = [True]  # a round holds the pod's guard
    unhealthy = entry("unhealthy", "peer 1 gone")
    manager = scripted([entry("healthy"), entry("healthy"), entry("healthy")], reports, guard)
    manager.taken([unhealthy])
    assert await manager.poll_once(RANK) is None, "healthy under the round's guard: RECOVERED waits"
    guard[0] = False  # the round aborted: the guard is gone and nothing superseded the taken fault
    assert await manager.poll_once(RANK) == RECOVERED
    manager.taken([unhealthy])
    manager.rearm([RANK])  # the next round committed
    assert await manager.poll_once(RANK) is None and [r.kind for r in reports] == [RECOVERED]


async def test_a_fault_the_poller_sent_itself_still_recovers_after_a_commit() -> None:
    reports: list[FaultReport] = []
    unhealthy = entry("unhealthy", "peer 1 gone")
    manager = scripted([unhealthy, entry("healthy")], reports, [True])
    assert await manager.poll_once(RANK) == UNHEALTHY
    assert manager.taken([unhealthy]) == [], "already reported by the poller: not the Controller's"
    manager.rearm([RANK])
    assert await manager.poll_once(RANK) == RECOVERED, "its own report is cleared by its own RECOVERED"
