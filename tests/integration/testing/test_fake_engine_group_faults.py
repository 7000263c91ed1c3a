"""The light engine's fault modes over real HTTP (the group app on 127.0.0.1, port 0), injected
through `LightEngines.inject` as `LocalCluster.inject` does, or `motorctl inject`: the reference
engine's route and fault names, the vLLM protocol's answers on the status and apply routes."""

from __future__ import annotations

import asyncio
import io
import json
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web

from motor.cli.motorctl import run as motorctl
from motor.launch.engines import LightEngines
from motor.sim.client import InjectionError
from motor.testing.fake_group_app import build_group_app
from motor.testing.fake_group import RECOVERY_FAILED_INFO, FakeDpGroup

PREFIX = "/v1/fault_tolerance"


class Group:
    def __init__(self, group: FakeDpGroup, urls: dict[int, str], session: aiohttp.ClientSession) -> None:
        self.group, self.urls, self.session = group, urls, session

    async def inject(self, rank: int, fault: str, **params) -> dict:
        return await asyncio.to_thread(LightEngines().inject, self.urls[rank], fault, params, lambda: 0)

    async def status(self, rank: int, timeout_sec: float = 5.0) -> dict:
        async with self.session.get(f"{self.urls[rank]}{PREFIX}/status",
                                    timeout=aiohttp.ClientTimeout(total=timeout_sec)) as resp:
            assert resp.status == 200
            return (await resp.json())["engines"][0]

    async def apply(self, rank: int, request_id: str, removed: list[int]) -> int:
        body = {"instruction": "scale_down", "request_id": request_id, "params": {"removed_dp_ranks": removed}}
        async with self.session.post(f"{self.urls[rank]}{PREFIX}/apply", json=body) as resp:
            return resp.status

    async def until(self, rank: int, status: str) -> dict:
        for _ in range(1000):
            entry = await self.status(rank)
            if entry["status"] == status:
                return entry
            await asyncio.sleep(0.01)
        raise AssertionError(f"rank {rank} never {status}: {entry}")


@pytest.fixture
async def served() -> AsyncIterator[Group]:
    group = FakeDpGroup([0, 1, 2, 3], diagnosing_sec=0, rebuild_sec=0.01, checkin_sec=0.3)
    runners, urls = [], {}
    for rank in group.ranks:
        runner = web.AppRunner(build_group_app(group, rank, PREFIX, "motor-sim", 0.0), shutdown_timeout=0.1)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        runners.append(runner)
        urls[rank] = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]
    async with aiohttp.ClientSession() as session:
        try:
            yield Group(group, urls, session)
        finally:
            for runner in runners:
                await runner.cleanup()


async def test_failed_vote_over_http_every_survivor_dead(served: Group) -> None:
    answer = await served.inject(2, "fail_vote", reason="no quorum")
    assert answer["fault"] == "fail_vote" and answer["rank"] == 2 and answer["injections"]["fail_vote"] == "no quorum"
    await served.inject(3, "executor_death")
    for rank in (0, 1, 2):
        await served.until(rank, "unhealthy")
    assert [await served.apply(rank, "r1", [3]) for rank in (0, 1, 2)] == [202, 202, 202]
    for rank in (0, 1, 2):
        entry = await served.until(rank, "dead")
        assert entry["fault_info"] == RECOVERY_FAILED_INFO and entry["last_ft_request_id"] == "r1"
        assert "rank 2: no quorum" in entry["ft_error"]


async def test_failed_and_stalled_applies_over_http(served: Group) -> None:
    await served.inject(0, "fail_next_apply")
    await served.inject(1, "stall_next_apply")
    await served.inject(3, "kill_process")
    for rank in (0, 1, 2):
        await served.until(rank, "unhealthy")
    assert [await served.apply(rank, "r1", [3]) for rank in (0, 1, 2)] == [202, 202, 202]
    failed = await served.status(0)
    assert (failed["status"], failed["fault_info"], failed["ft_error"]) == (
        "dead", RECOVERY_FAILED_INFO, "injected failure: injected apply failure")
    await served.until(2, "dead")  # the round could not commit: neither rank 0 nor 1 checked in
    stalled = await served.status(1)
    assert stalled["status"] == "unhealthy" and "ft_error" not in stalled
    assert await served.apply(1, "r2", [3]) == 202 and (await served.status(1))["status"] == "unhealthy"


async def test_hung_status_route_until_cleared(served: Group) -> None:
    await served.inject(1, "hang_status")
    with pytest.raises(asyncio.TimeoutError):
        await served.status(1, timeout_sec=0.3)
    assert (await served.status(0))["status"] == "healthy", "only the injected rank hangs"
    await served.inject(1, "clear")
    assert (await served.status(1))["status"] == "healthy"


async def test_bad_injections_are_refused_with_the_reason(served: Group) -> None:
    with pytest.raises(InjectionError, match="HTTP 400.*unknown fault 'explode'"):
        await served.inject(0, "explode")
    with pytest.raises(InjectionError, match="delay_sec"):
        await served.inject(0, "slow_rebuild", delay_sec=-1)


async def test_motorctl_inject_reaches_the_light_engine(served: Group) -> None:
    out = io.StringIO()
    code = await asyncio.to_thread(motorctl, ["inject", served.urls[1], "slow_rebuild", "delay_sec=0.5"], out=out)
    assert code == 0, out.getvalue()
    answer = json.loads(out.getvalue())
    assert answer["rank"] == 1 and answer["injections"]["slow_rebuild_sec"] == 0.5
    assert served.group.ranks[1].injections.slow_rebuild_sec == 0.5
