"""One module per concept: no module of motor/ or nodemanager/ over 400 lines (generated code aside)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MAX_LINES = 400


def test_no_module_is_over_400_lines() -> None:
    too_long = {str(p.relative_to(ROOT)): n for pkg in ("motor", "nodemanager") for p in sorted((ROOT / pkg).rglob("*.py"))
                if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert too_long == {}, f"modules over {MAX_LINES} lines: {too_long}"
