"""Skills as complete directories: ``SKILL.md`` plus every other file beside it.

A skill is offered to the model by name and description; ``load_skill`` returns its
instructions and a list of its other files, and ``load_skill`` with a ``file`` returns
one of them. Every bound below holds for skills built in code and read from a package;
a package's skill directory is read through descriptors (``O_NOFOLLOW`` at every
component), so a link can neither be followed nor swapped in while it is read.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from emelex.app._errors import InvalidSkill, PackageProblem, SkillTooLarge
from emelex.tools import FunctionTool
from emelex.tools.workspace import (
    NotRegularFile,
    SymlinkRefused,
    Workspace,
    WorkspaceError,
)

SKILL_FILE = "SKILL.md"
#: Most files one skill may hold, ``SKILL.md`` included.
MAX_SKILL_FILES = 256
#: Largest single file of a skill, in bytes.
MAX_SKILL_FILE_BYTES = 1024 * 1024
#: Largest total of one skill's files, in bytes.
MAX_SKILL_BYTES = 4 * 1024 * 1024
#: Most path components of a skill file (``a/b/c.md`` has three).
MAX_SKILL_DEPTH = 8
_MAX_NAME_BYTES = 255


@attrs.frozen
class SkillFile:
    """One file of a skill besides ``SKILL.md``: a relative POSIX ``path`` inside the
    skill directory and its bytes."""

    path: str
    content: bytes

    @property
    def text(self) -> str | None:
        """The content as UTF-8 text, or None for a binary file."""
        try:
            return self.content.decode("utf-8")
        except UnicodeDecodeError:
            return None


def _check_files(skill: Skill, attribute: object, files: tuple[SkillFile, ...]) -> None:
    check_skill_files(skill.name, files)


@attrs.frozen
class Skill:
    """Instructions for one kind of work, offered by name and description and loaded
    on demand (the ``skills`` capability or a worker harness). ``files`` are the
    skill's other files (scripts, references, templates), sorted by path, which the
    model reads through ``load_skill`` with a ``file`` argument."""

    name: str
    description: str
    instructions: str
    files: tuple[SkillFile, ...] = attrs.field(default=(), validator=_check_files)


def _bad_path(path: str) -> str | None:
    if not path or "\0" in path or "\\" in path:
        return "must be non-blank and hold no NUL or backslash"
    if path.startswith("/"):
        return "must be relative to the skill directory"
    parts = path.split("/")
    if any(part in ("", ".", "..") for part in parts):
        return "must be a normalized relative path (no empty, '.' or '..' parts)"
    if any(len(os.fsencode(part)) > _MAX_NAME_BYTES for part in parts):
        return f"has a name longer than {_MAX_NAME_BYTES} bytes"
    if path == SKILL_FILE:
        return f"{SKILL_FILE} holds the skill's instructions; it is not one of its files"
    return None


def check_skill_files(name: str, files: Sequence[SkillFile]) -> None:
    """Raise :class:`InvalidSkill` (or :class:`SkillTooLarge` at a bound) unless
    ``files`` are sorted, unique, well-formed paths within every bound."""
    if not isinstance(files, tuple) or not all(isinstance(f, SkillFile) for f in files):
        raise InvalidSkill(f"skill {name!r}: files must be a tuple of SkillFile")
    if len(files) + 1 > MAX_SKILL_FILES:
        raise SkillTooLarge(
            "skill files",
            MAX_SKILL_FILES,
            len(files) + 1,
            f"skill {name!r} has {len(files) + 1} files, over the limit of {MAX_SKILL_FILES}",
        )
    total = 0
    paths: set[str] = set()
    for file in files:
        if not isinstance(file.path, str) or not isinstance(file.content, bytes):
            raise InvalidSkill(f"skill {name!r}: a file needs a str path and bytes content")
        reason = _bad_path(file.path)
        if reason is not None:
            raise InvalidSkill(f"skill {name!r}: file path {file.path!r} {reason}")
        depth = file.path.count("/") + 1
        if depth > MAX_SKILL_DEPTH:
            raise SkillTooLarge(
                "skill depth",
                MAX_SKILL_DEPTH,
                depth,
                f"skill {name!r}: {file.path!r} is {depth} levels deep, over {MAX_SKILL_DEPTH}",
            )
        size = len(file.content)
        if size > MAX_SKILL_FILE_BYTES:
            raise SkillTooLarge(
                "skill file bytes",
                MAX_SKILL_FILE_BYTES,
                size,
                f"skill {name!r}: {file.path!r} has {size} bytes, over {MAX_SKILL_FILE_BYTES}",
            )
        total += size
        if file.path in paths:
            raise InvalidSkill(f"skill {name!r}: file {file.path!r} is given twice")
        for depth in range(1, file.path.count("/") + 1):
            if file.path.rsplit("/", depth)[0] in paths:
                raise InvalidSkill(f"skill {name!r}: {file.path!r} is below another file")
        paths.add(file.path)
    if total > MAX_SKILL_BYTES:
        raise SkillTooLarge(
            "skill bytes",
            MAX_SKILL_BYTES,
            total,
            f"skill {name!r} holds {total} bytes of files, over {MAX_SKILL_BYTES}",
        )
    if [f.path for f in files] != sorted(paths):
        raise InvalidSkill(f"skill {name!r}: files must be sorted by path")


def skill_files(name: str, files: Mapping[str, str | bytes] | None) -> tuple[SkillFile, ...]:
    """``files`` (path -> text or bytes; text is stored as UTF-8) as the sorted tuple
    a :class:`Skill` holds; raises like :func:`check_skill_files`."""
    if files is None:
        return ()
    if not isinstance(files, Mapping):
        raise InvalidSkill(f"skill {name!r}: files must map paths to text or bytes")
    result: list[SkillFile] = []
    for path, content in files.items():
        if isinstance(content, str):
            content = content.encode("utf-8")
        if not isinstance(path, str) or not isinstance(content, bytes):
            raise InvalidSkill(f"skill {name!r}: file {path!r} needs a str path and text or bytes")
        result.append(SkillFile(path, content))
    ordered = tuple(sorted(result, key=lambda f: f.path))
    check_skill_files(name, ordered)
    return ordered


# -- reading a skill directory -----------------------------------------------------------


@attrs.define
class _Walk:
    workspace: Workspace
    files: dict[str, bytes] = attrs.Factory(dict)
    problems: list[PackageProblem] = attrs.Factory(list)
    total: int = 0
    stopped: bool = False

    def problem(self, path: str, code: str, message: str) -> None:
        self.problems.append(PackageProblem(path, code, message))

    def stop(self, path: str, code: str, message: str) -> None:
        """Report a bound that ends the walk (reading on would only cost time)."""
        self.problem(path, code, message)
        self.stopped = True


def read_skill_directory(
    directory: str | os.PathLike[str],
) -> tuple[dict[str, bytes], list[PackageProblem]]:
    """Every regular file below ``directory`` (paths relative to it, ``SKILL.md``
    included), with a problem for each link, special file, empty directory, bad name
    and bound (``skill-too-many-files``, ``file-too-large``, ``skill-too-large``,
    ``skill-too-deep``). Problem paths are relative to ``directory``. Blocking: call it
    where blocking is allowed (package loading is synchronous)."""
    try:
        workspace = Workspace.open(directory)
    except WorkspaceError as exc:
        return {}, [PackageProblem(".", "unreadable", f"cannot open the skill: {exc}")]
    with workspace:
        walk = _Walk(workspace)
        try:
            _visit(walk, ())
        except WorkspaceError as exc:
            walk.problem(".", "unreadable", f"cannot read the skill: {exc}")
    return walk.files, walk.problems


def _visit(walk: _Walk, parts: tuple[str, ...]) -> None:
    shown = "/".join(parts) or "."
    fd = walk.workspace.open_dir(walk.workspace.target(shown))
    try:
        names: list[str] = []
        with os.scandir(fd) as entries:
            for entry in entries:
                names.append(entry.name)
                if len(names) > MAX_SKILL_FILES:
                    walk.stop(
                        shown,
                        "skill-too-many-files",
                        f"the skill has more than {MAX_SKILL_FILES} files",
                    )
                    return
        if not names and parts:
            walk.problem(shown, "empty-directory", "empty directories are not kept by the format")
        for name in sorted(names):
            if walk.stopped:
                return
            _entry(walk, fd, (*parts, name))
    finally:
        os.close(fd)


def _entry(walk: _Walk, parent_fd: int, parts: tuple[str, ...]) -> None:
    rel = "/".join(parts)
    name = parts[-1]
    if "\\" in name or len(os.fsencode(name)) > _MAX_NAME_BYTES:
        walk.problem(rel, "bad-path", "the file name is not portable")
        return
    try:
        mode = os.stat(name, dir_fd=parent_fd, follow_symlinks=False).st_mode
    except OSError as exc:
        walk.problem(rel, "unreadable", f"cannot read: {exc.strerror or exc}")
        return
    if stat.S_ISDIR(mode):
        if len(parts) >= MAX_SKILL_DEPTH:
            walk.problem(
                rel, "skill-too-deep", f"skill files may be at most {MAX_SKILL_DEPTH} levels deep"
            )
            return
        _visit(walk, parts)
        return
    if len(walk.files) >= MAX_SKILL_FILES:
        walk.stop(rel, "skill-too-many-files", f"the skill has more than {MAX_SKILL_FILES} files")
        return
    try:
        fd, info = walk.workspace.open_file_at(parent_fd, name, rel)
    except SymlinkRefused:
        walk.problem(rel, "symlink", "symbolic links are not allowed in a package")
        return
    except NotRegularFile:
        walk.problem(rel, "special-file", "only regular files and directories are allowed")
        return
    try:
        if info.st_size > MAX_SKILL_FILE_BYTES:
            walk.problem(
                rel,
                "file-too-large",
                f"{info.st_size} bytes is over the {MAX_SKILL_FILE_BYTES}-byte limit",
            )
            return
        if walk.total + info.st_size > MAX_SKILL_BYTES:
            walk.stop(rel, "skill-too-large", f"the skill is over {MAX_SKILL_BYTES} bytes")
            return
        content = _read_bounded(fd, MAX_SKILL_FILE_BYTES)
    finally:
        os.close(fd)
    if content is None:
        walk.problem(rel, "file-too-large", f"the file grew past {MAX_SKILL_FILE_BYTES} bytes")
        return
    walk.total += len(content)
    walk.files[rel] = content


def _read_bounded(fd: int, limit: int) -> bytes | None:
    """The whole file, or None when it holds more than ``limit`` bytes (it may grow
    between ``fstat`` and the read)."""
    chunks: list[bytes] = []
    size = 0
    while True:
        chunk = os.read(fd, min(65536, limit + 1 - size))
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        size += len(chunk)
        if size > limit:
            return None


# -- the load_skill tool -----------------------------------------------------------------


def _listing(skill: Skill) -> str:
    if not skill.files:
        return ""
    lines = [
        "",
        "",
        f"## Files of this skill ({len(skill.files)})",
        f"Read one with load_skill(name={skill.name!r}, file=<path>).",
    ]
    lines += [f"- {file.path} ({len(file.content)} bytes)" for file in skill.files]
    return "\n".join(lines)


def load_skill_tool(skills: Sequence[Skill]) -> FunctionTool:
    """The ``load_skill`` tool over ``skills``: ``{"name": ...}`` returns the skill's
    instructions and the list of its files; ``{"name": ..., "file": path}`` returns
    that file (UTF-8 text as is; a binary file is described, not dumped)."""
    by_name = {skill.name: skill for skill in skills}

    async def load(arguments: dict[str, Any]) -> str:
        skill = by_name[arguments["name"]]
        path = arguments.get("file")
        if path is None or path == SKILL_FILE:
            return f"# Skill: {skill.name}\n\n{skill.instructions}{_listing(skill)}"
        file = next((f for f in skill.files if f.path == path), None)
        if file is None:
            known = ", ".join(f.path for f in skill.files) or "none"
            return f"error: skill {skill.name!r} has no file {path!r} (its files: {known})"
        text = file.text
        if text is None:
            return (
                f"# {skill.name}/{file.path}: binary file, {len(file.content)} bytes "
                "(not shown as text)"
            )
        return f"# {skill.name}/{file.path}\n\n{text}"

    schema: dict[str, Any] = {
        "type": "object",
        "properties": {
            "name": {"type": "string", "enum": list(by_name), "description": "The skill to load."},
            "file": {
                "type": "string",
                "maxLength": 4096,
                "description": "A file of the skill, as listed when the skill was loaded "
                "(omit for its instructions).",
            },
        },
        "required": ["name"],
        "additionalProperties": False,
    }
    return FunctionTool(
        "load_skill",
        "Load the full instructions of one skill, by name, or one of the skill's files.",
        schema,
        load,
    )


__all__ = [
    "MAX_SKILL_BYTES",
    "MAX_SKILL_DEPTH",
    "MAX_SKILL_FILES",
    "MAX_SKILL_FILE_BYTES",
    "Skill",
    "SkillFile",
    "check_skill_files",
    "load_skill_tool",
    "read_skill_directory",
    "skill_files",
]
