"""The vllm-router that `make test` installs is the one the tests and the router benchmark expect."""

from __future__ import annotations

import re
from pathlib import Path

from motor.testing.vllm_router import ROUTER_VERSION

ROOT = Path(__file__).resolve().parents[2]


def test_the_makefile_installs_the_pinned_vllm_router_in_the_parallel_install_step() -> None:
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    pinned = re.search(r"^ROUTER_VERSION := (\S+)$", makefile, re.M)
    assert pinned is not None and pinned.group(1) == ROUTER_VERSION
    deps = re.search(r"^deps: (.*)$", makefile, re.M)
    assert deps is not None and "$(ROUTER_VENV)/.installed" in deps.group(1).split()
