"""Bounded waits on an event or a queue that never swallow a cancellation.

Python 3.11's ``asyncio.wait_for`` returns the inner result when it completes in the same turn of
the loop as a cancellation of the waiter, and the cancellation is lost. In a loop that waits for a
wake-up between rounds, a wake-up that comes with the owner's stop then keeps the loop going, and the
stop waits for it. ``asyncio.timeout`` delivers the cancellation in that case, so every bounded wait
of a long-running loop goes through here.

A stop that cancels its tasks waits for them within a bound too (``end_tasks``): one task that does
not end (a cancellation swallowed by a bug or a library) must not keep the rest of the stop, and the
engines it stops, from happening.
"""

from __future__ import annotations

import asyncio
import io
import logging
from collections.abc import Iterable
from typing import Any, TypeVar

T = TypeVar("T")

log = logging.getLogger("motor.common.waiting")


async def wait_set(event: asyncio.Event, timeout_sec: float) -> bool:
    """Waits at most ``timeout_sec`` for ``event``; True when it is set, False when the time ran out."""
    try:
        async with asyncio.timeout(timeout_sec):
            await event.wait()
    except TimeoutError:
        return False
    return True


async def get_within(queue: asyncio.Queue[T], timeout_sec: float) -> T:
    """The queue's next item; TimeoutError when none comes within ``timeout_sec``."""
    async with asyncio.timeout(timeout_sec):
        return await queue.get()


async def end_tasks(tasks: Iterable[asyncio.Task[Any]], bound_sec: float, label: str) -> list[asyncio.Task[Any]]:
    """Cancels ``tasks`` and waits at most ``bound_sec`` for them to end. Returns the tasks still
    running then, each logged at ERROR with where it waits, so that the caller goes on with its stop.
    The outcome of every task that ended is retrieved (an exception is not logged twice by asyncio)."""
    tasks = list(tasks)
    pending = [t for t in tasks if not t.done()]
    for task in pending:
        task.cancel()
    if pending:
        await asyncio.wait(pending, timeout=bound_sec)
    for task in tasks:
        if task.done() and not task.cancelled():
            task.exception()
    still = sorted((t for t in tasks if not t.done()), key=lambda t: t.get_name())
    for task in still:
        stack = io.StringIO()
        task.print_stack(file=stack)
        log.error("%s: task %s did not end within %gs of its cancellation; going on without it:\n%s",
                  label, task.get_name(), bound_sec, stack.getvalue().rstrip())
    return still
