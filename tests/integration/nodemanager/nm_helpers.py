"""Helpers of the NodeManager integration tests: the fake-engine command, an in-process NodeManager
on port 0 (real gRPC server, real engine processes), and gRPC / fake-engine helpers."""

from __future__ import annotations

import asyncio
import contextlib
import io
import sys
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import grpc

from gen.motor.v1 import common_pb2, node_manager_pb2, node_manager_pb2_grpc
from motor.testing.waits import async_wait_for
from nodemanager.config import NodeManagerConfig
from nodemanager.main import NodeManagerService

POD_IP = "127.0.0.2"
INSTANCE = 7
# A NodeManager's stop ends within its own bounds (server grace, task ends, engine stop grace): well
# inside this, which only turns a hang into an error that shows where every task waits.
_STOP_BOUND_SEC = 45.0
# (status, ft_state) pairs a long poll waits out, as the Controller asks them.
UNHEALTHY = node_manager_pb2.EngineState(status=common_pb2.ENGINE_HEALTH_UNHEALTHY,
                                         ft_state=common_pb2.FT_STATE_UNSPECIFIED)
DIAGNOSING = node_manager_pb2.EngineState(status=common_pb2.ENGINE_HEALTH_DIAGNOSING,
                                          ft_state=common_pb2.FT_STATE_UNSPECIFIED)
FAKE_ENGINE_COMMAND = [
    sys.executable, "-m", "motor.testing.fake_engine",
    "--host", "{host}", "--port", "{port}", "--dp-rank", "{dp_rank}", "--ft-api-prefix", "{ft_api_prefix}",
]


def nm_config(controller_address: str, tmp_path: Path, ranks: tuple[int, ...] = (0, 1), dp_size: int = 2,
              **overrides: Any) -> NodeManagerConfig:
    data: dict[str, Any] = {
        "controller_address": controller_address,
        "instance_id": INSTANCE,
        "dp_size": dp_size,
        "pod_ip": POD_IP,
        "server": {"host": POD_IP, "port": 0, "shutdown_grace_sec": 1.0},
        "engines": [{"dp_rank": r, "device_infos": [{"device_id": f"Ascend910-{r}"}]} for r in ranks],
        "engine_command": FAKE_ENGINE_COMMAND,
        "dp_master_ip": POD_IP,
        "dp_master_port": 0 if len(ranks) == dp_size else 29999,
        "log_dir": str(tmp_path / "engines"),
        "engine_request_timeout_sec": 0.5,
        "engine_ready_timeout_sec": 20.0,
        "engine_stop_grace_sec": 3.0,
        "heartbeat_interval_sec": 0.2,
        "controller_request_timeout_sec": 1.0,
        "controller_retry_max_backoff_sec": 0.3,
        "fault_tolerance_config": {"enable_dp_scale_down": True, "engine_status_poll_interval_sec": 0.2},
    }
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key] = {**data[key], **value}
        else:
            data[key] = value
    return NodeManagerConfig.model_validate(data)


@dataclass
class RunningNm:
    service: NodeManagerService
    channel: grpc.aio.Channel
    exits: list[tuple[int, str]] = field(default_factory=list)

    @property
    def ft(self) -> node_manager_pb2_grpc.NodeManagerFaultToleranceStub:
        return node_manager_pb2_grpc.NodeManagerFaultToleranceStub(self.channel)

    @property
    def lifecycle(self) -> node_manager_pb2_grpc.NodeManagerStub:
        return node_manager_pb2_grpc.NodeManagerStub(self.channel)

    @property
    def agent(self):  # noqa: ANN201
        return self.service.agent

    def engine_url(self, rank: int) -> str:
        addr = self.agent.supervisor.address(rank)
        assert addr is not None
        return addr.base_url


