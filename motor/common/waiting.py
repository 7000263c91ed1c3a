"""Bounded waits on an event or a queue that never swallow a cancellation.

Python 3.11's ``asyncio.wait_for`` returns the inner result when it completes in the same turn of
the loop as a cancellation of the waiter, and the cancellation is lost. In a loop that waits for a
wake-up between rounds, a wake-up that comes with the owner's stop then keeps the loop going, and the
stop waits for it. ``asyncio.timeout`` delivers the cancellation in that case, so every bounded wait
of a long-running loop goes through here.
"""

from __future__ import annotations

import asyncio
from typing import TypeVar

T = TypeVar("T")


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
