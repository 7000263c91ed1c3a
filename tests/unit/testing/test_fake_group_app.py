"""The light group's HTTP face: /health follows the placeholder's lifecycle reports, the admin
state counts a rank's requests in flight, and chat continues a final assistant message as vLLM's
``continue_final_message`` does; a placeholder reports its start and stop."""

from __future__ import annotations

import asyncio
import signal
import sys

from aiohttp.test_utils import TestClient, TestServer

from motor.sim.toy_model import chat_prompt, expected_completion
from motor.testing.fake_group import FakeDpGroup
from motor.testing.fake_group_app import build_control_app, build_group_app


async def test_health_is_503_from_a_stop_until_the_restart_and_the_control_route_checks_its_body() -> None:
    group = FakeDpGroup([0, 1], diagnosing_sec=0)
    async with TestClient(TestServer(build_group_app(group, 1, "/ft", "m", 0.0))) as rank1, \
            TestClient(TestServer(build_control_app(group))) as control:
        assert (await rank1.get("/health")).status == 200
        assert (await control.post("/fake/lifecycle", json={"rank": 1, "event": "stopped"})).status == 200
        assert (await rank1.get("/health")).status == 503
        assert (await control.post("/fake/lifecycle", json={"rank": 7, "event": "stopped"})).status == 400
        answer = await control.post("/fake/lifecycle", json={"rank": 1, "event": "started"})
        assert await answer.json() == {"id": 1, "status": "healthy"}
        assert (await rank1.get("/health")).status == 200


async def test_admin_state_counts_requests_in_flight_and_chat_continues_the_final_message() -> None:
    group = FakeDpGroup([0, 1], diagnosing_sec=0)
    async with TestClient(TestServer(build_group_app(group, 0, "/ft", "m", 0.01))) as rank0:
        pending = asyncio.ensure_future(rank0.post("/v1/completions", json={"prompt": "p", "max_tokens": 50}))
        for _ in range(200):
            state = await (await rank0.get("/motor/admin/state")).json()
            if state["in_flight_requests"] == 1:
                break
            await asyncio.sleep(0.01)
        assert state == {"rank": 0, "status": "healthy", "in_flight_requests": 1}
        await (await pending).read()
        assert (await (await rank0.get("/motor/admin/state")).json())["in_flight_requests"] == 0
        messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "so"}]
        answer = await rank0.post("/v1/chat/completions", json={
            "messages": messages, "max_tokens": 5, "continue_final_message": True, "add_generation_prompt": False})
        text = (await answer.json())["choices"][0]["message"]["content"]
        assert text == expected_completion(chat_prompt([("user", "hi"), ("assistant", "so")],
                                                       add_generation_prompt=False, continue_final_message=True), 5)


async def test_a_placeholder_reports_its_start_and_on_sigterm_its_stop() -> None:
    group = FakeDpGroup([0, 1], diagnosing_sec=0)
    async with TestClient(TestServer(build_control_app(group))) as control:
        url = str(control.make_url("")).rstrip("/")
        proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "motor.testing.fake_placeholder",
                                                    "--control", url, "--rank", "1")
        try:
            await _until(lambda: any(e["event"] == "started" for e in group.journal), "started")
            proc.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(proc.wait(), 10) == 0
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        assert [e["event"] for e in group.journal if e["rank"] == 1] == ["started", "stopped"]
        assert group.ranks[1].stopped


async def _until(predicate, what: str, polls: int = 2000) -> None:
    for _ in range(polls):
        if predicate():
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"not reached: {what}")
