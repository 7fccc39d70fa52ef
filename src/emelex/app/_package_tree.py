"""Reading a package folder from disk: every file, bounded, never through a link.

The reader never stops at the first problem: it records each one (a
:class:`PackageProblem` with a stable code) and goes on, so ``emelex agents validate``
can list them all at once.
"""

from __future__ import annotations

import os
import pathlib
from collections.abc import Callable, Iterator
from typing import Any

import attrs

from emelex.app._errors import PackageProblem
from emelex.app._package_format import (
    INSTRUCTIONS,
    MAX_FILE_BYTES,
    MAX_FILES,
    MAX_PACKAGE_BYTES,
    SKILL_FILE,
    TOP_LEVEL,
)
from emelex.app._skill import read_skill_directory


@attrs.define
class PackageRead:
    """A package as read from disk, with every problem found on the way."""

    root: pathlib.Path
    problems: list[PackageProblem] = attrs.Factory(list)
    manifest: dict[str, Any] = attrs.Factory(dict)
    #: The manifest's text, for the line numbers of later problems.
    manifest_text: str = ""
    instructions: bytes | None = None
    files: dict[str, bytes] = attrs.Factory(dict)
    readonly: dict[str, bytes] = attrs.Factory(dict)
    #: skill directory name -> {path inside the skill: content}, ``SKILL.md`` included.
    skills: dict[str, dict[str, bytes]] = attrs.Factory(dict)
    total: int = 0
    count: int = 0

    def problem(self, path: str, code: str, message: str, line: int | None = None) -> None:
        self.problems.append(PackageProblem(path, code, message, line))

    def account(self, rel: str, size: int) -> bool:
        """Count one file of ``size`` bytes against the package bounds; False (with a
        problem) when the file alone is too large to keep."""
        self.count += 1
        if self.count == MAX_FILES + 1:
            self.problem(rel, "too-many-files", f"the package has more than {MAX_FILES} files")
        if size > MAX_FILE_BYTES:
            self.problem(
                rel, "file-too-large", f"{size} bytes is over the {MAX_FILE_BYTES}-byte limit"
            )
            return False
        self.total += size
        if self.total > MAX_PACKAGE_BYTES and self.total - size <= MAX_PACKAGE_BYTES:
            self.problem(rel, "package-too-large", f"the package is over {MAX_PACKAGE_BYTES} bytes")
        return True

    def read_file(self, path: pathlib.Path) -> bytes | None:
        rel = path.relative_to(self.root).as_posix()
        try:
            size = path.stat().st_size
        except OSError as exc:
            self.problem(rel, "unreadable", f"cannot read: {exc.strerror or exc}")
            return None
        if not self.account(rel, size):
            return None
        try:
            return path.read_bytes()
        except OSError as exc:
            self.problem(rel, "unreadable", f"cannot read: {exc.strerror or exc}")
            return None


def walk(read: PackageRead, directory: pathlib.Path) -> Iterator[pathlib.Path]:
    """Regular files under ``directory`` in sorted order; reports symlinks and other
    special entries instead of following them."""
    try:
        entries = sorted(directory.iterdir(), key=lambda p: p.name)
    except OSError as exc:
        read.problem(
            directory.relative_to(read.root).as_posix(), "unreadable", f"cannot list: {exc}"
        )
        return
    for entry in entries:
        rel = entry.relative_to(read.root).as_posix()
        if entry.is_symlink():
            read.problem(rel, "symlink", "symbolic links are not allowed in a package")
        elif entry.is_dir():
            if not any(entry.iterdir()):
                read.problem(rel, "empty-directory", "empty directories are not kept by the format")
            yield from walk(read, entry)
        elif entry.is_file():
            if "\\" in entry.name or len(os.fsencode(entry.name)) > 255:
                read.problem(rel, "bad-path", "the file name is not portable")
                continue
            yield entry
        else:
            read.problem(rel, "special-file", "only regular files and directories are allowed")


def read_tree(path: str | os.PathLike[str], manifest: Callable[[PackageRead], None]) -> PackageRead:
    """Every file of the package at ``path``; ``manifest`` reads ``agent.toml`` right
    after the top level is checked (so problems come in the order a person reads)."""
    root = pathlib.Path(os.fspath(path))
    read = PackageRead(root)
    if root.is_symlink():
        read.problem(".", "symlink", "the package directory is a symbolic link")
        return read
    if not root.is_dir():
        read.problem(".", "not-a-directory", f"{str(root)!r} is not a directory")
        return read
    read.root = root = root.resolve()
    for entry in sorted(root.iterdir(), key=lambda p: p.name):
        if entry.name not in TOP_LEVEL:
            read.problem(entry.name, "unknown-entry", "not part of the package format")
        elif entry.is_symlink():
            read.problem(entry.name, "symlink", "symbolic links are not allowed in a package")
    manifest(read)
    instructions = root / INSTRUCTIONS
    if instructions.is_symlink():
        pass  # reported above
    elif not instructions.is_file():
        read.problem(INSTRUCTIONS, "missing-instructions", "the package has no instructions.md")
    else:
        read.instructions = read.read_file(instructions)
    for folder, into in (("files", read.files), ("readonly", read.readonly)):
        base = root / folder
        if base.is_symlink():
            continue
        if base.exists() and not base.is_dir():
            read.problem(folder, "not-a-directory", f"{folder} must be a directory")
            continue
        if base.is_dir():
            for file in walk(read, base):
                content = read.read_file(file)
                if content is not None:
                    into[file.relative_to(base).as_posix()] = content
    _read_skills(read)
    plugins = root / "plugins"
    if plugins.is_dir() and not plugins.is_symlink():
        for file in walk(read, plugins):
            read.read_file(file)  # bounds and symlinks only; plugins are checked on load
    return read


def _read_skills(read: PackageRead) -> None:
    skills = read.root / "skills"
    if skills.is_symlink():
        return  # reported with the top level
    if skills.exists() and not skills.is_dir():
        read.problem("skills", "not-a-directory", "skills must be a directory")
        return
    if not skills.is_dir():
        return
    for entry in sorted(skills.iterdir(), key=lambda p: p.name):
        rel = f"skills/{entry.name}"
        if entry.is_symlink():
            read.problem(rel, "symlink", "symbolic links are not allowed in a package")
            continue
        if not entry.is_dir():
            read.problem(rel, "bad-skill", "skills/ holds one directory per skill")
            continue
        files, problems = read_skill_directory(entry)
        for problem in problems:
            where = rel if problem.path == "." else f"{rel}/{problem.path}"
            read.problem(where, problem.code, problem.message)
        kept: dict[str, bytes] = {}
        for name, content in files.items():
            if read.account(f"{rel}/{name}", len(content)):
                kept[name] = content
        if SKILL_FILE not in files and not any(p.path == SKILL_FILE for p in problems):
            read.problem(f"{rel}/{SKILL_FILE}", "bad-skill", "the skill has no SKILL.md")
        read.skills[entry.name] = kept


__all__ = ["PackageRead", "read_tree", "walk"]
