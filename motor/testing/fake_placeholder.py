"""The process a NodeManager supervises for one rank of a light engine group: it tells the group
(`motor.testing.fake_group_app`'s lifecycle listener) that the rank started, and on SIGTERM that it
was stopped, then idles. So a stop and a launch by the NodeManager (a whole-instance
reconfiguration) restart the rank in the group; a SIGKILL (``kill_process``) reports nothing, as
the fault itself already took the rank down.

  python -m motor.testing.fake_placeholder --control http://127.0.0.2:17999 --rank 1
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import time
import urllib.error
import urllib.request
from collections.abc import Sequence

# The group serves before any NodeManager launches a placeholder; a loaded machine may be slow.
_REPORT_WITHIN_SEC = 30.0


def report(control: str, rank: int, event: str, within_sec: float) -> bool:
    body = json.dumps({"rank": rank, "event": event}).encode()
    deadline = time.monotonic() + within_sec
    while True:
        req = urllib.request.Request(f"{control}/fake/lifecycle", data=body,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=5):
                return True
        except (urllib.error.URLError, OSError):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="fake-placeholder")
    p.add_argument("--control", required=True, help="base URL of the group's lifecycle listener")
    p.add_argument("--rank", type=int, required=True)
    args = p.parse_args(argv)

    def stop(_signum: int, _frame: object) -> None:
        report(args.control, args.rank, "stopped", within_sec=1.0)
        os._exit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    if not report(args.control, args.rank, "started", within_sec=_REPORT_WITHIN_SEC):
        return 1
    while True:
        signal.pause()


if __name__ == "__main__":
    raise SystemExit(main())
