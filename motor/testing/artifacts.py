"""The artifact folder of a test that runs real processes (e2e, chaos): one folder per test under
$MOTOR_E2E_OUT (default <parent>/<kind>-<date>), holding the process logs beside artifacts.json,
what the test recorded of its run (what it injected or did, when, and what the cluster answered).
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from typing import Any


def artifacts_root(default_parent: Path, kind: str) -> Path:
    """$MOTOR_E2E_OUT, else a folder named for ``kind`` and the current time under ``default_parent``."""
    default = default_parent / time.strftime(f"{kind}-%Y%m%d-%H%M%S")
    return Path(os.environ.get("MOTOR_E2E_OUT", default))


def run_folder(root: Path, test_name: str) -> Path:
    """The (created) folder of one test, named for it with what a file name cannot hold replaced."""
    folder = root / re.sub(r"[^A-Za-z0-9_.-]+", "_", test_name)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


class Artifacts:
    """What one test recorded, written to <folder>/artifacts.json by `save` (also when the test fails)."""

    def __init__(self, folder: Path, **initial: Any) -> None:
        self.folder = folder
        self.data: dict[str, Any] = dict(initial)

    def record(self, key: str, value: Any) -> None:
        self.data[key] = value

    def event(self, key: str, **facts: Any) -> dict[str, Any]:
        """Appends ``facts``, stamped with the wall time, to the list under ``key``; returns the entry."""
        entry = {"at_unix_sec": time.time(), **facts}
        self.data.setdefault(key, []).append(entry)
        return entry

    def step(self, what: str, **facts: Any) -> None:
        """One step the test took (a kill, a freeze, a restart), in order under "steps"."""
        self.event("steps", what=what, **facts)

    def save(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        (self.folder / "artifacts.json").write_text(json.dumps(self.data, indent=2, default=str))
