"""SIGTERM in a process that holds a LocalCluster (`motor demo`, benchmarks/recovery.py).

Python's default SIGTERM ends the process at once without running ``finally`` blocks, and every
cluster process sits in its own session, so they would all outlive their holder. Inside
``exit_on_sigterm()`` a SIGTERM raises ``Terminated`` (a ``SystemExit`` with status 143) in the main
thread instead, so the holder's ``finally: cluster.stop()`` runs and the process then exits non-zero.

A teardown runs under ``sigterm_deferred()`` (``LocalCluster.stop`` does): a SIGTERM arriving
meanwhile is held and raised once the teardown has ended, so a teardown is never cut short halfway.
Outside ``exit_on_sigterm()`` both are inert.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from types import FrameType

SIGTERM_EXIT_STATUS = 128 + signal.SIGTERM


class Terminated(SystemExit):
    """SIGTERM arrived; raised where the main thread was, so cleanup runs on the way out."""

    def __init__(self) -> None:
        super().__init__(SIGTERM_EXIT_STATUS)


class _State:
    deferring = 0  # nesting depth of sigterm_deferred()
    pending = False  # a SIGTERM arrived while deferring


def _on_sigterm(_signum: int, _frame: FrameType | None) -> None:
    if _State.deferring:
        _State.pending = True
        return
    raise Terminated()


@contextlib.contextmanager
def exit_on_sigterm() -> Iterator[None]:
    """SIGTERM raises ``Terminated`` in the main thread while inside (call it from the main thread)."""
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def sigterm_deferred() -> Iterator[None]:
    """Holds a SIGTERM that arrives inside until the block has ended, then raises it."""
    _State.deferring += 1
    try:
        yield
    finally:
        _State.deferring -= 1
        if not _State.deferring and _State.pending:
            _State.pending = False
            raise Terminated()
