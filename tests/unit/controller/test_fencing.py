"""The leader's fence (motor.controller.fencing) and the receivers' term fence
(motor.common.term_fence), with a manual clock: a term holds until its deadline and never again
after it is lost; a lost term refuses every action, counted; receivers refuse older terms."""

from __future__ import annotations

import math

import pytest

from motor.common.leader_client import leader_hint
from motor.common.metadata import LEADER_ADDRESS_METADATA, LEADER_TERM_METADATA
from motor.common.term_fence import FileTermStorage, MalformedTerm, TermFence, parse_term, term_of
from motor.controller.clients import NodeManagerClient, NotLeaderCallError, PeerCallError
from motor.controller.fencing import Fence, Leadership, NotLeaderError


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_term_holds_until_its_deadline_and_is_lost_once() -> None:
    clock = Clock()
    lost: list[str] = []
    fence = Fence(7, b"/p/leader", 102.0, clock=clock, lease_id=0xAB, on_lost=lost.append)
    assert fence.leading and fence.term == 7
    fence.check("apply")
    fence.extend(101.0)  # never shortened
    assert fence.deadline == 102.0
    fence.extend(104.0)
    clock.now = 103.9
    assert fence.leading
    clock.now = 104.0
    with pytest.raises(NotLeaderError, match=r"apply refused: not the leader \(lease of term 7 not renewed"):
        fence.check("apply")
    assert not fence.leading and len(lost) == 1
    fence.extend(200.0)  # a lost term never leads again
    fence.lose("again")
    assert not fence.leading and len(lost) == 1


def test_solo_and_standby_fences() -> None:
    solo = Fence.solo()
    assert solo.leading and solo.term == 0 and solo.key is None and solo.deadline == math.inf
    standby = Fence.standby()
    assert not standby.leading
    with pytest.raises(NotLeaderError, match="standby"):
        standby.check("x")


def test_leadership_counts_refusals_and_carries_the_term() -> None:
    solo = Leadership.solo("c-0", "127.0.0.1:1")
    assert solo.leading and solo.call_metadata(solo.check("guard")) == ()
    refused: list[str] = []
    elected = Leadership(election_enabled=True, replica_id="c-1", on_refused=refused.append)
    with pytest.raises(NotLeaderError):
        elected.check("put", kind="store")
    assert refused == ["store"]
    elected.adopt(Fence(12, b"/p/leader", math.inf))
    assert elected.call_metadata(elected.check("guard")) == ((LEADER_TERM_METADATA, "12"),)
    elected.fence.lose("deposed")
    with pytest.raises(NotLeaderError, match="deposed"):
        elected.check("guard")
    assert refused == ["store", "peer"]


async def test_a_peer_call_of_a_replica_that_does_not_lead_is_not_sent() -> None:
    leadership = Leadership(election_enabled=True, replica_id="c-1")
    # Nothing listens on this address: a call that were sent would fail UNAVAILABLE instead.
    client = NodeManagerClient("127.0.0.1:9", None, 1.0, leadership)
    try:
        with pytest.raises(NotLeaderCallError) as info:
            await client.apply(1, "sd-1", [1], "127.0.0.2", 0, [0])
    finally:
        await client.close()
    assert isinstance(info.value, PeerCallError) and info.value.code is None
    assert str(info.value).startswith("apply to 127.0.0.1:9 not sent: not the leader")


def test_receivers_refuse_older_terms() -> None:
    fence = TermFence("test")
    assert fence.refusal(5, "/x/Apply") is None and fence.term == 5
    assert fence.refusal(5, "/x/Apply") is None  # the same leader again
    why = fence.refusal(3, "/x/Apply")
    assert why is not None and "leader term 3 is older than term 5" in why and fence.refused == 1
    fence.observe(9, "heartbeat answer")
    assert fence.refusal(6, "/x/Guard") is not None and fence.refusal(9, "/x/Guard") is None
    fence.observe(4, "late answer")  # never goes back
    assert fence.term == 9


def test_metadata_parsing() -> None:
    assert term_of([(LEADER_TERM_METADATA, "42")]) == 42
    assert term_of([(LEADER_TERM_METADATA, b"42")]) == 42
    assert term_of([(LEADER_TERM_METADATA, "x")]) is None and term_of(None) is None and term_of([("a", "1")]) is None
    assert isinstance(parse_term([(LEADER_TERM_METADATA, "-3")]), MalformedTerm)
    assert isinstance(parse_term([(LEADER_TERM_METADATA, "9" * 20)]), MalformedTerm)
    assert parse_term([(LEADER_TERM_METADATA, "٣")]) == MalformedTerm("٣")  # a digit, not ASCII
    assert parse_term(None) is None
    assert leader_hint([(LEADER_ADDRESS_METADATA, "127.0.0.1:5")]) == "127.0.0.1:5"
    assert leader_hint([(LEADER_ADDRESS_METADATA, "")]) == ""  # a standby that knows no leader
    assert leader_hint([("other", "v")]) is None and leader_hint(None) is None


def test_a_call_without_a_term_runs_only_until_a_term_was_seen() -> None:
    fence = TermFence("test")
    assert fence.refusal(None, "/x/Apply") is None  # a lone Controller without election
    assert fence.refusal(3, "/x/Apply") is None
    why = fence.refusal(None, "/x/Apply")
    assert why is not None and "carries no leader term" in why and "term 3 was already seen" in why


def test_a_malformed_term_is_refused_naming_it() -> None:
    fence = TermFence("test")
    why = fence.refusal(MalformedTerm("12abc"), "/x/Guard")
    assert why is not None and "'12abc'" in why and fence.refused == 1 and fence.term == 0


def test_the_highest_term_survives_a_restart(tmp_path) -> None:
    first = TermFence("test", FileTermStorage(tmp_path))
    assert first.term == 0
    first.observe(8, "heartbeat answer")
    first.observe(6, "late answer")
    again = TermFence("test", FileTermStorage(tmp_path))
    assert again.term == 8
    assert again.refusal(7, "/x/Apply") is not None


def test_an_unreadable_term_record_stops_the_start(tmp_path) -> None:
    (tmp_path / "leader-term.json").write_text("{not json")
    with pytest.raises(RuntimeError, match="leader-term.json is unreadable"):
        TermFence("test", FileTermStorage(tmp_path))
