"""The Controller's JSON pages over a real aiohttp server on port 0 (RFC §7 shape and errors)."""

from __future__ import annotations

import pytest
from aiohttp.test_utils import TestClient, TestServer

from motor.controller.fault_tolerance.timeline import TimelineBook
from motor.controller.model.runtime import FtRuntimeStore
from motor.controller.status import status_app


async def serve(enabled: bool, *instances: int) -> tuple[TestClient, FtRuntimeStore]:
    runtimes, book = FtRuntimeStore(scale_down_enabled=enabled), TimelineBook()
    for iid in instances:
        runtimes.create(iid, [0, 1], "instance_reconfiguration")
    client = TestClient(TestServer(status_app(runtimes.all, book.transactions, enabled)))
    await client.start_server()
    return client, runtimes


async def test_feature_off_says_disabled_at_the_top_level_even_without_instances() -> None:
    """With fault tolerance off the page says DISABLED at the top level, even before any instance exists."""
    client, _ = await serve(False)
    try:
        resp = await client.get("/controller/fault_tolerance/status")
        assert resp.status == 200 and await resp.json() == {"phase": "DISABLED", "instances": []}
    finally:
        await client.close()
    client, _ = await serve(False, 7)
    try:
        body = await (await client.get("/controller/fault_tolerance/status")).json()
        assert body["phase"] == "DISABLED" and body["instances"][0]["phase"] == "DISABLED"
    finally:
        await client.close()


async def test_feature_on_has_no_top_level_phase() -> None:
    client, _ = await serve(True, 7)
    try:
        body = await (await client.get("/controller/fault_tolerance/status")).json()
        assert "phase" not in body and body["instances"][0]["phase"] == "NORMAL"
    finally:
        await client.close()


@pytest.mark.parametrize("page", ["status", "timeline"])
async def test_bad_instance_id_is_400_and_unknown_is_404(page: str) -> None:
    client, _ = await serve(True, 7)
    try:
        bad = await client.get(f"/controller/fault_tolerance/{page}?instance_id=seven")
        assert bad.status == 400 and "'seven'" in (await bad.json())["detail"]
        unknown = await client.get(f"/controller/fault_tolerance/{page}?instance_id=8")
        assert unknown.status == 404 and "8" in (await unknown.json())["detail"]
        known = await client.get(f"/controller/fault_tolerance/{page}?instance_id=7")
        assert known.status == 200
    finally:
        await client.close()
