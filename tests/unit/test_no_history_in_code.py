"""No issue-tracker references in the code, the tests, the protos or the generated code.

History lives in git: a comment or docstring says what the code does and why, and a reference to a
tracker entry is neither (the reader cannot follow it, and it rots). The check reads every text file
under the source folders, generated code included, since it is regenerated from the protos' comments.
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ROOTS = ("motor", "nodemanager", "benchmarks", "scripts", "protos", "gen", "tests", "deploy",
         "clients/typescript/src", "clients/typescript/test", "Makefile", "pyproject.toml")
SKIPPED_DIRS = frozenset({"node_modules", "__pycache__", ".pytest_cache", ".hypothesis", ".mypy_cache",
                          ".ruff_cache"})
TRACKER_RE = re.compile(r"[Ii]ssue [0-9]+")


def source_files() -> list[Path]:
    files: list[Path] = []
    for root in ROOTS:
        path = REPO / root
        if path.is_file():
            files.append(path)
            continue
        files.extend(p for p in path.rglob("*")
                     if p.is_file() and not SKIPPED_DIRS.intersection(p.relative_to(REPO).parts))
    return sorted(files)


def tracker_references(path: Path) -> list[str]:
    """`file:line: text` of every tracker reference in a text file (binary files have none)."""
    data = path.read_bytes()
    if b"\0" in data:
        return []
    rel = path.relative_to(REPO).as_posix()
    text = data.decode("utf-8", errors="replace")
    return [f"{rel}:{n}: {line.strip()}" for n, line in enumerate(text.splitlines(), 1) if TRACKER_RE.search(line)]


def test_no_tracker_references_in_the_code() -> None:
    found = [hit for path in source_files() for hit in tracker_references(path)]
    assert not found, "issue numbers in the code (history lives in git):\n" + "\n".join(found)


def test_the_pattern_finds_references_and_leaves_other_text_alone() -> None:
    # The number is joined on so that this line holds no tracker reference itself.
    assert TRACKER_RE.search("see Issue " + "14") and TRACKER_RE.search("(issue " + "19: at DP=256)")
    assert not TRACKER_RE.search("vLLM PR #46370") and not TRACKER_RE.search("a known issue in etcd")
