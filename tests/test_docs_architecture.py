"""docs/architecture.md names real code: every module path it mentions exists under
``src/emelex``, and every ``Class.member`` it mentions is defined in that class.

Read statically with :mod:`ast`, so a rename in the code fails here until the page
follows it.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

import emelex

SRC = Path(emelex.__file__).resolve().parent
ROOT = SRC.parents[1]
PAGE = ROOT / "docs" / "architecture.md"

#: The page's stand-in for "a private module" in general.
PLACEHOLDERS = frozenset({"_name.py"})


def module_paths(text: str) -> set[str]:
    return set(re.findall(r"`([\w/]+\.py)`", text)) - PLACEHOLDERS


def member_references(text: str) -> set[tuple[str, str]]:
    return set(re.findall(r"`([A-Z]\w*)\.(\w+)", text))


def _exists(path: str, names: set[str]) -> bool:
    # A bare file name is named in the prose of its package's section.
    if "/" not in path:
        return path in names
    return (SRC / path).is_file() or (ROOT / path).is_file()


def missing_paths(text: str) -> list[str]:
    names = {path.name for path in SRC.rglob("*.py")}
    return [path for path in sorted(module_paths(text)) if not _exists(path, names)]


def class_members() -> dict[str, set[str]]:
    """Every class defined in src/emelex, by name, with the names its body defines."""
    members: dict[str, set[str]] = defaultdict(set)
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ClassDef):
                continue
            defined = members[node.name]
            for item in node.body:
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                    defined.add(item.name)
                elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    defined.add(item.target.id)
                elif isinstance(item, ast.Assign):
                    defined.update(t.id for t in item.targets if isinstance(t, ast.Name))
    return members


def missing_members(text: str, members: dict[str, set[str]]) -> list[str]:
    return sorted(
        f"{cls}.{name}"
        for cls, name in member_references(text)
        if name not in members.get(cls, set())
    )


def test_the_page_names_modules_and_members() -> None:
    text = PAGE.read_text(encoding="utf-8")
    assert len(module_paths(text)) > 30
    assert len(member_references(text)) > 10


def test_every_module_path_exists() -> None:
    assert missing_paths(PAGE.read_text(encoding="utf-8")) == []


def test_every_class_member_is_defined() -> None:
    assert missing_members(PAGE.read_text(encoding="utf-8"), class_members()) == []


def test_stale_names_are_reported() -> None:
    text = "`agent/_turn.py` `agent/_gone.py` `_nowhere.py` `TurnCore.commit` `TurnCore.vanished`"
    assert missing_paths(text) == ["_nowhere.py", "agent/_gone.py"]
    assert missing_members(text, class_members()) == ["TurnCore.vanished"]
