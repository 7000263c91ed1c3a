"""The agent's collaborators come in through its constructor: the supervisor it is given is the one
every part uses, the clock stamps what it reports, the Controller client factory sees the term
fence, the given StopPod storage is written and read back, and nothing touches the disk."""

from __future__ import annotations

from pathlib import Path

from motor.common.text_file import MemoryTextFile
from nodemanager.agent import NodeManagerAgent
from nodemanager.config import NodeManagerConfig
from nodemanager.engine_http import EngineHttpClient
from nodemanager.supervisor import EngineExit, ProcessSupervisor


class Clock:
    def monotonic(self) -> float:
        return 42.0

    def wall(self) -> float:
        return 1_700_000_042.0


class Controller:
    """The Controller client the agent builds through its factory (never called here)."""

    def __init__(self, on_term) -> None:
        self.on_term = on_term

    async def close(self) -> None:
        pass


def config() -> NodeManagerConfig:
    return NodeManagerConfig.model_validate({
        "controller_address": "127.0.0.1:1", "instance_id": 7, "dp_size": 2, "pod_ip": "127.0.0.2",
        "engines": [{"dp_rank": 0}, {"dp_rank": 1}], "fault_tolerance_config": {"enable_dp_scale_down": True},
    })


def agent(storage: MemoryTextFile, exits: list[tuple[int, str]], supervisors: list[ProcessSupervisor]) -> NodeManagerAgent:
    cfg = config()

    def build_supervisor(**callbacks) -> ProcessSupervisor:
        supervisors.append(ProcessSupervisor(cfg, Path("/nonexistent"), **callbacks))
        return supervisors[-1]

    return NodeManagerAgent(cfg, exit_hook=lambda code, why: exits.append((code, why)), clock=Clock(),
                            supervisor=build_supervisor, http=EngineHttpClient("/ft", 1.0, Clock()),
                            controller=Controller, stop_storage=storage)  # type: ignore[arg-type]


def test_given_collaborators_are_the_ones_the_parts_use_and_no_directory_is_made() -> None:
    supervisors: list[ProcessSupervisor] = []
    a = agent(MemoryTextFile("memory:pod-stopped.json"), [], supervisors)
    assert a.supervisor is supervisors[0] and a.log_dir is None
    assert isinstance(a.controller, Controller)
    a.controller.on_term(5)
    assert a.term_fence.term == 5
    a._on_exit(EngineExit(0, 1, 4242, -9, False, True))
    report = a.reporter._queue[0]
    assert (report.endpoint_id, report.observed_at_unix_sec) == (0, 1_700_000_042.0)


def test_a_stop_pod_lands_in_the_given_storage_and_the_next_agent_keeps_the_ranks_retired() -> None:
    storage, exits = MemoryTextFile("memory:pod-stopped.json"), []
    agent(storage, exits, []).exit_policy.stop_pod("sd-7-1", "every DP rank of the pod is committed dead")
    assert exits and exits[0][0] == 0
    assert storage.text is not None and '"stopped_at_unix_sec": 1700000042.0' in storage.text
    again = agent(storage, [], [])
    assert again.state.retired == {0, 1} and again.register_request().retired_ids == [0, 1]
