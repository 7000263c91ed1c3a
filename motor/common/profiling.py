"""A benchmark's window into a service's CPU: cProfile switched on and off by SIGUSR1.

Only when the environment names a directory (`MOTOR_PROFILE_DIR`): the first SIGUSR1 starts the
profiler in the main thread (where the event loop runs), the next stops it and writes the stats to
`<dir>/<label>-<pid>-<n>.prof` (`pstats` reads and merges them). Without the variable nothing is
installed and the signal keeps its default meaning.
"""

from __future__ import annotations

import cProfile
import logging
import os
import signal
from pathlib import Path

log = logging.getLogger(__name__)

PROFILE_DIR_ENV = "MOTOR_PROFILE_DIR"


def install_profile_toggle(label: str) -> Path | None:
    """Installs the SIGUSR1 toggle when `MOTOR_PROFILE_DIR` is set; returns the directory."""
    where = os.environ.get(PROFILE_DIR_ENV)
    if not where:
        return None
    out = Path(where)
    out.mkdir(parents=True, exist_ok=True)
    state: dict[str, object] = {"profile": None, "n": 0}

    def toggle(_signum: int, _frame: object) -> None:
        profile = state["profile"]
        if profile is None:
            state["profile"] = p = cProfile.Profile()
            p.enable()
            return
        assert isinstance(profile, cProfile.Profile)
        profile.disable()
        state["n"] = n = int(state["n"]) + 1  # type: ignore[call-overload]
        profile.dump_stats(str(out / f"{label}-{os.getpid()}-{n}.prof"))
        state["profile"] = None

    signal.signal(signal.SIGUSR1, toggle)
    log.info("%s: SIGUSR1 toggles cProfile, stats written to %s", label, out)
    return out
