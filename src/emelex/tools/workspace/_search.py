"""Recursive search: ``find_files`` (glob) and ``grep`` (regex or literal).

The walk holds one directory descriptor per level and opens each child directory with
``openat(parent, name, O_NOFOLLOW | O_DIRECTORY)``: symlinks are never followed, and an
entry swapped for a link mid-walk fails to open and is skipped. Likely-secret entries are
pruned unless the call was approved (``include_secrets``). Every result is bounded and says
when, and why, it was cut.
"""

from __future__ import annotations

import errno
import functools
import os
import re
import stat
from collections.abc import Callable, Collection, Iterator
from typing import NamedTuple

import attrs

from emelex._errors import LimitExceeded
from emelex.tools.workspace._errors import (
    InvalidArgument,
    NotRegularFile,
    PatternError,
    SymlinkRefused,
    map_os_error,
)
from emelex.tools.workspace._read import BINARY_PROBE_BYTES
from emelex.tools.workspace._root import DIR_FLAGS, FILE_FLAGS, Target, Workspace, describe_mode
from emelex.tools.workspace._secrets import is_secret_child

DEFAULT_SKIP_DIRS: frozenset[str] = frozenset({".git", ".hg", ".svn"})
"""Version-control directories that recursive operations do not enter by default."""
MAX_DEPTH = 128
"""Deepest directory level a walk enters (each level holds one descriptor)."""
DEFAULT_MAX_VISITED = 200_000
"""Default bound on directory entries one walk examines."""
MAX_PATTERN_CHARS = 4096
DEFAULT_FIND_RESULTS = 1000
DEFAULT_GREP_MATCHES = 200
DEFAULT_GREP_BYTES = 64 * 1024
DEFAULT_LINE_CHARS = 2000
DEFAULT_GREP_FILE_BYTES = 32 * 1024 * 1024
MAX_CONTEXT = 100

# -- globs ----------------------------------------------------------------------------


