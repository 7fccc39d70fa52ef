"""The service's and store's rooms stay small: files of at most 700 lines, functions of
at most 80, unless the module's docstring says why (a sentence starting "Over 700
lines", naming each longer function)."""

from __future__ import annotations

import ast
import pathlib

import emelex

SRC = pathlib.Path(emelex.__file__).resolve().parent
MAX_LINES = 700
MAX_FUNCTION_LINES = 80


def _oversized(path: pathlib.Path, root: pathlib.Path = SRC) -> list[str]:
    text = path.read_text(encoding="utf-8")
    tree = ast.parse(text, str(path))
    why = ast.get_docstring(tree) or ""
    found = []
    lines = text.count("\n")
    if lines > MAX_LINES and "Over 700 lines" not in why:
        found.append(f"{path.relative_to(root)}: {lines} lines")
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            length = (node.end_lineno or node.lineno) - node.lineno + 1
            if length > MAX_FUNCTION_LINES and f"``{node.name}``" not in why:
                found.append(f"{path.relative_to(root)}:{node.lineno} {node.name}: {length} lines")
    return found


def test_service_and_store_files_and_functions_are_small_or_say_why() -> None:
    found = [
        entry
        for package in ("service", "store")
        for path in sorted((SRC / package).rglob("*.py"))
        for entry in _oversized(path)
    ]
    assert not found, "\n".join(found)


def test_the_size_check_sees_long_functions_and_files_without_a_reason(
    tmp_path: pathlib.Path,
) -> None:
    body = "".join(f"    x{i} = {i}\n" for i in range(90))
    (tmp_path / "long.py").write_text('"""A module."""\n\n\ndef f():\n' + body, encoding="utf-8")
    assert _oversized(tmp_path / "long.py", tmp_path) == ["long.py:4 f: 91 lines"]
    (tmp_path / "why.py").write_text('"""``f``."""\n\n\ndef f():\n' + body, encoding="utf-8")
    assert _oversized(tmp_path / "why.py", tmp_path) == []
    (tmp_path / "big.py").write_text('"""A module."""\n' + "x = 1\n" * 700, encoding="utf-8")
    assert _oversized(tmp_path / "big.py", tmp_path) == ["big.py: 701 lines"]
