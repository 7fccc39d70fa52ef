"""Comparing two packages part by part (``emelex agents diff``)."""

from __future__ import annotations

import hashlib
import os
import pathlib
from typing import Any

import attrs

from emelex.app._errors import InvalidPackage
from emelex.app._package_format import MANIFEST, SKILL_FILE
from emelex.app._package_read import read_package
from emelex.app._package_write import toml_value


@attrs.frozen
class Change:
    """One structural difference between two packages: ``kind`` is ``"added"``,
    ``"removed"`` or ``"changed"``; ``path`` names the part (``agent.version``,
    ``instructions``, ``files/notes.md``, ``skills/review``, ...)."""

    kind: str
    path: str
    before: str | None = None
    after: str | None = None

    def __str__(self) -> str:
        mark = {"added": "+", "removed": "-", "changed": "~"}.get(self.kind, "?")
        if self.kind == "changed" and self.before is not None and self.after is not None:
            return f"{mark} {self.path}: {self.before} -> {self.after}"
        return f"{mark} {self.path}"


def _snapshot(path: str | os.PathLike[str]) -> dict[str, str]:
    """A flat, comparable view of a package: manifest fields and content hashes."""
    read = read_package(path)
    flat: dict[str, str] = {}

    def walk(value: Any, prefix: str) -> None:
        if isinstance(value, dict):
            for key in sorted(value):
                walk(value[key], f"{prefix}.{key}" if prefix else key)
        else:
            flat[prefix] = toml_value(value) if not isinstance(value, dict) else str(value)

    manifest = dict(read.manifest)
    capabilities = manifest.pop("capabilities", [])
    plugins = manifest.pop("plugins", {})
    walk(manifest, "")
    if isinstance(capabilities, list):
        for entry in capabilities:
            if isinstance(entry, dict):
                cid = str(entry.get("id"))
                flat[f"capabilities.{cid}"] = toml_value(entry.get("options", {}))
    if isinstance(plugins, dict):
        for plugin in plugins.get("paths", []) or []:
            flat[f"plugins.{plugin}"] = "present"

    def digest(content: bytes) -> str:
        return "sha256:" + hashlib.sha256(content).hexdigest()[:16]

    if read.instructions is not None:
        flat["instructions"] = digest(read.instructions)
    for folder, files in (("files", read.files), ("readonly", read.readonly)):
        for name, content in files.items():
            flat[f"{folder}/{name}"] = digest(content)
    for name, contents in read.skills.items():
        for file, content in contents.items():
            # SKILL.md stands for the skill itself; its other files are listed beside it.
            flat[f"skills/{name}" if file == SKILL_FILE else f"skills/{name}/{file}"] = digest(
                content
            )
    return flat


def diff_packages(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> list[Change]:
    """The structural differences from package ``a`` to package ``b``: manifest
    fields (``agent.version``, ``workspace.policy``, ``capabilities.<id>``, ...),
    ``instructions``, seeded files and skills (compared by SHA-256), sorted by path.
    Empty when the packages are equivalent. Raises :class:`InvalidPackage` when either
    side is not a directory with a readable ``agent.toml`` (other problems do not stop
    a diff)."""
    for path in (a, b):
        unreadable = [
            p
            for p in read_package(path).problems
            if p.code in ("not-a-directory", "missing-manifest", "bad-toml")
        ]
        if unreadable:
            raise InvalidPackage(f"cannot diff {os.fspath(path)!r}", unreadable)
    before, after = _snapshot(a), _snapshot(b)
    changes: list[Change] = []
    for key in sorted(set(before) | set(after)):
        if key not in after:
            changes.append(Change("removed", key, before[key], None))
        elif key not in before:
            changes.append(Change("added", key, None, after[key]))
        elif before[key] != after[key]:
            changes.append(Change("changed", key, before[key], after[key]))
    return changes


def find_packages(directory: str | os.PathLike[str]) -> list[pathlib.Path]:
    """Directories directly under ``directory`` that hold an ``agent.toml``, sorted."""
    root = pathlib.Path(os.fspath(directory))
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if p.is_dir() and (p / MANIFEST).is_file())


__all__ = ["Change", "diff_packages", "find_packages"]