def _translate_component(text: str, pattern: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(text):
        char = text[i]
        if char == "*":
            out.append("[^/]*")
        elif char == "?":
            out.append("[^/]")
        elif char == "[":
            end = text.find("]", i + 2 if text[i + 1 : i + 2] in ("!", "]") else i + 1)
            if end < 0:
                out.append(re.escape(char))
            else:
                body = text[i + 1 : end]
                negate = body.startswith("!")
                if negate:
                    body = body[1:]
                # keep "-" for ranges; escape everything a regex class treats specially
                chars = "".join(c if c == "-" else re.escape(c) for c in body)
                out.append("[" + ("^" if negate else "") + chars + "]")
                i = end
        elif char == "{":
            end = text.find("}", i)
            if end < 0:
                out.append(re.escape(char))
            else:
                options = text[i + 1 : end].split(",")
                out.append(
                    "(?:" + "|".join(_translate_component(o, pattern) for o in options) + ")"
                )
                i = end
        else:
            out.append(re.escape(char))
        i += 1
    return "".join(out)


@attrs.frozen
class Glob:
    """A compiled glob: ``regex`` matches ``/``-joined paths relative to the search base.

    ``*``, ``?`` and ``[...]`` stay within one component, ``**`` spans any number of
    components (including none), ``{a,b}`` is an alternation. ``max_depth`` is the number
    of components a match can have (``None`` with ``**``), so a walk can stop early.
    """

    pattern: str
    regex: re.Pattern[str]
    max_depth: int | None


def compile_glob(pattern: str) -> Glob:
    """Compile a glob (``**/*.py``, ``src/*.{ts,tsx}``); raise ``PatternError`` if invalid."""
    if not pattern:
        raise PatternError(pattern, "empty glob")
    if len(pattern) > MAX_PATTERN_CHARS:
        raise LimitExceeded("glob_chars", MAX_PATTERN_CHARS, len(pattern))
    if "\0" in pattern or pattern.startswith("/"):
        raise PatternError(pattern, "a glob is relative to the search path and has no NUL")
    parts = pattern.split("/")
    if any(part == ".." for part in parts):
        raise PatternError(pattern, "'..' is not allowed in a glob")
    pieces: list[str] = []
    for index, part in enumerate(parts):
        last = index == len(parts) - 1
        if part == "**":
            pieces.append(".*" if last else "(?:[^/]+/)*")
        elif part in ("", "."):
            continue
        else:
            pieces.append(_translate_component(part, pattern) + ("" if last else "/"))
    try:
        regex = re.compile("".join(pieces) + r"\Z", re.DOTALL)
    except re.error as error:
        raise PatternError(pattern, f"invalid glob: {error}") from error
    depth = None if "**" in parts else len([p for p in parts if p not in ("", ".")])
    return Glob(pattern, regex, depth)


# -- the walk -------------------------------------------------------------------------


@attrs.define
class _WalkStats:
    visited: int = 0
    skipped_secrets: int = 0
    skipped_links: int = 0
    skipped_special: int = 0
    errors: int = 0
    exhausted: bool = False  # max_visited was reached
    too_deep: bool = False


def _walk_files(
    base_fd: int,
    base: Target,
    *,
    include_secrets: bool,
    skip_dirs: Collection[str],
    max_visited: int,
    max_depth: int | None,
    stats: _WalkStats,
) -> Iterator[tuple[int, str, tuple[str, ...]]]:
    """Yield ``(dir_fd, name, rel_parts)`` for every regular file below ``base_fd``.

    ``dir_fd`` stays open only until the next item is requested. ``rel_parts`` is relative
    to the base. Entries are visited in name order, depth first.
    """
    limit = MAX_DEPTH if max_depth is None else min(max_depth, MAX_DEPTH)
    # (descriptor, path relative to the base, full parent components, entries left)
    stack: list[tuple[int, tuple[str, ...], tuple[str, ...], Iterator[os.DirEntry[str]]]] = []

    def push(fd: int, rel: tuple[str, ...]) -> None:
        try:
            with os.scandir(fd) as scan:
                entries = sorted(scan, key=lambda e: e.name)
        except OSError:
            os.close(fd)
            stats.errors += 1
            return
        stack.append((fd, rel, (*base.parts, *rel), iter(entries)))

    push(os.dup(base_fd), ())
    try:
        while stack:
            fd, rel, parents, entries = stack[-1]
            entry = next(entries, None)
            if entry is None:
                stack.pop()
                os.close(fd)
                continue
            if stats.visited >= max_visited:
                stats.exhausted = True
                return
            stats.visited += 1
            name = entry.name
            if not include_secrets and is_secret_child(parents, name):
                stats.skipped_secrets += 1
                continue
            try:
                if entry.is_symlink():
                    stats.skipped_links += 1
                    continue
                if entry.is_dir(follow_symlinks=False):
                    if name in skip_dirs:
                        continue
                    if len(rel) + 1 >= limit:
                        if max_depth is None:
                            stats.too_deep = True
                        continue
                    try:
                        child = os.open(name, DIR_FLAGS, dir_fd=fd)
                    except OSError as error:
                        if error.errno in (errno.ELOOP, errno.ENOTDIR):
                            stats.skipped_links += 1  # swapped for a link or a file mid-walk
                        else:
                            stats.errors += 1
                        continue
                    push(child, (*rel, name))
                elif entry.is_file(follow_symlinks=False):
                    yield fd, name, (*rel, name)
                else:
                    stats.skipped_special += 1
            except OSError:
                stats.errors += 1
    finally:
        for fd, _rel, _parents, _entries in stack:
            os.close(fd)


def _open_base(ws: Workspace, target: Target) -> int | tuple[int, str]:
    """A listable descriptor for a directory target, or ``(parent_fd, name)`` for a file."""
    if not target.parts:
        return ws.open_dir(target)
    parent_fd, name = ws.open_parent(target)
    try:
        info = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
    except OSError as error:
        os.close(parent_fd)
        raise map_os_error(error, target.display) from error
    if stat.S_ISDIR(info.st_mode):
        os.close(parent_fd)
        return ws.open_dir(target)
    if not stat.S_ISREG(info.st_mode):
        os.close(parent_fd)
        if stat.S_ISLNK(info.st_mode):
            raise SymlinkRefused(target.display, "is a symbolic link (never followed)")
        raise NotRegularFile(
            target.display, f"is not a regular file ({describe_mode(info.st_mode)})"
        )
    return parent_fd, name


def _display(outside: bool, prefix: tuple[str, ...], rel: tuple[str, ...]) -> str:
    return Target(outside, (*prefix, *rel)).display


def _check(name: str, value: int, maximum: int, minimum: int = 1) -> None:
    if value < minimum:
        raise InvalidArgument(name, f"must be at least {minimum}, got {value}")
    if value > maximum:
        raise LimitExceeded(name, maximum, value)


# -- find_files -----------------------------------------------------------------------


@attrs.frozen
class FindResult:
    """The result of :func:`find_files`.

    ``matches`` are display paths (relative to the workspace root; absolute for approved
    outside searches) of regular files, in name order, depth first. ``truncated`` is true
    when a bound stopped the search; ``truncation`` then says which (``"max_results"``,
    ``"max_visited"`` or ``"max_depth"``).
    """

    matches: tuple[str, ...]
    truncated: bool
    truncation: str | None
    visited: int
    skipped_secrets: int
    skipped_links: int


def find_files(
    ws: Workspace,
    pattern: str,
    path: str = ".",
    *,
    max_results: int = DEFAULT_FIND_RESULTS,
    max_visited: int = DEFAULT_MAX_VISITED,
    include_secrets: bool = False,
    skip_dirs: Collection[str] = DEFAULT_SKIP_DIRS,
    allow_outside: bool = False,
) -> FindResult:
    """Regular files below ``path`` whose path relative to ``path`` matches ``pattern``.

    ``*.py`` matches only directly below ``path``; ``**/*.py`` at any depth. Symlinks are
    neither followed nor reported. Secret entries are skipped unless ``include_secrets``
    (and a secret ``path`` itself raises ``SecretPath`` then).
    """
    _check("max_results", max_results, 1_000_000)
    _check("max_visited", max_visited, 10_000_000)
    glob = compile_glob(pattern)
    target = ws.target(path, allow_outside=allow_outside)
    ws.check_secret(target, include_secrets)
    opened = _open_base(ws, target)
    if isinstance(opened, tuple):
        os.close(opened[0])
        hit = glob.regex.match(opened[1]) is not None
        return FindResult((target.display,) if hit else (), False, None, 1, 0, 0)
    stats = _WalkStats()
    matches: list[str] = []
    truncation: str | None = None
    try:
        for _fd, _name, rel in _walk_files(
            opened,
            target,
            include_secrets=include_secrets,
            skip_dirs=skip_dirs,
            max_visited=max_visited,
            max_depth=glob.max_depth,
            stats=stats,
        ):
            if glob.regex.match("/".join(rel)):
                if len(matches) >= max_results:
                    truncation = "max_results"
                    break
                matches.append(Target(target.outside, (*target.parts, *rel)).display)
    finally:
        os.close(opened)
    if truncation is None and stats.exhausted:
        truncation = "max_visited"
    if truncation is None and stats.too_deep:
        truncation = "max_depth"
    return FindResult(
        tuple(matches),
        truncation is not None,
        truncation,
        stats.visited,
        stats.skipped_secrets,
        stats.skipped_links,
    )


# -- grep -----------------------------------------------------------------------------


class GrepLine(NamedTuple):
    """One output line: a match (``is_match``) or context around one.

    ``line_number`` is 1-based. ``cut`` is true when the line was longer than the line
    bound and ``text`` holds only its beginning. (An immutable named tuple rather than an
    attrs class: a search can produce many thousands of these, and it is 4x cheaper.)
    """

    path: str
    line_number: int
    text: str
    is_match: bool
    cut: bool = False


@attrs.frozen
class GrepResult:
    """The result of :func:`grep`.

    ``lines`` are in file order; a gap in ``line_number`` (or a new ``path``) starts a new
    group. ``match_count`` counts matching lines returned. ``truncated`` is true when a
    bound stopped the search; ``truncation`` names it (``"max_matches"``, ``"max_bytes"``,
    ``"max_visited"``, ``"max_depth"``). Files skipped as binary, too large, secret, or
    links are counted, never searched.
    """

    lines: tuple[GrepLine, ...]
    match_count: int
    files_with_matches: int
    files_searched: int
    truncated: bool
    truncation: str | None
    skipped_binary: int = 0
    skipped_large: int = 0
    skipped_secrets: int = 0
    skipped_links: int = 0


@attrs.define
class _GrepState:
    regex: re.Pattern[str]
    context: int
    max_matches: int
    max_bytes: int
    max_line_chars: int
    max_file_bytes: int
    lines: list[GrepLine] = attrs.Factory(list)
    matches: int = 0
    files_with_matches: int = 0
    searched: int = 0
    out_bytes: int = 0
    skipped_binary: int = 0
    skipped_large: int = 0
    truncation: str | None = None

    def search_fd(self, fd: int, shown: str | Callable[[], str]) -> None:
        """Search one open regular file. Sets ``truncation`` when a bound is reached."""
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                return
            if info.st_size > self.max_file_bytes:
                self.skipped_large += 1
                return
            data = os.read(fd, info.st_size + 1) if info.st_size else os.read(fd, 65536)
            if len(data) > self.max_file_bytes:
                self.skipped_large += 1
                return
        except OSError:
            return
        self.searched += 1
        if data.find(b"\0", 0, BINARY_PROBE_BYTES) >= 0:
            self.skipped_binary += 1
            return
        text = data.decode("utf-8", "replace")
        self.search_text(text, shown)

    def _emit(self, shown: str, number: int, line: str, is_match: bool) -> bool:
        cut = len(line) > self.max_line_chars
        if cut:
            line = line[: self.max_line_chars]
        size = (len(line) if line.isascii() else len(line.encode("utf-8", "replace"))) + 1
        if self.out_bytes + size > self.max_bytes:
            self.truncation = "max_bytes"
            return False
        self.out_bytes += size
        self.lines.append(GrepLine(shown, number, line, is_match, cut))
        return True

    def _matches_only(self, text: str, shown: str, found: re.Match[str] | None) -> None:
        """The ``context == 0`` path of :meth:`search_text`, kept tight: it dominates
        searches with many hits."""
        regex = self.regex
        lines = self.lines
        limit = self.max_line_chars
        length = len(text)
        line_number = 1
        counted_to = 0
        while found is not None:
            if self.matches >= self.max_matches:
                self.truncation = "max_matches"
                return
            position = found.start()
            start = text.rfind("\n", 0, position) + 1
            end = text.find("\n", position)
            if end < 0:
                end = length
            line_number += text.count("\n", counted_to, start)
            counted_to = start
            line = text[start:end]
            cut = len(line) > limit
            if cut:
                line = line[:limit]
            size = (len(line) if line.isascii() else len(line.encode("utf-8", "replace"))) + 1
            if self.out_bytes + size > self.max_bytes:
                self.truncation = "max_bytes"
                return
            self.out_bytes += size
            lines.append(GrepLine(shown, line_number, line, True, cut))
            self.matches += 1
            if end >= length:
                return
            found = regex.search(text, end + 1)

    def search_text(self, text: str, shown: str | Callable[[], str]) -> None:
        """Report matching lines of ``text`` (one per line) with merged context."""
        regex = self.regex
        found = regex.search(text)
        if found is None:
            return
        if not isinstance(shown, str):
            shown = shown()
        self.files_with_matches += 1
        if not self.context:
            self._matches_only(text, shown, found)
            return
        emit = self._emit
        context = self.context
        length = len(text)
        line_number = 1  # number of the line starting at counted_to
        counted_to = 0
        last_emitted = 0  # highest line number emitted for this file
        last_end = 0  # index of the newline ending that line (or ``length``)
        owed = 0  # after-context lines still to emit for the previous match

        def flush_after(before_line: int) -> bool:
            nonlocal last_emitted, last_end, owed
            while owed > 0 and last_emitted + 1 < before_line and last_end < length - 1:
                begin = last_end + 1
                stop = text.find("\n", begin)
                if stop < 0:
                    stop = length
                if not emit(shown, last_emitted + 1, text[begin:stop], False):
                    return False
                last_emitted += 1
                last_end = stop
                owed -= 1
            return True

        while found is not None:
            if self.matches >= self.max_matches:
                self.truncation = "max_matches"
                return
            position = found.start()
            start = text.rfind("\n", 0, position) + 1
            end = text.find("\n", position)
            if end < 0:
                end = length
            line_number += text.count("\n", counted_to, start)
            counted_to = start
            if context:
                if not flush_after(line_number):
                    return
                first = max(last_emitted + 1, line_number - context)
                before: list[str] = []
                cursor = start
                for _ in range(line_number - first):
                    previous = text.rfind("\n", 0, cursor - 1) + 1
                    before.append(text[previous : cursor - 1])
                    cursor = previous
                for offset, line in enumerate(reversed(before)):
                    if not emit(shown, first + offset, line, False):
                        return
            if not emit(shown, line_number, text[start:end], True):
                return
            self.matches += 1
            last_emitted = line_number
            last_end = end
            owed = context
            if end >= length:
                break
            found = regex.search(text, end + 1)
        if context:
            flush_after(1 << 62)


def compile_search(pattern: str, *, literal: bool, case_insensitive: bool) -> re.Pattern[str]:
    """Compile a grep pattern (``MULTILINE``: ``^``/``$`` match at line boundaries)."""
    if not pattern:
        raise PatternError(pattern, "empty search pattern")
    if len(pattern) > MAX_PATTERN_CHARS:
        raise LimitExceeded("pattern_chars", MAX_PATTERN_CHARS, len(pattern))
    flags = re.MULTILINE | (re.IGNORECASE if case_insensitive else 0)
    try:
        return re.compile(re.escape(pattern) if literal else pattern, flags)
    except re.error as error:
        raise PatternError(pattern, f"invalid regular expression: {error}") from error


def grep(
    ws: Workspace,
    pattern: str,
    path: str = ".",
    *,
    literal: bool = False,
    case_insensitive: bool = False,
    glob: str | None = None,
    context: int = 0,
    max_matches: int = DEFAULT_GREP_MATCHES,
    max_bytes: int = DEFAULT_GREP_BYTES,
    max_line_chars: int = DEFAULT_LINE_CHARS,
    max_file_bytes: int = DEFAULT_GREP_FILE_BYTES,
    max_visited: int = DEFAULT_MAX_VISITED,
    include_secrets: bool = False,
    skip_dirs: Collection[str] = DEFAULT_SKIP_DIRS,
    allow_outside: bool = False,
) -> GrepResult:
    """Search files below ``path`` (or the one file ``path``) for a regex or literal.

    One match is reported per line, with ``context`` lines around it (groups merge when
    they overlap). Files with a NUL byte in their first 8 KiB are skipped as binary; other
    bytes that are not UTF-8 show as U+FFFD. ``glob`` filters files by their path relative
    to ``path``. Output is bounded by ``max_matches`` lines and ``max_bytes`` bytes.
    """
    _check("context", context, MAX_CONTEXT, minimum=0)
    _check("max_matches", max_matches, 100_000)
    _check("max_bytes", max_bytes, 64 * 1024 * 1024)
    _check("max_line_chars", max_line_chars, 1_000_000)
    _check("max_file_bytes", max_file_bytes, 1024 * 1024 * 1024)
    _check("max_visited", max_visited, 10_000_000)
    regex = compile_search(pattern, literal=literal, case_insensitive=case_insensitive)
    file_glob = compile_glob(glob) if glob is not None else None
    target = ws.target(path, allow_outside=allow_outside)
    ws.check_secret(target, include_secrets)
    state = _GrepState(regex, context, max_matches, max_bytes, max_line_chars, max_file_bytes)
    stats = _WalkStats()
    opened = _open_base(ws, target)
    if isinstance(opened, tuple):
        parent_fd, name = opened
        try:
            fd, _info = ws.open_file_at(parent_fd, name, target.display)
        finally:
            os.close(parent_fd)
        try:
            state.search_fd(fd, target.display)
        finally:
            os.close(fd)
    else:
        prefix = target.parts
        try:
            for dir_fd, name, rel in _walk_files(
                opened,
                target,
                include_secrets=include_secrets,
                skip_dirs=skip_dirs,
                max_visited=max_visited,
                max_depth=file_glob.max_depth if file_glob is not None else None,
                stats=stats,
            ):
                if file_glob is not None and not file_glob.regex.match("/".join(rel)):
                    continue
                try:
                    fd = os.open(name, FILE_FLAGS, dir_fd=dir_fd)
                except OSError:
                    stats.skipped_links += 1  # swapped for a link or removed mid-walk
                    continue
                try:
                    state.search_fd(fd, functools.partial(_display, target.outside, prefix, rel))
                finally:
                    os.close(fd)
                if state.truncation is not None:
                    break
        finally:
            os.close(opened)
    truncation = state.truncation
    if truncation is None and stats.exhausted:
        truncation = "max_visited"
    if truncation is None and stats.too_deep:
        truncation = "max_depth"
    return GrepResult(
        tuple(state.lines),
        state.matches,
        state.files_with_matches,
        state.searched,
        truncation is not None,
        truncation,
        skipped_binary=state.skipped_binary,
        skipped_large=state.skipped_large,
        skipped_secrets=stats.skipped_secrets,
        skipped_links=stats.skipped_links,
    )
