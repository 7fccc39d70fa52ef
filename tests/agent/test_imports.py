"""The agent package's modules import each other without a circle (item 4 of the
redesign): each imports standalone, and the module-level import graph is acyclic."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import emelex.agent

PACKAGE = Path(emelex.agent.__file__).parent
MODULES = sorted(path.stem for path in PACKAGE.glob("_*.py") if path.stem != "__init__")


def _runtime_imports(module: str) -> set[str]:
    """The agent modules ``module`` imports when it runs (``TYPE_CHECKING`` blocks
    excluded: they never execute), at module level or inside functions."""
    tree = ast.parse((PACKAGE / f"{module}.py").read_text(encoding="utf-8"))
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped.update(id(child) for child in ast.walk(node))
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skipped or not isinstance(node, ast.ImportFrom):
            continue
        if node.module and node.module.startswith("emelex.agent._"):
            found.add(node.module.rsplit(".", 1)[1])
    return found & set(MODULES)


def test_the_agent_import_graph_has_no_circle() -> None:
    graph = {module: _runtime_imports(module) for module in MODULES}
    assert graph["_session"] >= {"_builder", "_turn"}
    assert "_session" not in graph["_builder"] and "_session" not in graph["_turn"]
    done: set[str] = set()

    def visit(module: str, path: tuple[str, ...]) -> None:
        if module in path:
            cycle = " -> ".join((*path[path.index(module) :], module))
            pytest.fail(f"import circle: {cycle}")
        if module in done:
            return
        for imported in sorted(graph[module]):
            visit(imported, (*path, module))
        done.add(module)

    for module in MODULES:
        visit(module, ())


@pytest.mark.parametrize("module", ["_builder", "_session", "_turn", "_options"])
def test_each_module_imports_standalone(module: str) -> None:
    result = subprocess.run(
        [sys.executable, "-c", f"import emelex.agent.{module}"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
