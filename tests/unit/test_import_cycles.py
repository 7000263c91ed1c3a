"""No import cycle among Motor's own modules (motor/ and nodemanager/).

The graph is read with `ast`, nothing is imported: an edge is a module-level import (also inside
`if TYPE_CHECKING:` or `try:` at module level, since a cycle that only type checkers see is still
two modules that each need the other), never an import inside a function. `from pkg import name`
points at `pkg.name` when that is a module, else at `pkg` itself; importing a module does not add
edges to the packages above it (their `__init__` re-exports are not a cycle).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOP_PACKAGES = ("motor", "nodemanager")


def _modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for top in TOP_PACKAGES:
        for path in sorted((ROOT / top).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


MODULES = _modules()
PACKAGES = sorted(name for name, path in MODULES.items() if path.name == "__init__.py")


def _module_level_imports(body: list[ast.stmt]) -> Iterator[ast.Import | ast.ImportFrom]:
    for stmt in body:
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            yield stmt
        elif isinstance(stmt, ast.If):
            yield from _module_level_imports(stmt.body)
            yield from _module_level_imports(stmt.orelse)
        elif isinstance(stmt, ast.Try):
            yield from _module_level_imports(stmt.body)
            for handler in stmt.handlers:
                yield from _module_level_imports(handler.body)
            yield from _module_level_imports(stmt.orelse)
            yield from _module_level_imports(stmt.finalbody)
        elif isinstance(stmt, ast.With):
            yield from _module_level_imports(stmt.body)


def _imports_of(name: str) -> set[str]:
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets: set[str] = set()
    for stmt in _module_level_imports(ast.parse(path.read_text(encoding="utf-8"), str(path)).body):
        if isinstance(stmt, ast.Import):
            targets.update(alias.name for alias in stmt.names if alias.name in MODULES)
            continue
        base = stmt.module or ""
        if stmt.level:
            anchor = package.split(".")[: len(package.split(".")) - (stmt.level - 1)]
            base = ".".join([*anchor, base] if base else anchor)
        for alias in stmt.names:
            if f"{base}.{alias.name}" in MODULES:
                targets.add(f"{base}.{alias.name}")
            elif base in MODULES:
                targets.add(base)
    targets.discard(name)
    return targets


GRAPH = {name: _imports_of(name) for name in MODULES}


def _cycles(nodes: set[str]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(nodes):
        if start in index:
            continue
        work = [(start, iter(sorted(GRAPH[start] & nodes)))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(GRAPH[child] & nodes))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def _describe(cycles: list[list[str]]) -> str:
    return "; ".join(
        " , ".join(f"{m} -> {sorted(GRAPH[m] & set(c))}" for m in c) for c in cycles
    )


def test_every_package_is_covered() -> None:
    assert {"motor.controller.hardware", "motor.sim", "nodemanager"} <= set(PACKAGES)


@pytest.mark.parametrize("package", PACKAGES)
def test_no_import_cycle_inside_package(package: str) -> None:
    direct = {name for name in MODULES if name == package or name.rpartition(".")[0] == package}
    cycles = _cycles(direct)
    assert not cycles, f"import cycles in {package}: {_describe(cycles)}"


def test_no_import_cycle_across_packages() -> None:
    cycles = _cycles(set(MODULES))
    assert not cycles, f"import cycles: {_describe(cycles)}"


def test_the_checker_sees_a_cycle() -> None:
    # Guards the checker itself: a graph it reads as acyclic must not be so by accident.
    saved = dict(GRAPH)
    try:
        GRAPH["motor.sim.engine"] = saved["motor.sim.engine"] | {"motor.sim.http_api"}
        assert _cycles({"motor.sim.engine", "motor.sim.http_api"}) == [["motor.sim.engine", "motor.sim.http_api"]]
    finally:
        GRAPH.clear()
        GRAPH.update(saved)
