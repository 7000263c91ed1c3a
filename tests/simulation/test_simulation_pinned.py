"""Faults the simulation found, pinned as explicit schedules (independent of the schedule
generator: the world's own randomness comes from the seed alone). Every one must keep
every invariant."""

from __future__ import annotations

import pytest

from motor.simulation.runner import run
from motor.simulation.schedule import Event


def _violations(seed: int, events: list[Event], dialect: str = "vllm") -> list[str]:
    result = run(seed, dialect, events=events)
    return [f"{v.invariant}: {v.message}" for v in result.violations] + (result.trace if result.violations else [])


@pytest.mark.parametrize("dialect", ["vllm", "rfc"])
def test_an_unhealthy_group_during_a_controller_restart_is_recovered(dialect: str) -> None:
    events = [Event(25.062, "unhealthy", rank=0), Event(25.356, "controller_restart", duration_sec=7.1)]
    assert _violations(24, events, dialect) == []


def test_a_death_while_the_controller_is_down_is_acted_on_after_its_restart() -> None:
    events = [Event(20.86, "controller_restart", duration_sec=11.2), Event(24.908, "executor_death", rank=0)]
    assert _violations(182, events) == []


def test_a_failed_reconfiguration_attempt_leaves_no_call_in_flight_into_the_next() -> None:
    events = [Event(10.154, "nm_crash", pod=1, duration_sec=19.7), Event(23.302, "traffic"),
              Event(32.608, "nm_crash", pod=1, duration_sec=16.5)]
    assert _violations(45, events) == []


@pytest.mark.parametrize(("seed", "events"), [
    (62, [Event(39.732, "kill_process", rank=3), Event(42.948, "nm_crash", pod=1, duration_sec=19.1)]),
    (30, [Event(25.511, "executor_death", rank=2), Event(30.141, "nm_crash", pod=1, duration_sec=14.5)]),
])
def test_a_reconfiguration_interrupted_by_a_nodemanager_crash_converges_once_the_pod_is_back(
        seed: int, events: list[Event]) -> None:
    # The crash fails an attempt halfway: its StopEngines on the other pod is cancelled while the
    # engines stop; the next attempt must find them stopped, not refuse to start them.
    assert _violations(seed, events, "vllm-0.33") == []


def test_the_store_holds_the_final_state_after_a_store_outage_during_a_round() -> None:
    events = [Event(22.78, "kill_process", rank=0), Event(24.825, "store_outage", duration_sec=6.1)]
    assert _violations(570, events) == []


def test_a_controller_restart_during_an_idle_deaths_collection_window_gets_a_whole_decision() -> None:
    # The old life's evidence and window are not persisted (RFC §5): the new Controller collects
    # again, so the bound for the dead rank counts from its start, not from the death.
    events = [Event(17.055, "slow_rebuild", duration_sec=13.8), Event(21.688, "executor_death", rank=0),
              Event(33.283, "controller_restart", duration_sec=10.4)]
    assert _violations(820, events) == []


@pytest.mark.parametrize(("seed", "events"), [
    (289, [Event(17.99, "leader_partition", duration_sec=6.706), Event(20.482, "executor_death", rank=0)]),
    (192, [Event(23.987, "leader_partition", duration_sec=12.387), Event(29.441, "executor_death", rank=2)]),
])
def test_a_deposed_leaders_canary_or_publication_is_refused_once_the_coordinator_saw_the_new_term(
        seed: int, events: list[Event]) -> None:
    # The leader loses etcd while it probes an idle death: its SendCanary and its SET, held on the
    # wire, reach the Coordinator after the new leader's canary. The Coordinator fences SendCanary
    # as it fences Refresh, so it learns the new term from a canary too and refuses the old ones.
    assert _violations(seed, events) == []


def test_a_rank_dying_while_the_rebuilt_view_is_published_is_acted_on() -> None:
    # A card fault kills a rank during a round; the fallback rebuild starts the engines, and a new
    # engine dies just before the view is published: its DEAD report came after the rebuild's last
    # look at the engines, so the next decision takes it (it is not superseded by the rebuild).
    events = [Event(31.639, "kill_process", rank=3),
              Event(1.625, "hardware_fault", rank=2, duration_sec=3.8, after="DECIDING", level=4, target="card",
                    kill="kill_process"),
              Event(5.471, "executor_death", rank=0, after="DECIDING")]
    assert _violations(755, events, "rfc") == []


def test_a_standby_that_is_stopped_while_its_etcd_calls_fail_stops_campaigning() -> None:
    # The crashed standby's etcd calls fail at once; the cancellation of its election loop arrives
    # as one fails and is lost inside asyncio.wait_for (Python 3.11). Its stop must still end.
    assert _violations(298, [Event(38.164, "replica_restart", duration_sec=5.7)]) == []


