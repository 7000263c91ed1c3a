"""The `sglang` dialect's scale-down body over real gRPC: SGLang's manager takes only the ranks it
still expects, so the NodeManager names this round's ranks, the Controller's typed
`round_removed_dp_ranks`, which holds across a NodeManager restart that lost every earlier round.
The manager is a light in-process stand-in of SGLang's (its status document, its apply answers and
its `scale_down_requires_expected_ranks` rule); the ranks are fake-engine processes."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import grpc
import pytest
from aiohttp import web

from gen.motor.v1 import node_manager_pb2 as nm
from motor.testing.fake_controller import FakeController

from .nm_helpers import INSTANCE, POD_IP, nm_config, rpc_error, running_nm

pytestmark = pytest.mark.timeout(60)
DP_SIZE = 4


class Manager:
    """SGLang's instance FT manager, reduced to what the round's body meets: every apply recorded,
    a scale-down of a rank no longer expected failing with its code, the others removing ranks."""

    def __init__(self) -> None:
        self.expected = set(range(DP_SIZE))
        self.applies: list[dict] = []
        self.last: tuple[str | None, str | None] = (None, None)

    async def status(self, _: web.Request) -> web.Response:
        engines = [{"id": r, "status": "healthy" if r in self.expected else "dead"} for r in range(DP_SIZE)]
        rid, error = self.last
        return web.json_response({"schema_version": 1, "total_engines": DP_SIZE, "engines": engines,
                                  "last_ft_request_id": rid, "ft_error": error})

    async def apply(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.applies.append(body)
        ranks = set(body["params"].get("removed_dp_ranks", []))
        error = "scale_down_requires_expected_ranks" if not ranks <= self.expected else None
        if error is None:
            self.expected -= ranks
        self.last = (body["request_id"], error)
        return web.json_response({"message": "accepted", "request_id": body["request_id"]}, status=202)


@asynccontextmanager
async def manager_at(host: str) -> AsyncIterator[tuple[Manager, int]]:
    manager, app = Manager(), web.Application()
    app.router.add_get("/v1/fault_tolerance/status", manager.status)
    app.router.add_post("/v1/fault_tolerance/apply", manager.apply)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, host, 0)
    await site.start()
    try:
        yield manager, runner.addresses[0][1]
    finally:
        await runner.cleanup()


def scale_down(rid: str, removed: list[int], survivors: list[int], round_removed: list[int]) -> nm.ApplyRequest:
    return nm.ApplyRequest(instance_id=INSTANCE, request_id=rid, instruction=nm.INSTRUCTION_SCALE_DOWN,
                           removed_dp_ranks=removed, dp_master_ip=POD_IP, dp_master_rank=min(survivors),
                           endpoint_ids=survivors, round_removed_dp_ranks=round_removed)


async def round_on(n, rid: str, removed: list[int], survivors: list[int], round_removed: list[int]) -> nm.ApplyResponse:
    await n.ft.Guard(nm.GuardRequest(instance_id=INSTANCE, request_id=rid, lease_sec=30), timeout=5)
    resp = await n.ft.Apply(scale_down(rid, removed, survivors, round_removed), timeout=5)
    await n.ft.Finalize(nm.FinalizeRequest(instance_id=INSTANCE, request_id=rid, commit=True,
                                           retired_ids=round_removed), timeout=5)
    return resp


async def test_a_restarted_nodemanager_sends_the_rounds_own_ranks(controller: FakeController, tmp_path: Path) -> None:
    async with manager_at(POD_IP) as (manager, port):
        cfg = nm_config(controller.address, tmp_path, ranks=tuple(range(DP_SIZE)), dp_size=DP_SIZE,
                        engine_ft_dialect="sglang", engine_ft_manager_address=f"{POD_IP}:{port}")
        async with running_nm(cfg) as n:
            assert (await round_on(n, "r1", [3], [0, 1, 2], [3])).accepted
        # The restarted NodeManager saw no committed round; the Controller's field names rank 2 alone.
        async with running_nm(cfg) as n:
            resp = await round_on(n, "r2", [2, 3], [0, 1], [2])
        assert resp.accepted and [r.endpoint_id for r in resp.results] == [0]
        assert [a["params"] for a in manager.applies] == [{"removed_dp_ranks": [3]}, {"removed_dp_ranks": [2]}]
        assert manager.last == ("r2", None) and manager.expected == {0, 1}


async def test_round_removed_ranks_outside_the_round_are_refused_naming_them(controller: FakeController,
                                                                             tmp_path: Path) -> None:
    async with manager_at(POD_IP) as (manager, port):
        cfg = nm_config(controller.address, tmp_path, ranks=tuple(range(DP_SIZE)), dp_size=DP_SIZE,
                        engine_ft_dialect="sglang", engine_ft_manager_address=f"{POD_IP}:{port}")
        async with running_nm(cfg) as n:
            assert (await round_on(n, "r1", [3], [0, 1, 2], [3])).accepted
            await n.ft.Guard(nm.GuardRequest(instance_id=INSTANCE, request_id="r2", lease_sec=30), timeout=5)
            retry = nm.ApplyRequest(instance_id=INSTANCE, request_id="r2", instruction=nm.INSTRUCTION_RETRY,
                                    removed_dp_ranks=[3], endpoint_ids=[0, 1, 2], round_removed_dp_ranks=[1])
            cases = [
                (scale_down("r2", [2, 3], [0, 1], [1]),
                 "round_removed_dp_ranks [1] is not a subset of removed_dp_ranks [2, 3]: [1] are not in it"),
                (scale_down("r2", [2, 3], [0, 1], [2, 3]),
                 "round_removed_dp_ranks [2, 3] names ranks [3] that this pod retired in an earlier round"),
                (scale_down("r2", [2, 3], [0, 1], [2, 2]), "round_removed_dp_ranks [2, 2] repeat ranks [2]"),
                (scale_down("r2", [2, 3], [0, 1], [7]), "round_removed_dp_ranks [7] are not original ranks 0..3"),
                (retry, "round_removed_dp_ranks [1] are only for INSTRUCTION_SCALE_DOWN, not INSTRUCTION_RETRY"),
            ]
            for request, text in cases:
                err = await rpc_error(n.ft.Apply(request, timeout=5))
                assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and text in err.details(), err.details()
        assert [json.dumps(a["params"]) for a in manager.applies] == ['{"removed_dp_ranks": [3]}']
