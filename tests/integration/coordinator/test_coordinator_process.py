"""`motor-coordinator` as a real process (console script) in front of real engine processes: ready
file with both ports, management key, publication, routed completions (stream and not), logs that
name request, instance and rank, and a clean SIGTERM exit."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import aiohttp
import grpc
import pytest
from .coordinator_helpers import (
    ADD,
    MODEL_A,
    MODEL_B,
    PAUSE,
    Engines,
    bare,
    chat,
    completion,
    instance_proto,
    instances_view,
    post_json,
    post_stream,
)

from gen.motor.v1 import coordinator_pb2, coordinator_pb2_grpc
from motor.common.process import start_process

pytestmark = pytest.mark.timeout(90)

BIN = Path(sys.executable).parent
KEY = "process-test-key"


async def test_coordinator_process_serves_routes_and_stops(engines: Engines, tmp_path: Path) -> None:
    config = tmp_path / "coordinator.yaml"
    config.write_text(json.dumps({
        "management_key": KEY, "retry_after_sec": 2, "endpoint_cooldown_sec": 1.5, "max_retries": 1,
        "upstream_timeout_sec": 30, "hold_when_unavailable_sec": 0,
    }))
    ready = tmp_path / "ready.json"
    proc = start_process(
        [str(BIN / "motor-coordinator"), "--config", str(config), "--host", "127.0.0.1", "--port", "0",
         "--http-host", "127.0.0.1", "--http-port", "0", "--ready-file", str(ready)],
        log_path=tmp_path / "coordinator.log", name="motor-coordinator",
    )
    try:
        info = await proc.await_ready_file(ready, timeout_sec=30, required_keys=["grpc_port", "http_port"])
        assert info["pid"] == proc.pid
        url = f"http://127.0.0.1:{info['http_port']}"
        a = instance_proto(1, engines.group_a, MODEL_A)
        b = instance_proto(2, engines.group_b, MODEL_B)
        async with grpc.aio.insecure_channel(f"127.0.0.1:{info['grpc_port']}") as channel:
            stub = coordinator_pb2_grpc.CoordinatorStub(channel)
            request = coordinator_pb2.RefreshRequest(event=ADD, instances=[a, b], revision=1)
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await stub.Refresh(request, timeout=10)
            assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
            assert (await stub.Refresh(request, metadata=(("x-motor-key", KEY),), timeout=10)).revision == 1
            listed = await stub.ListInstances(coordinator_pb2.ListInstancesRequest(), timeout=10)
            assert [p.instance for p in listed.instances] == [a, b] and listed.revision == 1

            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http:
                async with http.get(url + "/v1/models") as resp:
                    assert [m["id"] for m in (await resp.json())["data"]] == [MODEL_A, MODEL_B]
                reply = await post_json(http, url + "/v1/completions", completion(max_tokens=4),
                                        headers={"X-Request-Id": "proc-req-1"})
                assert reply.status == 200 and reply.headers["X-Motor-Endpoint"] == "1/0"
                assert reply.headers["X-Request-Id"] == "proc-req-1"
                streamed = await post_stream(http, url + "/v1/chat/completions", chat(model=MODEL_B, max_tokens=5))
                assert streamed.status == 200 and streamed.done and streamed.headers["X-Motor-Endpoint"] == "2/0"

                await stub.Refresh(coordinator_pb2.RefreshRequest(event=PAUSE, instances=[bare(1)], revision=2),
                                   metadata=(("x-motor-key", KEY),), timeout=10)
                paused = await post_json(http, url + "/v1/completions", completion())
                assert paused.status == 503 and paused.headers["Retry-After"] == "2"
                view = await instances_view(http, url)
                assert view["revision"] == 2 and [i["paused"] for i in view["instances"]] == [True, False]

        assert await proc.astop(grace_sec=10) == 0, proc.log_tail()
        log = (tmp_path / "coordinator.log").read_text()
        assert "request_id=proc-req-1 instance=1 rank=0 /v1/completions" in log
        assert "refresh event=REFRESH_EVENT_ADD revision=1" in log and "acknowledged" in log
        assert "Refresh from" in log and "no management key" in log
        assert KEY not in log, "the management key is never logged"
    finally:
        await proc.astop(grace_sec=2)


def test_bad_coordinator_config_is_refused_with_the_key_named(tmp_path: Path) -> None:
    config = tmp_path / "bad.json"
    config.write_text(json.dumps({"endpoint_cooldown_sec": -1}))
    proc = start_process([str(BIN / "motor-coordinator"), "--config", str(config)], log_path=tmp_path / "bad.log")
    try:
        assert proc.wait_exit(30) == 2
        assert "endpoint_cooldown_sec=-1" in proc.log_tail()
    finally:
        proc.stop(grace_sec=2)