def test_an_unmappable_fault_received_after_the_rebuild_started_the_engines_is_not_handled_by_it() -> None:
    # A card fault fails the round; its rebuild starts the engines; an unmappable fault arrives
    # after that, while the rebuild still runs. The rebuild did not restart anything after it, so
    # the next round must not scale down against it (RFC §8): it is judged again.
    events = [Event(9.4, "kill_process", rank=3),
              Event(2.164, "hardware_fault", pod=0, level=6, target="unknown_card_format", duration_sec=4.5,
                    after="DECIDING"),
              Event(0.779, "hardware_fault", rank=1, level=4, target="card", hardware_first=True,
                    kill="executor_death", duration_sec=7.1, after="SCALING_DOWN")]
    assert _violations(1574, events) == []


# A survivor dies during the round's recovery poll, after its own read found it healthy: its
# ENGINE_DEAD arrives before the commit and is news for the next decision, a second round (RFC
# §3.1), not something the round saw.
_SURVIVOR_DIES_AFTER_ITS_READ = [Event(13.970, "executor_death", rank=2),
                                 Event(2.5, "executor_death", rank=0, after="guard")]


def test_a_survivor_dying_after_its_own_recovery_read_is_removed_by_a_second_round() -> None:
    result = run(503, "vllm", events=_SURVIVOR_DIES_AFTER_ITS_READ)
    assert result.violations == [], result.trace
    assert "phase=SCALED_DOWN_RUNNING dead_committed=[0, 2] published=[1, 3]" in "\n".join(result.trace)


def test_a_new_engine_dying_after_it_was_ready_and_before_its_pod_answered_the_start_is_acted_on() -> None:
    # vLLM 0.33.0 refuses the scale-down, so rank 1's death is handled by a rebuild; rank 0's new
    # engine is ready, then dies while its pod still waits for rank 1's. Its ENGINE_DEAD arrives
    # before the pod's answer that its engines started: it is about the new engine, not one the
    # rebuild replaced, and must not be settled away with the rebuild.
    events = [Event(6.376, "executor_death", rank=1), Event(11.836, "executor_death", rank=0)]
    assert _violations(12214, events, "vllm-0.33") == []


@pytest.mark.parametrize(("seed", "dialect", "lossy_sec", "unhealthy_at", "rank", "after_pull_sec"), [
    (24593, "vllm", 30.498, 10.498, 0, 0.244),
    (25175, "vllm-0.33", 35.411, 15.411, 0, 0.373),
    (26105, "rfc", 27.087, 7.087, 2, 0.005),
])
def test_a_death_a_pull_read_whose_answer_was_lost_still_reaches_the_controller(
        seed: int, dialect: str, lossy_sec: float, unhealthy_at: float, rank: int, after_pull_sec: float) -> None:
    # The rank's NodeManager reads it dead for a pull and counts the death as reported; the answer
    # is lost on a lossy network while the rank's older UNHEALTHY report arrives. Unless the
    # Controller reads the rank again, the death never reaches it and it stays published.
    events = [Event(0.0, "lossy_network", duration_sec=lossy_sec), Event(unhealthy_at, "unhealthy", rank=rank),
              Event(after_pull_sec, "executor_death", rank=rank, after="pull")]
    assert _violations(seed, events, dialect) == []


@pytest.mark.parametrize("dialect", ["vllm", "sglang"])
def test_a_card_fault_that_joined_a_window_closed_by_a_recovery_is_still_acted_on(dialect: str) -> None:
    # Rank 3's status hangs (DEAD evidence), rank 2's card fails while that window is open and its
    # process dies 2.5 s later; rank 3 recovers in between, which ends the window the card fault
    # joined. Dropped with it, the card fault left rank 2 published for the whole collection timeout.
    events = [Event(16.472, "store_outage", duration_sec=14.34), Event(31.519, "hang_status", rank=3, duration_sec=2.595),
              Event(37.698, "hardware_fault", rank=2, level=4, target="card", hardware_first=True, kill="kill_process",
                    duration_sec=2.504)]
    assert _violations(9, events, dialect) == []


def test_overlapping_lossy_windows_leave_a_calm_network_after_the_last() -> None:
    # Two lossy windows overlap, then rank 3 dies: the second window's end used to restore the
    # lossy bounds it found at its start, so every later call could be lost and the reconfiguration
    # gave up although every NodeManager ran.
    assert _violations(591147, [Event(25.126, "lossy_network", duration_sec=5.9),
                                Event(28.286, "lossy_network", duration_sec=10.0),
                                Event(32.654, "kill_process", rank=3)]) == []