@contextlib.asynccontextmanager
async def running_nm(config: NodeManagerConfig, *, wait_launched: bool = True) -> AsyncIterator[RunningNm]:
    """The NodeManager service in this event loop (real gRPC server on port 0, real engine processes).
    Its exit requests (StopPod, all engines dead) are recorded instead of signalling pytest."""
    exits: list[tuple[int, str]] = []
    service = NodeManagerService(config, exit_request=lambda code, why: exits.append((code, why)))
    info = await service.start()
    channel = grpc.aio.insecure_channel(f"{POD_IP}:{info['grpc_port']}")
    nm = RunningNm(service, channel, exits)
    try:
        if wait_launched:
            assert service.agent.engines.launched is not None
            await asyncio.wait_for(service.agent.engines.launched.wait(), 30)
        yield nm
    except BaseException:
        await _stop_and_reap(service, channel)
        raise
    left = await _stop_and_reap(service, channel)
    assert not left, f"the NodeManager's stop left engines running (killed now): pids {left}"


async def _stop_and_reap(service: NodeManagerService, channel: grpc.aio.Channel) -> list[int]:
    """Stops the service within a bound (on overrun, every task's stack is in the error); kills and
    returns the engine processes still running after it."""
    supervisor = service.agent.supervisor
    try:
        await channel.close()
        async with asyncio.timeout(_STOP_BOUND_SEC):
            await service.stop()
    except TimeoutError:
        stacks = io.StringIO()
        for task in asyncio.all_tasks():
            task.print_stack(file=stacks)
        raise AssertionError(f"NodeManagerService.stop did not end within {_STOP_BOUND_SEC:g}s; tasks:\n"
                             f"{stacks.getvalue()}") from None
    finally:
        left = [slot.proc for slot in map(supervisor.slot, supervisor.ids) if slot.proc and slot.proc.running]
        for proc in left:
            proc.kill()
    return [proc.pid for proc in left]


async def rpc_error(call: Awaitable[Any]) -> grpc.aio.AioRpcError:
    """Awaits a call that must fail; returns its error."""
    try:
        result = await call
    except grpc.aio.AioRpcError as exc:
        return exc
    raise AssertionError(f"call succeeded unexpectedly: {result}")


async def fake_control(base_url: str, **settings: Any) -> dict[str, Any]:
    async with aiohttp.ClientSession() as session:
        async with session.post(f"{base_url}/fake/control", json=settings, timeout=aiohttp.ClientTimeout(total=5)) as r:
            assert r.status == 200, await r.text()
            return await r.json()


async def fake_applies(base_url: str) -> list[dict[str, Any]]:
    async with aiohttp.ClientSession() as session:
        async with session.get(f"{base_url}/fake/applies", timeout=aiohttp.ClientTimeout(total=5)) as r:
            return await r.json()


def quiet_poller(controller_address: str, tmp_path: Path, **overrides: Any) -> NodeManagerConfig:
    """A NodeManager whose own poller reads each engine once and then not for 60 s: every later
    read in the test is the test's own (a Status call, or `poller.poll_once`)."""
    return nm_config(controller_address, tmp_path, fault_tolerance_config={"engine_status_poll_interval_sec": 60.0},
                     **overrides)


async def first_polls_done(n) -> None:
    """Every engine has been read by the NodeManager's own first poll (its next is 60 s away)."""
    for rank in (0, 1):
        await async_wait_for(lambda rank=rank: status_reads(n.engine_url(rank)), 10, f"rank {rank} polled",
                             interval_sec=0.02, until=lambda reads: reads >= 1)


async def status_reads(base_url: str) -> int:
    """How many status reads the fake engine has answered."""
    async with aiohttp.ClientSession() as session:
        async with session.get(f"{base_url}/fake/stats", timeout=aiohttp.ClientTimeout(total=5)) as r:
            return int((await r.json())["status_requests"])


async def fake_polled(base_url: str, count: int, timeout_sec: float = 5.0) -> None:
    """Returns once the fake engine has answered ``count`` more status reads than now."""
    target = await status_reads(base_url) + count
    await async_wait_for(lambda: status_reads(base_url), timeout_sec, f"{base_url}: {target} status reads",
                         until=lambda reads: reads >= target)


async def fake_exit(base_url: str, code: int) -> None:
    async with aiohttp.ClientSession() as session:
        async with session.post(f"{base_url}/fake/exit", json={"code": code}, timeout=aiohttp.ClientTimeout(total=5)):
            pass
