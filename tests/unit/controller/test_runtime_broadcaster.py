"""The fan-out behind WatchFaultToleranceStatus: each instance's last change time is kept (a watcher is
told when a state came about), and a watcher that falls behind loses intermediate changes, never the
last one."""

from __future__ import annotations

from motor.controller.status import RuntimeBroadcaster


class Wall:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_each_instance_keeps_its_last_change_time_and_an_unchanged_one_is_now() -> None:
    wall, seen = Wall(100.0), []
    broadcaster = RuntimeBroadcaster(on_change=seen.append, wall=wall)
    broadcaster.changed(1)
    wall.now = 105.0
    broadcaster.changed(2)
    wall.now = 107.5
    broadcaster.changed(2)
    wall.now = 120.0
    assert (broadcaster.changed_at(1), broadcaster.changed_at(2), broadcaster.changed_at(3)) == (100.0, 107.5, 120.0)
    assert seen == [1, 2, 2]


def test_a_watcher_behind_loses_the_oldest_changes_and_keeps_the_last() -> None:
    broadcaster = RuntimeBroadcaster(wall=Wall(0.0))
    queue = broadcaster.subscribe()
    for instance_id in range(queue.maxsize + 3):
        broadcaster.changed(instance_id)
    got = [queue.get_nowait() for _ in range(queue.qsize())]
    assert len(got) == queue.maxsize and got[-1] == queue.maxsize + 2 and got[0] == 3
    broadcaster.unsubscribe(queue)
    broadcaster.changed(0)
    assert queue.empty()
