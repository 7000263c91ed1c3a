"""Bounded waits for tests and benchmarks: look at a predicate until it answers something truthy.

Every wait names what it awaits and has a bound. Running out of it fails with an AssertionError
saying what was awaited, the bound, and what the predicate answered (or raised) last.

  wait_for        blocks the calling thread between looks; bounded in seconds (subprocesses,
                  HTTP peers, servers on their own threads)
  async_wait_for  the same without blocking the event loop; the predicate may return an awaitable
  turns_until     bounded in event-loop turns, not seconds: for code the loop alone drives (tasks
                  on a fake clock), where the bound is how much work may run, not how long
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from tenacity import (AsyncRetrying, RetryError, Retrying, retry_if_exception_type, retry_if_result, stop_after_delay,
                      wait_fixed)

T = TypeVar("T")
Errors = type[BaseException] | tuple[type[BaseException], ...]


def _policy(timeout_sec: float, interval_sec: float, until: Callable[[Any], object],
            ignoring: Errors) -> dict[str, Any]:
    """Look again, until the bound, while ``until`` rejects the answer or one of the ``ignoring``
    errors comes out of the predicate or of ``until``."""
    def rejected(answer: Any) -> bool:
        try:
            return not until(answer)
        except ignoring:
            return True

    return {"stop": stop_after_delay(timeout_sec), "wait": wait_fixed(interval_sec),
            "retry": retry_if_result(rejected) | retry_if_exception_type(ignoring)}


def _late(what: str, timeout_sec: float, exc: RetryError) -> AssertionError:
    last = exc.last_attempt
    seen = f"last error: {last.exception()!r}" if last.failed else f"last: {last.result()!r}"
    return AssertionError(f"{what} not reached within {timeout_sec:g}s ({seen})")


def wait_for(predicate: Callable[[], T], timeout_sec: float, what: str, *, interval_sec: float = 0.05,
             until: Callable[[T], object] = bool, ignoring: Errors = ()) -> T:
    """Calls ``predicate`` every ``interval_sec`` until its answer is truthy, and returns that answer.

    With ``until``, the predicate is a read (a status, an entry) and ``until`` judges it: a late wait
    then shows the last thing read. An error of the ``ignoring`` types counts as "not yet" (a peer
    still starting); any other error ends the wait at once.
    """
    try:
        return Retrying(**_policy(timeout_sec, interval_sec, until, ignoring))(predicate)
    except RetryError as exc:
        raise _late(what, timeout_sec, exc) from None


async def async_wait_for(predicate: Callable[[], T | Awaitable[T]], timeout_sec: float, what: str, *,
                         interval_sec: float = 0.05, until: Callable[[T], object] = bool, ignoring: Errors = ()) -> T:
    """`wait_for` between ``asyncio.sleep`` calls; an awaitable answer is awaited before it is judged."""
    async def look() -> T:
        answer = predicate()
        return await answer if inspect.isawaitable(answer) else answer

    try:
        return await AsyncRetrying(**_policy(timeout_sec, interval_sec, until, ignoring))(look)
    except RetryError as exc:
        raise _late(what, timeout_sec, exc) from None


async def turns_until(predicate: Callable[[], T], turns: int, what: str) -> T:
    """Yields to the event loop until ``predicate()`` is truthy (returned), at most ``turns`` times."""
    answer = None
    for _ in range(turns):
        if answer := predicate():
            return answer
        await asyncio.sleep(0)
    raise AssertionError(f"{what} not reached within {turns} event-loop turns (last: {answer!r})")
