"""Motor's import rules are import-linter contracts (`[tool.importlinter]` in pyproject.toml): no
cycle between sibling modules or packages at any depth, generated code and motor.common importing
no service, the three services independent, the Controller's layers, and its pure domain modules
doing no I/O. This runs them and fails with import-linter's report."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_import_contract_is_kept() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    contracts = config["tool"]["importlinter"]["contracts"]
    lint = Path(sys.executable).with_name("lint-imports")
    done = subprocess.run([str(lint), "--no-cache"], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                          capture_output=True, text=True, timeout=120)
    report = done.stdout + done.stderr
    assert done.returncode == 0, report
    kept = [line for line in report.splitlines() if line.endswith(" KEPT")]
    assert [line.removesuffix(" KEPT") for line in kept] == [c["name"] for c in contracts], report
