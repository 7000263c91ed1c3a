"""The publication's fan-out: every publisher is called, a failed required one fails the call after
the others were served, a best-effort one never does, and a publisher that hangs at takeover never
cuts the others' reads short."""

from __future__ import annotations

import asyncio

import pytest

from gen.motor.v1 import common_pb2
from motor.controller.publishers.fanout import Publication
from motor.controller.serving import PublisherHealth, PublishError


class FakePublisher:
    def __init__(self, name: str, required: bool = True, fail: bool = False, hang: bool = False,
                 learned: dict | None = None) -> None:
        self.health = PublisherHealth(name, "fake", name, required)
        self.fail, self.hang, self.learned = fail, hang, learned or {}
        self.calls: list[str] = []

    enabled = True

    @property
    def target(self) -> str:
        return self.health.name

    async def _act(self, call: str):
        self.calls.append(call)
        if self.hang:
            await asyncio.Event().wait()
        if self.fail:
            raise PublishError(f"{self.health.name} refused {call}")

    async def add(self, view):
        await self._act("add")

    async def drain(self, topology):
        await self._act("drain")
        return tuple(e.id for e in topology.endpoints) if self.learned else None

    async def set_all(self, compute_views):
        await self._act(f"set:{[v.id for v in compute_views()]}")
        return [v.id for v in compute_views()]

    async def learn(self):
        await self._act("learn")
        return self.learned

    def forget(self):
        pass

    async def reconcile_loop(self):
        pass

    async def close(self):
        pass


def _view(iid: int = 7) -> common_pb2.Instance:
    view = common_pb2.Instance(id=iid)
    view.endpoints.add(id=0, ip="127.0.0.2", business_port=8000)
    return view


async def test_a_failed_required_publisher_fails_the_call_after_every_publisher_was_called() -> None:
    coordinator, router = FakePublisher("coordinator"), FakePublisher("router", fail=True)
    best_effort = FakePublisher("other", required=False, fail=True)
    publication = Publication([coordinator, router, best_effort])
    with pytest.raises(PublishError) as err:
        await publication.add(_view())
    assert "router refused add" in str(err.value) and "other" not in str(err.value)
    assert coordinator.calls == router.calls == best_effort.calls == ["add"]
    router.fail = False
    await publication.add(_view())  # the best-effort one still fails: the call does not


async def test_a_set_computes_its_views_once_for_every_publisher() -> None:
    computed = []

    def views():
        computed.append(1)
        return [_view(7), _view(8)]

    first, second = FakePublisher("a"), FakePublisher("b")
    assert await Publication([first, second]).set_all(views) == [7, 8]
    assert len(computed) == 1 and first.calls == second.calls == ["set:[7, 8]"]


async def test_the_drain_answers_what_a_publisher_withdrew() -> None:
    publication = Publication([FakePublisher("coordinator"), FakePublisher("router", learned={7: (0,)})])
    assert await publication.drain(_view()) == (0,)
    assert await Publication([FakePublisher("coordinator")]).drain(_view()) is None


async def test_a_publisher_that_hangs_at_takeover_does_not_cut_the_others_reads_short() -> None:
    coordinator = FakePublisher("coordinator", learned={7: (0, 2, 3)})
    router = FakePublisher("router", hang=True)
    publication = Publication([coordinator, router])
    with pytest.raises(PublishError, match="reading router timed out after 0.05s"):
        await publication.learn(0.05)
    assert coordinator.calls == ["learn"] and router.calls == ["learn"]
    router.hang = False
    assert await publication.learn(0.05) == {7: (0, 2, 3)}
