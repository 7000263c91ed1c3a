"""Following the Controller leader on the NodeManager side, against a scripted double of the
Controller client (no sockets): a fault report made while no Controller replica leads (a leader switch) waits for the new
leader instead of being counted lost, and stays owed if no leader comes within the hold time; a new
leader term makes the pod register again and report its current faults again."""

from __future__ import annotations

import asyncio

import pytest

from gen.motor.v1 import controller_pb2
from motor.common.leader_client import LeaderUnavailable
from motor.testing.waits import async_wait_for
from nodemanager.ft_poller import ENGINE_DEAD, UNHEALTHY, FaultReport

from .scripted_controller import ScriptedClient, link, reporter, running


class SwitchingClient(ScriptedClient):
    """Reports fail with LeaderUnavailable `switching` times (an election under way), then go through;
    `term` is the leader term the answers carry."""

    def __init__(self) -> None:
        super().__init__()
        self.switching = 0
        self.term = 0

    async def report_software_fault(self, req):
        self.calls["report"].append(req)
        if self.switching > 0:
            self.switching -= 1
            raise LeaderUnavailable("ReportSoftwareFault: no Controller replica leads now: c-1 is a standby")
        return controller_pb2.ReportSoftwareFaultResponse(accepted=True)


async def test_a_report_made_during_a_leader_switch_reaches_the_new_leader() -> None:
    client = SwitchingClient()
    client.switching = 7  # more than the 3 attempts a report gets: held, not attempts
    r = reporter(client)  # type: ignore[arg-type]
    async with running(r):
        r.submit(FaultReport(1, ENGINE_DEAD, "exited during the switch"))
        r.submit(FaultReport(2, UNHEALTHY, "peer gone"))
        await async_wait_for(lambda: r.sent == 2, 5.0, "both reports reaching the new leader", interval_sec=0.01)
        assert r.lost == 0
        assert [c.endpoint_id for c in client.calls["report"]] == [1] * 8 + [2]


async def test_no_leader_for_longer_than_the_hold_time_spends_the_attempts_and_stays_owed() -> None:
    client = SwitchingClient()
    client.switching = 5
    r = reporter(client, hold_sec=0.0)  # type: ignore[arg-type]
    async with running(r):
        r.submit(FaultReport(1, ENGINE_DEAD, "gone"))
        await async_wait_for(lambda: r.sent == 1, 5.0, "r.sent == 1", interval_sec=0.01)
        assert r.lost == 0 and len(client.calls["report"]) == 6


async def test_a_new_leader_term_registers_the_pod_again_and_reports_again() -> None:
    client = SwitchingClient()
    client.term = 4
    changes: list[str] = []
    lk = link(client, [], [0, 1])
    lk._on_renewed = changes.append
    launched = asyncio.Event()
    launched.set()
    task = asyncio.create_task(lk.run(launched))
    try:
        await async_wait_for(lambda: len(client.calls["heartbeat"]) >= 2, 5.0, "two heartbeats", interval_sec=0.01)
        assert len(client.calls["register"]) == 1 and lk.registered_term == 4 and changes == []
        client.term = 9  # another replica took over (its answers carry its term)
        await async_wait_for(lambda: len(client.calls["register"]) == 2, 5.0, "len(client.calls['register']) == 2", interval_sec=0.01)
        await async_wait_for(lambda: changes == ["a new Controller leader (term 9)"], 5.0, "changes == ['a new Controller leader (term 9)']", interval_sec=0.01)
        assert lk.registered_term == 9
        await async_wait_for(lambda: len(client.calls["heartbeat"]) >= 5, 5.0, "heartbeats going on under the new term",
                             interval_sec=0.01)
        assert len(client.calls["register"]) == 2  # once per new term
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
