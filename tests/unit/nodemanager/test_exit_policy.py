"""The NodeManager's own exit: every non-retired engine dead (status 3, frozen by a live guard), and
StopPod (status 0); the rule pure, then applied to a supervisor's engines without processes."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import pytest

from nodemanager.config import NodeManagerConfig
from nodemanager.exit_policy import EXIT_ALL_ENGINES_DEAD, Decision, ExitPolicy, all_engines_dead, decide
from nodemanager.guard import GuardState
from nodemanager.pod_state import PodState
from nodemanager.supervisor import ProcessSupervisor, RunState

DEAD, READY, STOPPED = RunState.EXITED, RunState.READY, RunState.STOPPED


@pytest.mark.parametrize(
    ("states", "retired", "dead"),
    [
        ({0: DEAD, 1: DEAD}, set(), True),
        ({0: DEAD, 1: READY}, set(), False),
        ({0: DEAD, 1: STOPPED}, set(), False),  # stopped on purpose is no death
        ({0: DEAD, 1: READY}, {1}, True),  # a retired engine does not count
        ({0: DEAD, 1: DEAD}, {0, 1}, False),  # all retired is no death
        ({}, set(), False),
    ],
)
def test_all_engines_dead(states: dict[int, RunState], retired: set[int], dead: bool) -> None:
    assert all_engines_dead(states, retired) is dead


@pytest.mark.parametrize(
    ("enabled", "exiting", "guard_live", "decision"),
    [
        (True, False, False, Decision.EXIT),
        (True, False, True, Decision.FROZEN),
        (False, False, False, Decision.STAY),
        (True, True, False, Decision.STAY),  # already on its way out
    ],
)
def test_decide_when_every_engine_is_dead(enabled: bool, exiting: bool, guard_live: bool, decision: Decision) -> None:
    assert decide(enabled=enabled, exiting=exiting, states={0: DEAD, 1: DEAD}, retired=set(),
                  guard_live=guard_live) is decision


def test_decide_stays_while_an_engine_lives() -> None:
    assert decide(enabled=True, exiting=False, states={0: DEAD, 1: READY}, retired=set(), guard_live=False) \
        is Decision.STAY


class Clock:
    now = 0.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Pod:
    supervisor: ProcessSupervisor
    state: PodState
    guard: GuardState
    policy: ExitPolicy
    exits: list[tuple[int, str]]
    clock: Clock


@pytest.fixture
def pod(tmp_path: Path) -> Pod:
    cfg = NodeManagerConfig.model_validate({
        "controller_address": "127.0.0.1:1", "instance_id": 7, "dp_size": 2, "pod_ip": "127.0.0.2",
        "engines": [{"dp_rank": 0}, {"dp_rank": 1}], "log_dir": str(tmp_path), "exit_when_all_engines_dead": True,
    })
    clock = Clock()
    supervisor = ProcessSupervisor(cfg, tmp_path, on_ready=lambda i, run: None, on_exit=lambda ev: None)
    state = PodState(cfg.instance_id, False)
    guard = GuardState(clock)
    exits: list[tuple[int, str]] = []
    policy = ExitPolicy(cfg, supervisor, state, guard, lambda code, why: exits.append((code, why)))
    return Pod(supervisor, state, guard, policy, exits, clock)


def test_exit_when_all_engines_dead_and_frozen_by_a_live_guard(pod: Pod, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="nodemanager.exit_policy")
    pod.supervisor.slot(0).state = RunState.EXITED
    pod.supervisor.slot(1).state = RunState.READY
    pod.policy.check()
    assert pod.exits == []
    pod.supervisor.slot(1).state = RunState.EXITED
    pod.guard.acquire("r1", 10)
    pod.policy.check()
    pod.policy.check()
    assert pod.exits == []  # frozen while the guard is live
    assert caplog.text.count("the guard is live") == 1  # said once, not once a second
    pod.clock.now += 11
    pod.policy.check()
    assert pod.exits and pod.exits[0][0] == EXIT_ALL_ENGINES_DEAD and "[0, 1]" in pod.exits[0][1]
    pod.policy.check()
    assert len(pod.exits) == 1


def test_intentional_stops_and_all_retired_are_not_death(pod: Pod) -> None:
    pod.supervisor.slot(0).state = RunState.EXITED
    pod.supervisor.slot(1).state = RunState.STOPPED
    pod.policy.check()
    pod.state.retire([0, 1])
    pod.policy.check()
    assert pod.exits == []
    pod.state.unretire([1])
    pod.supervisor.slot(1).state = RunState.EXITED
    pod.policy.check()
    assert len(pod.exits) == 1


def test_stop_pod_exits_with_0_once_and_no_death_exit_follows(pod: Pod) -> None:
    pod.policy.stop_pod("rq-1", "scale in")
    assert pod.exits == [(0, "StopPod request_id='rq-1' reason='scale in'")] and pod.policy.exiting
    for i in (0, 1):
        pod.supervisor.slot(i).state = RunState.EXITED
    pod.policy.check()
    assert len(pod.exits) == 1


def test_exits_are_expected_once_the_nodemanager_stops(pod: Pod) -> None:
    pod.policy.expect_exits()
    for i in (0, 1):
        pod.supervisor.slot(i).state = RunState.EXITED
    pod.policy.check()
    assert pod.exits == [] and pod.policy.all_engines_dead()
