"""The world's NodeManager is the real `NodeManagerAgent`: a crash cuts it off at once (nothing it
sends leaves, its engines die unseen), and a StopPod it obeys ends it through its own ExitPolicy,
after which its container restarts over the record the old process wrote."""

from __future__ import annotations

import asyncio

from motor.simulation.runner import run
from nodemanager.agent import NodeManagerAgent

POD = 1  # ranks 2 and 3


def test_a_crashed_nodemanager_sends_nothing_and_its_engines_die_with_it() -> None:
    seen: dict[str, object] = {}

    def tamper(world) -> None:
        address = world.pod_addresses[POD]
        agent = world.pods[address]

        async def crash() -> None:
            await world.nm_crash(address)
            seen["dead"] = agent.controller.dead
            seen["gone"] = world.pods[address] is None
            seen["engines_up"] = [world.group.engines[r].process_up for r in (2, 3)]
            try:
                await agent.controller.heartbeat(None)
            except Exception as exc:  # noqa: BLE001 - what a call of the dead process ends with
                seen["call"] = type(exc).__name__
        world.loop.create_task(crash())

    run(1, "vllm", steps=10, events=[], tamper=tamper)
    assert seen == {"dead": True, "gone": True, "engines_up": [False, False], "call": "AioRpcError"}


def test_a_stop_pod_ends_the_agent_and_its_restart_keeps_the_ranks_retired() -> None:
    seen: dict[str, object] = {}

    def tamper(world) -> None:
        address = world.pod_addresses[POD]
        old = world.pods[address]

        async def restarted() -> None:
            while world.pods.get(address) in (None, old):
                await asyncio.sleep(0.1)
            new: NodeManagerAgent = world.pods[address]
            seen["retired"] = sorted(new.state.retired)
            seen["registered_retired"] = list(new.register_request().retired_ids)
        old.exit_policy.stop_pod("sd-7-stop", "every DP rank of the pod is committed dead")
        world.loop.create_task(restarted())

    result = run(1, "vllm", steps=20, events=[], tamper=tamper)
    assert any("10.0.0.2:50051 exits with status 0: StopPod request_id='sd-7-stop'" in line
               for line in result.trace), result.trace
    assert seen == {"retired": [2, 3], "registered_retired": [2, 3]}
