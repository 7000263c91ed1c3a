"""FaultReporter (bounded queue, owed until acknowledged, superseded by a newer report of the rank,
retired filter, order) and ControllerLink (registration retried until accepted, re-registration on
known=false, config adoption, the Controller renewed) against a scripted double of the Controller
client wrapper (no sockets)."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from gen.motor.v1 import controller_pb2
from motor.testing.waits import async_wait_for
from nodemanager.ft_poller import DEAD, ENGINE_DEAD, RECOVERED, UNHEALTHY, FaultReport

from .scripted_controller import ScriptedClient, link, reporter, running


async def test_reports_are_sent_in_order_with_bounded_retry() -> None:
    client = ScriptedClient()
    client.fail["report"] = 2
    r = reporter(client)
    async with running(r):
        r.submit(FaultReport(1, UNHEALTHY, "u"))
        r.submit(FaultReport(2, DEAD, "d"))
        await async_wait_for(lambda: r.sent == 2, 5.0, "r.sent == 2", interval_sec=0.01)
        kinds = [(c.endpoint_id, c.kind) for c in client.calls["report"]]
        assert kinds == [(1, UNHEALTHY), (1, UNHEALTHY), (1, UNHEALTHY), (2, DEAD)]  # 2 failures, then delivered
        assert client.calls["report"][0].pod_ip == "127.0.0.2" and client.calls["report"][0].instance_id == 7
        assert r.lost == 0


async def test_a_report_undelivered_after_its_attempts_stays_owed_until_the_controller_answers() -> None:
    """The Controller is unreachable for longer than a report's quick attempts: the report is not
    lost, it is tried again with backoff and delivered once the Controller answers, before the next."""
    client = ScriptedClient()
    client.fail["report"] = 6
    r = reporter(client)
    async with running(r):
        r.submit(FaultReport(1, ENGINE_DEAD, "gone"))
        r.submit(FaultReport(2, ENGINE_DEAD, "gone"))
        await async_wait_for(lambda: r.sent == 2, 5.0, "r.sent == 2", interval_sec=0.01)
        assert r.lost == 0 and [c.endpoint_id for c in client.calls["report"]] == [1] * 7 + [2]
        assert r.pending == 0


async def test_a_newer_report_of_the_rank_supersedes_the_owed_one() -> None:
    """Only the newest observation of a rank is owed: an UNHEALTHY being retried and a queued
    RECOVERED of the same rank give way to the DEAD that followed; other ranks keep their order."""
    client = ScriptedClient()
    client.fail["report"] = 1000
    r = reporter(client)
    async with running(r):
        r.submit(FaultReport(1, UNHEALTHY, "u"))
        await async_wait_for(lambda: len(client.calls["report"]) >= 4, 5.0, "len(client.calls['report']) >= 4", interval_sec=0.01)  # past its quick attempts: owed
        r.submit(FaultReport(2, UNHEALTHY, "u"))
        r.submit(FaultReport(1, RECOVERED, "r"))
        r.submit(FaultReport(1, DEAD, "d"))
        assert r.pending == 3  # rank 1's UNHEALTHY (until its next attempt), rank 2, rank 1's DEAD
        client.fail["report"] = 0
        await async_wait_for(lambda: r.sent == 2, 5.0, "r.sent == 2", interval_sec=0.01)
        delivered = [(c.endpoint_id, c.kind) for c in client.calls["report"] if c.kind != UNHEALTHY or
                     c.endpoint_id != 1]
        assert delivered == [(2, UNHEALTHY), (1, DEAD)] and r.lost == 0 and r.pending == 0
        assert r._metrics.registry.get_sample_value("motor_nodemanager_fault_reports_dropped_total",
                                                    {"reason": "superseded"}) == 2  # the UNHEALTHY, the RECOVERED


async def test_retry_now_ends_the_backoff_of_an_owed_report() -> None:
    client = ScriptedClient()
    client.fail["report"] = 4
    r = reporter(client)
    r._retry_max_sec = 60.0  # an owed report would wait long
    async with running(r):
        r.submit(FaultReport(1, DEAD, "d"))
        await async_wait_for(lambda: len(client.calls["report"]) == 4, 5.0, "len(client.calls['report']) == 4", interval_sec=0.01)
        await asyncio.sleep(0.1)
        assert r.sent == 0
        r.retry_now()  # the Controller is back
        await async_wait_for(lambda: r.sent == 1, 1.0, "r.sent == 1", interval_sec=0.01)


async def test_a_refusal_is_final() -> None:
    client = ScriptedClient()
    client.fail["report"] = 1
    client.fail_code = grpc.StatusCode.INVALID_ARGUMENT
    r = reporter(client)
    async with running(r):
        r.submit(FaultReport(1, ENGINE_DEAD, "gone"))
        r.submit(FaultReport(2, ENGINE_DEAD, "gone"))
        await async_wait_for(lambda: r.sent == 1, 5.0, "r.sent == 1", interval_sec=0.01)
        assert r.lost == 1 and [c.endpoint_id for c in client.calls["report"]] == [1, 2]


async def test_reports_waiting_together_go_in_one_call_in_order_and_a_refused_one_is_dropped_alone() -> None:
    client = ScriptedClient()
    client.batches, client.refuse_ranks = True, {2}
    r = reporter(client)
    r.submit(FaultReport(3, DEAD, "d"))
    r.submit(FaultReport(1, UNHEALTHY, "u"))
    r.submit(FaultReport(2, UNHEALTHY, "u"))
    async with running(r):
        await async_wait_for(lambda: r.sent == 2, 5.0, "r.sent == 2", interval_sec=0.01)
        assert [[(x.endpoint_id, x.kind) for x in c.reports] for c in client.calls["reports"]] == \
            [[(3, DEAD), (1, UNHEALTHY), (2, UNHEALTHY)]]
        assert all((x.pod_ip, x.instance_id) == ("127.0.0.2", 7) for x in client.calls["reports"][0].reports)
        assert client.calls["report"] == [] and r.lost == 1 and r.pending == 0
        # A lone report later goes in a call of its own.
        r.submit(FaultReport(4, DEAD, "d"))
        await async_wait_for(lambda: r.sent == 3, 5.0, "r.sent == 3", interval_sec=0.01)
        assert [c.endpoint_id for c in client.calls["report"]] == [4] and len(client.calls["reports"]) == 1


async def test_a_call_of_several_is_retried_whole_and_a_superseded_report_leaves_it() -> None:
    client = ScriptedClient()
    client.batches = True
    client.fail["reports"] = 1000
    r = reporter(client)
    r.submit(FaultReport(1, UNHEALTHY, "u"))
    r.submit(FaultReport(2, UNHEALTHY, "u"))
    async with running(r):
        await async_wait_for(lambda: len(client.calls["reports"]) >= 4, 5.0, "the call past its quick attempts",
                             interval_sec=0.01)
        r.submit(FaultReport(1, DEAD, "d"))
        assert r.pending == 3  # the call's two, and rank 1's DEAD waiting for it
        client.fail["reports"] = 0
        await async_wait_for(lambda: r.sent == 2, 5.0, "r.sent == 2", interval_sec=0.01)
    # Every failed try carried both; the try after the DEAD carried rank 2's alone (a call of one).
    assert {tuple((x.endpoint_id, x.kind) for x in c.reports) for c in client.calls["reports"]} == \
        {((1, UNHEALTHY), (2, UNHEALTHY))}
    assert [(c.endpoint_id, c.kind) for c in client.calls["report"]] == [(2, UNHEALTHY), (1, DEAD)]
    assert r.lost == 0 and r.pending == 0


async def test_a_controller_without_the_call_of_several_gets_each_report_once_in_calls_of_one() -> None:
    client = ScriptedClient()  # answers ReportSoftwareFaults UNIMPLEMENTED
    r = reporter(client)
    for rank in (1, 2, 3):
        r.submit(FaultReport(rank, DEAD, "d"))
    async with running(r):
        await async_wait_for(lambda: r.sent == 3, 5.0, "r.sent == 3", interval_sec=0.01)
        r.submit(FaultReport(4, DEAD, "d"))
        r.submit(FaultReport(5, DEAD, "d"))
        await async_wait_for(lambda: r.sent == 5, 5.0, "r.sent == 5", interval_sec=0.01)
    assert [c.endpoint_id for c in client.calls["report"]] == [1, 2, 3, 4, 5] and client.calls["reports"] == []
    assert not r._batching and r.lost == 0


async def test_a_call_of_several_refused_whole_drops_every_report_it_carried() -> None:
    client = ScriptedClient()
    client.batches = True
    client.fail["reports"] = 1
    client.fail_code = grpc.StatusCode.PERMISSION_DENIED
    r = reporter(client)
    r.submit(FaultReport(1, DEAD, "d"))
    r.submit(FaultReport(2, DEAD, "d"))
    async with running(r):
        await async_wait_for(lambda: r.lost == 2, 5.0, "r.lost == 2", interval_sec=0.01)
        assert r.sent == 0 and r.pending == 0 and len(client.calls["reports"]) == 1


def test_queue_is_bounded_and_drops_the_oldest() -> None:
    r = reporter(ScriptedClient(), size=2)
    for i in range(4):
        r.submit(FaultReport(i, DEAD, "x"))
    assert [x.endpoint_id for x in r._queue] == [2, 3] and r.lost == 2 and r.pending == 2


async def test_retired_endpoints_are_filtered_at_submit_and_at_send() -> None:
    client = ScriptedClient()
    retired: set[int] = {5}
    r = reporter(client, retired)
    r.submit(FaultReport(5, DEAD, "x"))
    r.submit(FaultReport(6, DEAD, "x"))
    r.submit(FaultReport(7, DEAD, "x"))
    retired.add(6)  # committed while queued
    async with running(r):
        await async_wait_for(lambda: r.sent == 1, 5.0, "r.sent == 1", interval_sec=0.01)
        assert [c.endpoint_id for c in client.calls["report"]] == [7]


async def test_registration_is_retried_through_errors_and_refusals() -> None:
    client = ScriptedClient()
    client.fail["register"] = 2
    client.refuse_register = 2
    configs: list = []
    lk = link(client, configs, [0, 1])
    await asyncio.wait_for(lk.register(), 10)
    assert len(client.calls["register"]) == 5 and lk.registrations == 1 and lk.registered.is_set()


async def test_heartbeats_adopt_config_and_reregister_when_unknown() -> None:
    client = ScriptedClient()
    client.config = controller_pb2.NodeManagerFtConfig(enable_dp_scale_down_proxy=True, heartbeat_interval_sec=0.02)
    configs: list = []
    alive = [0, 1]
    lk = link(client, configs, alive)
    launched = asyncio.Event()
    task = asyncio.create_task(lk.run(launched))
    try:
        await asyncio.sleep(0.1)
        assert client.calls["register"] == []  # not before the initial launch ended
        launched.set()
        await async_wait_for(lambda: len(client.calls["heartbeat"]) >= 3, 5.0, "len(client.calls['heartbeat']) >= 3", interval_sec=0.01)
        assert lk.heartbeat_interval_sec == 0.05  # the controller's 0.02 is clamped to the floor
        assert configs[0][1] == "register" and configs[-1][1] == "heartbeat"
        assert [list(h.alive_endpoint_ids) for h in client.calls["heartbeat"][:1]] == [[0, 1]]
        seqs = [h.seq for h in client.calls["heartbeat"]]
        assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
        client.fail["heartbeat"] = 3  # the controller is down for a while: the loop keeps going
        await async_wait_for(lambda: client.fail["heartbeat"] == 0 and len(client.calls["heartbeat"]) >= 8, 5.0, "client.fail['heartbeat'] == 0 and len(client.calls['heartbeat']) >= 8", interval_sec=0.01)
        client.known = False
        await async_wait_for(lambda: len(client.calls["register"]) >= 2, 5.0, "len(client.calls['register']) >= 2", interval_sec=0.01)
        client.known = True
        alive.remove(1)
        lk.poke()
        await async_wait_for(lambda: list(client.calls["heartbeat"][-1].alive_endpoint_ids) == [0], 5.0, "list(client.calls['heartbeat'][-1].alive_endpoint_ids) == [0]", interval_sec=0.01)
        assert not task.done()
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


class TimedClient(ScriptedClient):
    """Records the loop time of every heartbeat."""

    def __init__(self) -> None:
        super().__init__()
        self.sent_at: list[float] = []

    async def heartbeat(self, req: controller_pb2.HeartbeatRequest) -> controller_pb2.HeartbeatResponse:
        self.sent_at.append(asyncio.get_running_loop().time())
        return await super().heartbeat(req)


async def test_an_unchanged_pod_repeats_its_heartbeat_only_after_the_quiet_interval() -> None:
    client = TimedClient()
    client.config = controller_pb2.NodeManagerFtConfig(heartbeat_interval_sec=0.05, heartbeat_quiet_interval_sec=0.25)
    lk = link(client, [], [0, 1])
    launched = asyncio.Event()
    launched.set()
    task = asyncio.create_task(lk.run(launched))
    try:
        await async_wait_for(lambda: len(client.sent_at) >= 4, 10.0, "four heartbeats", interval_sec=0.01)
        gaps = [b - a for a, b in zip(client.sent_at, client.sent_at[1:])]
        assert lk.quiet_interval_sec == 0.25 and min(gaps) >= 0.25 - 0.002, gaps
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_a_changed_alive_set_a_poke_and_an_outage_still_go_every_period() -> None:
    """With a quiet interval far longer than the waits here, each of these heartbeats can only have
    gone at a period."""
    client = TimedClient()
    client.config = controller_pb2.NodeManagerFtConfig(heartbeat_interval_sec=0.05, heartbeat_quiet_interval_sec=300)
    alive = [0, 1]
    lk = link(client, [], alive)
    launched = asyncio.Event()
    launched.set()
    task = asyncio.create_task(lk.run(launched))
    try:
        await async_wait_for(lambda: len(client.sent_at) >= 1 and lk.quiet_interval_sec == 300, 10.0, "a first heartbeat",
                             interval_sec=0.01)
        alive.remove(1)  # no poke: the period's check sees it
        await async_wait_for(lambda: list(client.calls["heartbeat"][-1].alive_endpoint_ids) == [0], 10.0,
                             "the changed set sent", interval_sec=0.01)
        sent = len(client.sent_at)
        lk.poke()
        await async_wait_for(lambda: len(client.sent_at) > sent, 10.0, "the poked heartbeat", interval_sec=0.01)
        client.fail["heartbeat"] = 3
        lk.poke()
        await async_wait_for(lambda: client.fail["heartbeat"] == 0 and not lk._heartbeat_failing, 10.0,
                             "heartbeats each period through the outage until one is answered", interval_sec=0.01)
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_a_stop_that_comes_with_a_poke_ends_the_heartbeat_loop() -> None:
    # A poke (an engine stopping, say) and the stop's cancellation in the same turn of the loop:
    # the wait between heartbeats must end in the cancellation, not take the poke and go on.
    client = ScriptedClient()
    lk = link(client, [], [0])
    launched = asyncio.Event()
    launched.set()
    task = asyncio.create_task(lk.run(launched))
    await async_wait_for(lambda: len(client.calls["heartbeat"]) >= 1, 5.0, "a first heartbeat", interval_sec=0.01)
    await asyncio.sleep(0)  # the loop is in its wait between heartbeats
    sent = len(client.calls["heartbeat"])
    lk.poke()
    task.cancel()
    await async_wait_for(lambda: task.done() or len(client.calls["heartbeat"]) > sent, 5.0,
                         "the loop ended or sent another heartbeat", interval_sec=0.01)
    assert task.cancelled(), f"the loop went on: {len(client.calls['heartbeat']) - sent} heartbeats after its stop"


async def test_the_link_tells_when_the_controller_may_have_lost_the_reports() -> None:
    """A heartbeat outage that ends (the Controller may have restarted from its store, answering
    known=true with no evidence) and a re-registration (it forgot the pod) each renew the Controller;
    ordinary heartbeats do not."""
    client = ScriptedClient()
    renewed: list[str] = []
    lk = link(client, [], [0, 1])
    lk._on_renewed = renewed.append
    launched = asyncio.Event()
    launched.set()
    task = asyncio.create_task(lk.run(launched))
    try:
        await async_wait_for(lambda: len(client.calls["heartbeat"]) >= 3, 5.0, "len(client.calls['heartbeat']) >= 3", interval_sec=0.01)
        assert renewed == []
        client.fail["heartbeat"] = 2  # the Controller restarts
        await async_wait_for(lambda: client.fail["heartbeat"] == 0 and len(renewed) == 1, 5.0, "client.fail['heartbeat'] == 0 and len(renewed) == 1", interval_sec=0.01)
        assert "outage" in renewed[0] and len(client.calls["register"]) == 1
        client.known = False  # a Controller that lost the pod
        await async_wait_for(lambda: len(client.calls["register"]) == 2 and len(renewed) == 2, 5.0, "len(client.calls['register']) == 2 and len(renewed) == 2", interval_sec=0.01)
        client.known = True
        assert "registered again" in renewed[1]
        mark = len(client.calls["heartbeat"])
        await async_wait_for(lambda: len(client.calls["heartbeat"]) >= mark + 3, 5.0, "len(client.calls['heartbeat']) >= mark + 3", interval_sec=0.01)
        assert len(renewed) == 2
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_early_reports_wait_for_the_first_registration() -> None:
    """A report made before the NodeManager registered is held, then sent."""
    client = ScriptedClient()
    r = reporter(client, registered=False)
    async with running(r):
        r.submit(FaultReport(1, ENGINE_DEAD, "exited before registration"))
        for _ in range(20):
            await asyncio.sleep(0)
        assert client.calls["report"] == [] and r.pending == 1
        r.registered.set()
        await async_wait_for(lambda: r.sent == 1, 5.0, "r.sent == 1", interval_sec=0.01)
        assert r.lost == 0


async def test_not_found_while_the_instance_assembles_is_held_and_sent_again() -> None:
    """NOT_FOUND (the Controller does not know the instance yet) is not final."""
    client = ScriptedClient()
    client.fail["report"] = 4
    client.fail_code = grpc.StatusCode.NOT_FOUND
    r = reporter(client)
    async with running(r):
        r.submit(FaultReport(1, ENGINE_DEAD, "gone"))
        await async_wait_for(lambda: r.sent == 1, 5.0, "r.sent == 1", interval_sec=0.01)
        assert r.lost == 0 and len(client.calls["report"]) == 5


async def test_a_report_held_past_the_hold_time_stays_owed() -> None:
    """NOT_FOUND past the hold time spends attempts, and the report stays owed after them."""
    client = ScriptedClient()
    client.fail["report"] = 5
    client.fail_code = grpc.StatusCode.NOT_FOUND
    r = reporter(client, hold_sec=0.0)
    async with running(r):
        r.submit(FaultReport(1, ENGINE_DEAD, "gone"))
        await async_wait_for(lambda: r.sent == 1, 5.0, "r.sent == 1", interval_sec=0.01)
        assert r.lost == 0 and len(client.calls["report"]) == 6


async def test_a_stop_that_comes_with_the_first_registration_ends_the_reporter() -> None:
    # A held report waits for the first registration; the registration and the reporter's stop in
    # the same turn must end the reporter, not send the report and wait for the next one forever.
    client = ScriptedClient()
    r = reporter(client, registered=False)
    r.start()
    r.submit(FaultReport(1, ENGINE_DEAD, "exited before registration"))
    for _ in range(5):
        await asyncio.sleep(0)  # the reporter holds the report
    task = r._task
    assert task is not None and not task.done()
    r.registered.set()
    task.cancel()
    await async_wait_for(lambda: task.done() or len(client.calls["report"]) > 0, 5.0,
                         "the reporter ended or sent the report", interval_sec=0.01)
    assert task.cancelled(), f"the reporter went on after its stop: {len(client.calls['report'])} reports sent"
    await r.close()
