"""Bounded waits that keep a cancellation which comes in the same turn as the wake-up, and a guard
that no long-running loop of the services waits for an event or a queue with ``asyncio.wait_for``."""

from __future__ import annotations

import ast
import asyncio
from pathlib import Path

import pytest

from motor.common.waiting import end_tasks, get_within, wait_set

ROOT = Path(__file__).resolve().parents[3]


async def test_wait_set_tells_set_from_timed_out() -> None:
    event = asyncio.Event()
    assert await wait_set(event, 0.01) is False
    event.set()
    assert await wait_set(event, 10.0) is True


async def test_a_cancellation_in_the_same_turn_as_the_set_is_kept() -> None:
    event = asyncio.Event()
    waiter = asyncio.create_task(wait_set(event, 10.0))
    await asyncio.sleep(0)  # the waiter is in its wait
    event.set()
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert waiter.cancelled()


async def test_get_within_returns_the_item_or_times_out() -> None:
    queue: asyncio.Queue[int] = asyncio.Queue()
    with pytest.raises(TimeoutError):
        await get_within(queue, 0.01)
    queue.put_nowait(3)
    assert await get_within(queue, 10.0) == 3


async def test_a_cancellation_in_the_same_turn_as_an_item_is_kept() -> None:
    queue: asyncio.Queue[int] = asyncio.Queue()
    getter = asyncio.create_task(get_within(queue, 10.0))
    await asyncio.sleep(0)
    queue.put_nowait(1)
    getter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await getter


async def test_end_tasks_goes_on_without_a_task_that_swallows_its_cancellation(caplog: pytest.LogCaptureFixture
                                                                                ) -> None:
    release = asyncio.Event()

    async def swallows() -> None:
        while not release.is_set():
            try:
                await release.wait()
            except asyncio.CancelledError:
                continue  # the bug: the cancellation is dropped

    async def raises() -> None:
        raise ValueError("bad")

    stuck = asyncio.create_task(swallows(), name="stuck-loop")
    polite = asyncio.create_task(asyncio.Event().wait(), name="polite")
    failed = asyncio.create_task(raises(), name="failed")
    await asyncio.sleep(0)
    with caplog.at_level("ERROR", logger="motor.common.waiting"):
        left = await end_tasks([stuck, polite, failed], 0.05, "pod 127.0.0.2")
    assert left == [stuck] and polite.cancelled() and not stuck.done()
    assert "pod 127.0.0.2: task stuck-loop did not end within 0.05s" in caplog.text
    assert "swallows" in caplog.text  # where it waits
    assert "polite" not in caplog.text and "failed" not in caplog.text
    release.set()
    await stuck


async def test_end_tasks_returns_at_once_when_every_task_ends() -> None:
    done = asyncio.create_task(asyncio.sleep(0))
    await done
    waiting = asyncio.create_task(asyncio.Event().wait())
    assert await end_tasks([done, waiting], 100.0, "x") == []
    assert waiting.cancelled()


def _event_or_queue_waits_under_wait_for(path: Path) -> list[int]:
    lines = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "wait_for"
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "asyncio" and node.args):
            continue
        inner = node.args[0]
        if (isinstance(inner, ast.Call) and isinstance(inner.func, ast.Attribute) and inner.func.attr in ("wait", "get")
                and not inner.args):
            lines.append(node.lineno)
    return lines


def test_no_service_waits_for_an_event_or_a_queue_under_wait_for() -> None:
    sources = [p for pkg in ("motor", "nodemanager") for p in sorted((ROOT / pkg).rglob("*.py"))]
    found = {str(p.relative_to(ROOT)): lines for p in sources if (lines := _event_or_queue_waits_under_wait_for(p))}
    assert found == {}, f"asyncio.wait_for around an event or queue wait (use motor.common.waiting): {found}"
