"""The README and docs/ stay true to the tree they describe.

Every repository path they name exists (a `file::test` also names a test defined in that file), every
dotted module they name imports from a file of the tree, every relative link resolves inside the
repository, the README stays short, nothing points outside the repository, and no text refers to the
issue tracker. Module moves then fail here, naming the stale mention, instead of leaving docs that lie.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
README_MAX_LINES = 150
# Written by the configuration generator from the config models; its own test keeps it current.
GENERATED_DOCS = frozenset({"docs/configuration.md"})

TOP_DIRS = ("motor", "nodemanager", "tests", "benchmarks", "deploy", "protos", "gen", "clients", "scripts", "docs",
            r"\.ci")
# A repository path: starts at a top-level folder, not inside a longer path or word (/etc/motor/... is not one).
PATH_RE = re.compile(r"(?<![\w./-])((?:%s)/[\w.*/-]*)((?:::\w+)*)" % "|".join(TOP_DIRS))
# A dotted Python module of the tree (motor.v1 is the proto package, not a module).
MODULE_RE = re.compile(r"(?<![\w./-])((?:motor|nodemanager|benchmarks)(?:\.\w+)+)")
# benchmarks.md is a file name, not a module.
FILE_SUFFIXES = frozenset({"md", "py", "txt", "json", "yaml", "yml", "proto", "toml"})
LINK_RE = re.compile(r"\]\(([^)\s]+)\)")
# "../" (not an ellipsis "...") or an absolute path into the work area.
OUTSIDE_RE = re.compile(r"(?<!\.)\.\./|/work/")
TRACKER_RE = re.compile(r"[Ii]ssue [0-9]+")


def doc_files() -> list[Path]:
    return [README, *sorted((REPO / "docs").glob("*.md"))]


def rel(path: Path) -> str:
    return path.relative_to(REPO).as_posix()


def path_problem(text: str, tests: str) -> str | None:
    """Why a repository path (with optional ::names) mentioned in a doc is stale, or None."""
    path = text.rstrip(".,;:")
    if path in GENERATED_DOCS:
        return None
    if "*" in path:
        return None if any(REPO.glob(path)) else f"{path}: matches nothing"
    target = REPO / path
    if not target.exists():
        return f"{path}: no such file or folder"
    if tests:
        if not target.is_file():
            return f"{path}{tests}: not a file"
        source = target.read_text(encoding="utf-8")
        for name in tests.split("::")[1:]:
            if not re.search(rf"^\s*(?:async\s+)?(?:def|class)\s+{name}\b", source, re.MULTILINE):
                return f"{path}::{name}: no test or class of that name in the file"
    return None


def module_problem(dotted: str) -> str | None:
    """Why a dotted module (or module.attribute) mentioned in a doc does not exist, or None."""
    if dotted.startswith("motor.v1") or dotted.rsplit(".", 1)[1] in FILE_SUFFIXES:
        return None
    parts = dotted.split(".")
    for cut in range(len(parts), 1, -1):
        base = REPO.joinpath(*parts[:cut])
        module = base.with_suffix(".py") if base.with_suffix(".py").is_file() else base / "__init__.py"
        if not module.is_file():
            continue
        rest = parts[cut:]
        if rest and not re.search(rf"\b{rest[0]}\b", module.read_text(encoding="utf-8")):
            return f"{dotted}: {rest[0]} is not in {rel(module)}"
        return None
    return f"{dotted}: no such module"


def anchors(path: Path) -> set[str]:
    """GitHub's anchors of a page's headings: lower case, punctuation dropped, spaces as hyphens."""
    found = set()
    for line in path.read_text(encoding="utf-8").splitlines():
        heading = re.match(r"#{1,6}\s+(.*)", line)
        if heading:
            found.add(re.sub(r"[^\w\- ]", "", heading.group(1).strip().lower()).replace(" ", "-"))
    return found


def mentions(path: Path) -> list[str]:
    text = path.read_text(encoding="utf-8")
    problems = []
    for match in PATH_RE.finditer(text):
        problem = path_problem(match.group(1), match.group(2))
        if problem:
            problems.append(f"{rel(path)}: {problem}")
    for match in MODULE_RE.finditer(text):
        problem = module_problem(match.group(1))
        if problem:
            problems.append(f"{rel(path)}: {problem}")
    for match in LINK_RE.finditer(text):
        target, _, anchor = match.group(1).partition("#")
        if re.match(r"[a-z]+:", target):
            continue
        resolved = (path.parent / target).resolve() if target else path
        inside = resolved == REPO or REPO in resolved.parents
        if not inside:
            problems.append(f"{rel(path)}: link {target} leaves the repository")
        elif rel(resolved) in GENERATED_DOCS:
            continue
        elif not resolved.exists():
            problems.append(f"{rel(path)}: link {target} resolves to nothing")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            problems.append(f"{rel(path)}: link {match.group(1)} names no heading of {rel(resolved)}")
    return problems


def test_every_path_module_and_link_in_the_docs_exists() -> None:
    problems = [p for doc in doc_files() for p in mentions(doc)]
    assert not problems, "stale mentions in the docs:\n" + "\n".join(problems)


def test_the_readme_is_at_most_150_lines() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines (at most {README_MAX_LINES})"


def test_nothing_points_outside_the_repository() -> None:
    found = [f"{rel(doc)}:{n}: {line.strip()}" for doc in doc_files()
             for n, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), 1) if OUTSIDE_RE.search(line)]
    assert not found, "paths or links outside the repository:\n" + "\n".join(found)


def test_no_text_refers_to_the_issue_tracker() -> None:
    found = [f"{rel(doc)}:{n}: {line.strip()}" for doc in doc_files()
             for n, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), 1) if TRACKER_RE.search(line)]
    assert not found, "issue numbers in the docs (history lives in git):\n" + "\n".join(found)


@pytest.mark.parametrize(("text", "tests", "stale"), [
    ("motor/controller/core.py", "", False),
    ("motor/controller/core.py.", "", False),
    ("motor/controller/", "", False),
    ("motor/controller/no_such_module.py", "", True),
    ("tests/unit/test_docs.py", "::test_the_readme_is_at_most_150_lines", False),
    ("tests/unit/test_docs.py", "::test_that_was_renamed", True),
    ("tests/unit/controller/test_*.py", "", False),
    ("docs/configuration.md", "", False),
])
def test_the_path_check_catches_stale_paths(text: str, tests: str, stale: bool) -> None:
    assert (path_problem(text, tests) is not None) is stale


@pytest.mark.parametrize(("dotted", "stale"), [
    ("motor.launch.cluster", False),
    ("motor.sim.toy_model.expected_completion", False),
    ("motor.v1.Controller", False),
    ("benchmarks.md", False),
    ("motor.sim.toy_model.no_such_name", True),
    ("nodemanager.no_such_module", True),
])
def test_the_module_check_catches_stale_modules(dotted: str, stale: bool) -> None:
    assert (module_problem(dotted) is not None) is stale


def test_anchors_are_the_headings_as_github_writes_them(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# Title\n## 7. Controller restarts and replicas\n### `engine-check`, §2 Roles\n")
    assert anchors(page) == {"title", "7-controller-restarts-and-replicas", "engine-check-2-roles"}


def test_the_patterns_find_paths_and_leave_other_text_alone() -> None:
    found = [m.group(1) + m.group(2) for m in PATH_RE.finditer(
        "see `tests/e2e/test_e2e_scale_down.py::test_ordinary_rank_under_load`, /etc/motor/pki/ca.crt and "
        "runs/demo-1/motor/x, then motor/sim/README.md.")]
    assert found == ["tests/e2e/test_e2e_scale_down.py::test_ordinary_rank_under_load", "motor/sim/README.md."]
    assert [m.group(1) for m in MODULE_RE.finditer("python -m benchmarks.scale; motor.v1.Controller; motor-ft")] == [
        "benchmarks.scale", "motor.v1.Controller"]
    assert OUTSIDE_RE.search("[spec](../shared/spec.txt)") and not OUTSIDE_RE.search("[a](architecture.md)")
    assert not OUTSIDE_RE.search("`.../timeline?instance_id=N`")
    # The number is joined on so that this line holds no tracker reference for the code check.
    assert TRACKER_RE.search("fixed in issue " + "13") and not TRACKER_RE.search("vLLM PR #46370")
