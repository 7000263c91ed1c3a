"""FaultReporter (bounded queue, owed until acknowledged, superseded by a newer report of the rank,
retired filter, order) and ControllerLink (registration retried until accepted, re-registration on
known=false, config adoption, the Controller renewed) against a scripted double of the Controller
client wrapper (no sockets)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import grpc
import pytest

from gen.motor.v1 import controller_pb2
from nodemanager.controller_link import ControllerLink
from nodemanager.ft_poller import DEAD, ENGINE_DEAD, RECOVERED, UNHEALTHY, FaultReport
from nodemanager.reporter import FaultReporter


def unavailable(code: grpc.StatusCode = grpc.StatusCode.UNAVAILABLE) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), "down")


class ScriptedClient:
    """Double of nodemanager.controller_client.ControllerClient: fails the first N calls of a kind."""

    address = "controller.test:1"

    def __init__(self) -> None:
        self.fail = {"register": 0, "heartbeat": 0, "report": 0}
        self.fail_code = grpc.StatusCode.UNAVAILABLE
        self.refuse_register = 0
        self.known = True
        self.config: controller_pb2.NodeManagerFtConfig | None = None
        self.calls: dict[str, list] = {"register": [], "heartbeat": [], "report": []}

    def _maybe_fail(self, kind: str, req: object) -> None:
        self.calls[kind].append(req)
        if self.fail[kind] > 0:
            self.fail[kind] -= 1
            raise unavailable(self.fail_code)

    async def register(self, req: controller_pb2.RegisterRequest) -> controller_pb2.RegisterResponse:
        self._maybe_fail("register", req)
        if self.refuse_register > 0:
            self.refuse_register -= 1
            return controller_pb2.RegisterResponse(accepted=False, message="instance topology mismatch")
        resp = controller_pb2.RegisterResponse(accepted=True)
        if self.config is not None:
            resp.config.CopyFrom(self.config)
        return resp

    async def heartbeat(self, req: controller_pb2.HeartbeatRequest) -> controller_pb2.HeartbeatResponse:
        self._maybe_fail("heartbeat", req)
        resp = controller_pb2.HeartbeatResponse(known=self.known)
        if self.config is not None:
            resp.config.CopyFrom(self.config)
        return resp

    async def report_software_fault(self, req: controller_pb2.ReportSoftwareFaultRequest
                                    ) -> controller_pb2.ReportSoftwareFaultResponse:
        self._maybe_fail("report", req)
        return controller_pb2.ReportSoftwareFaultResponse(accepted=True)


async def until(predicate, timeout_sec: float = 5.0) -> None:  # noqa: ANN001
    deadline = asyncio.get_running_loop().time() + timeout_sec
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, "condition not reached"
        await asyncio.sleep(0.01)


def reporter(client: ScriptedClient, retired: set[int] | None = None, size: int = 8, registered: bool = True,
             hold_sec: float = 60.0) -> FaultReporter:
    retired = retired if retired is not None else set()
    event = asyncio.Event()
    if registered:
        event.set()
    return FaultReporter(client, pod_ip="127.0.0.2", instance_id=7, queue_size=size, attempts=3,  # type: ignore[arg-type]
                         is_retired=retired.__contains__, registered=event, hold_sec=hold_sec, hold_retry_sec=0.01,
                         retry_max_sec=0.05)


@contextlib.asynccontextmanager
async def running(r: FaultReporter) -> AsyncIterator[FaultReporter]:
    r.start()
    try:
        yield r
    finally:
        await r.close()


async def test_reports_are_sent_in_order_with_bounded_retry() -> None:
    client = ScriptedClient()
    client.fail["report"] = 2
    r = reporter(client)
    async with running(r):
        r.submit(FaultReport(1, UNHEALTHY, "u"))
        r.submit(FaultReport(2, DEAD, "d"))
        await until(lambda: r.sent == 2)
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
        await until(lambda: r.sent == 2)
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
        await until(lambda: len(client.calls["report"]) >= 4)  # past its quick attempts: owed
        r.submit(FaultReport(2, UNHEALTHY, "u"))
        r.submit(FaultReport(1, RECOVERED, "r"))
        r.submit(FaultReport(1, DEAD, "d"))
        assert r.pending == 3  # rank 1's UNHEALTHY (until its next attempt), rank 2, rank 1's DEAD
        client.fail["report"] = 0
        await until(lambda: r.sent == 2)
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
        await until(lambda: len(client.calls["report"]) == 4)
        await asyncio.sleep(0.1)
        assert r.sent == 0
        r.retry_now()  # the Controller is back
        await until(lambda: r.sent == 1, timeout_sec=1.0)


async def test_a_refusal_is_final() -> None:
    client = ScriptedClient()
    client.fail["report"] = 1
    client.fail_code = grpc.StatusCode.INVALID_ARGUMENT
    r = reporter(client)
    async with running(r):
        r.submit(FaultReport(1, ENGINE_DEAD, "gone"))
        r.submit(FaultReport(2, ENGINE_DEAD, "gone"))
        await until(lambda: r.sent == 1)
        assert r.lost == 1 and [c.endpoint_id for c in client.calls["report"]] == [1, 2]


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
        await until(lambda: r.sent == 1)
        assert [c.endpoint_id for c in client.calls["report"]] == [7]


def link(client: ScriptedClient, configs: list, alive: list[int]) -> ControllerLink:
    return ControllerLink(client, instance_id=7, pod_ip="127.0.0.2",  # type: ignore[arg-type]
                          build_register=lambda: controller_pb2.RegisterRequest(instance_id=7),
                          alive_ids=lambda: list(alive), on_config=lambda cfg, src: configs.append((cfg, src)),
                          heartbeat_interval_sec=0.05, max_backoff_sec=0.05)


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
        await until(lambda: len(client.calls["heartbeat"]) >= 3)
        assert lk.heartbeat_interval_sec == 0.05  # the controller's 0.02 is clamped to the floor
        assert configs[0][1] == "register" and configs[-1][1] == "heartbeat"
        assert [list(h.alive_endpoint_ids) for h in client.calls["heartbeat"][:1]] == [[0, 1]]
        seqs = [h.seq for h in client.calls["heartbeat"]]
        assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
        client.fail["heartbeat"] = 3  # the controller is down for a while: the loop keeps going
        await until(lambda: client.fail["heartbeat"] == 0 and len(client.calls["heartbeat"]) >= 8)
        client.known = False
        await until(lambda: len(client.calls["register"]) >= 2)
        client.known = True
        alive.remove(1)
        lk.poke()
        await until(lambda: list(client.calls["heartbeat"][-1].alive_endpoint_ids) == [0])
        assert not task.done()
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


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
        await until(lambda: len(client.calls["heartbeat"]) >= 3)
        assert renewed == []
        client.fail["heartbeat"] = 2  # the Controller restarts
        await until(lambda: client.fail["heartbeat"] == 0 and len(renewed) == 1)
        assert "outage" in renewed[0] and len(client.calls["register"]) == 1
        client.known = False  # a Controller that lost the pod
        await until(lambda: len(client.calls["register"]) == 2 and len(renewed) == 2)
        client.known = True
        assert "registered again" in renewed[1]
        mark = len(client.calls["heartbeat"])
        await until(lambda: len(client.calls["heartbeat"]) >= mark + 3)
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
        await until(lambda: r.sent == 1)
        assert r.lost == 0


async def test_not_found_while_the_instance_assembles_is_held_and_sent_again() -> None:
    """NOT_FOUND (the Controller does not know the instance yet) is not final."""
    client = ScriptedClient()
    client.fail["report"] = 4
    client.fail_code = grpc.StatusCode.NOT_FOUND
    r = reporter(client)
    async with running(r):
        r.submit(FaultReport(1, ENGINE_DEAD, "gone"))
        await until(lambda: r.sent == 1)
        assert r.lost == 0 and len(client.calls["report"]) == 5


async def test_a_report_held_past_the_hold_time_stays_owed() -> None:
    """NOT_FOUND past the hold time spends attempts, and the report stays owed after them."""
    client = ScriptedClient()
    client.fail["report"] = 5
    client.fail_code = grpc.StatusCode.NOT_FOUND
    r = reporter(client, hold_sec=0.0)
    async with running(r):
        r.submit(FaultReport(1, ENGINE_DEAD, "gone"))
        await until(lambda: r.sent == 1)
        assert r.lost == 0 and len(client.calls["report"]) == 6
