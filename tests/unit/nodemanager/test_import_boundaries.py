"""Production code stays free of the launcher and of the test doubles (read from the sources, so a
lazy import inside a function counts too): the NodeManager imports neither ``motor.launch`` nor
``motor.testing``; the Controller, Coordinator and reference engine never import ``motor.testing``."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


def imported_modules(package_dir: Path) -> dict[str, set[str]]:
    """Source file (relative) → every module it imports, absolute or from-import."""
    out: dict[str, set[str]] = {}
    for path in sorted(package_dir.rglob("*.py")):
        names: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            if isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names.add(node.module)
                names.update(f"{node.module}.{alias.name}" for alias in node.names)
        out[str(path.relative_to(ROOT))] = names
    return out


def offenders(package: str, forbidden: tuple[str, ...]) -> dict[str, list[str]]:
    found = {}
    for source, names in imported_modules(ROOT / package).items():
        bad = sorted(n for n in names if any(n == f or n.startswith(f + ".") for f in forbidden))
        if bad:
            found[source] = bad
    return found


def test_the_nodemanager_imports_neither_the_launcher_nor_test_doubles() -> None:
    assert offenders("nodemanager", ("motor.launch", "motor.testing")) == {}


@pytest.mark.parametrize("package", ["motor/controller", "motor/coordinator", "motor/sim", "nodemanager"])
def test_production_never_imports_test_doubles(package: str) -> None:
    assert offenders(package, ("motor.testing",)) == {}


def test_the_old_locations_are_gone() -> None:
    for old in ("motor/launch/process.py", "motor/launch/ports.py", "nodemanager/testing"):
        assert not (ROOT / old).exists(), old
