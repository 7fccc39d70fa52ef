"""Recursive search: ``find_files`` (glob) and ``grep`` (regex or literal).

The walk holds one directory descriptor per level and opens each child directory with
``openat(parent, name, O_NOFOLLOW | O_DIRECTORY)``: symlinks are never followed, and an
entry swapped for a link mid-walk fails to open and is skipped. Likely-secret entries are
pruned unless the call was approved (``include_secrets``). Every result is bounded and says
when, and why, it was cut.
"""

from __future__ import annotations

import bisect
import errno
import itertools
import os
import stat
import threading
from collections.abc import Callable, Collection, Generator, Iterator
from typing import Any, NamedTuple, Protocol

import attrs
import re2

from emelex._errors import LimitExceeded
from emelex.tools.workspace._errors import (
    InvalidArgument,
    NotRegularFile,
    PatternError,
    SymlinkRefused,
    check_abort,
    map_os_error,
)
from emelex.tools.workspace._read import BINARY_PROBE_BYTES
from emelex.tools.workspace._root import DIR_FLAGS, FILE_FLAGS, Target, Workspace, describe_mode
from emelex.tools.workspace._secrets import listing_prefilter, secret_names_test
from emelex.tools.workspace._sibling import is_sibling

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
#
# Globs and grep patterns come from the model, so both run on RE2 (linear time in the
# text, whatever the pattern): Python's ``re`` backtracks, and ``(a+)+$`` over 27 ``a``s
# or ``*a*a*a*a*b`` over a 200-character name held the whole process for seconds.


def _literal(char: str) -> str:
    """One character as an RE2 literal (hex escapes are valid for every character)."""
    return char if char.isalnum() or ord(char) > 0x7F else f"\\x{{{ord(char):x}}}"


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
                out.append(_literal(char))
            else:
                body = text[i + 1 : end]
                negate = body.startswith("!")
                if negate:
                    body = body[1:]
                # keep "-" for ranges; escape everything a class treats specially
                chars = "".join(c if c == "-" else _literal(c) for c in body)
                out.append("[" + ("^" if negate else "") + chars + "]")
                i = end
        elif char == "{":
            end = text.find("}", i)
            if end < 0:
                out.append(_literal(char))
            else:
                options = text[i + 1 : end].split(",")
                out.append(
                    "(?:" + "|".join(_translate_component(o, pattern) for o in options) + ")"
                )
                i = end
        else:
            out.append(_literal(char))
        i += 1
    return "".join(out)


class Program(Protocol):
    """What a search needs of a compiled pattern (byte offsets in, byte offsets out)."""

    def search(self, data: bytes, start: int, stop: int) -> int | None: ...


_PLAIN_CHARS = frozenset(
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 _-,:/=<>'\"@#%&~!;"
)
_ESCAPED_PUNCTUATION = frozenset("()[]{}.*+?|\\^$/-")


def required_prefix(pattern: str) -> bytes:
    """Bytes every match of the RE2 ``pattern`` starts with (case-sensitive), or ``b""``.

    Deliberately conservative: only a leading run of plain ASCII characters and escaped
    punctuation counts, a quantifier takes back the character it applies to, and any
    ``|`` in the pattern (an alternative may start otherwise) gives no prefix.
    """
    chars, _whole = _leading_literal(pattern)
    return "".join(chars).encode("ascii")


def pure_literal(pattern: str) -> str | None:
    """The text the RE2 ``pattern`` matches when it is nothing but a literal (plain ASCII
    characters and escaped punctuation: ``RARE_NEEDLE``, ``foo\\.bar``), else ``None``.
    Such a pattern is searched with ``bytes.find``, with no regex engine at all."""
    chars, whole = _leading_literal(pattern)
    return "".join(chars) if whole and chars else None


def _leading_literal(pattern: str) -> tuple[list[str], bool]:
    """The literal characters every match of ``pattern`` starts with, and whether they
    are the whole pattern."""
    if "|" in pattern:
        return [], False
    chars: list[str] = []
    index = 0
    while index < len(pattern):
        char = pattern[index]
        if char in _PLAIN_CHARS:
            chars.append(char)
            index += 1
        elif char == "\\" and pattern[index + 1 : index + 2] in _ESCAPED_PUNCTUATION:
            chars.append(pattern[index + 1])
            index += 2
        else:
            break
    if index < len(pattern) and pattern[index] in "*+?{" and chars:
        chars.pop()
    return chars, index == len(pattern)


class Re2Program:
    """A compiled RE2 pattern, matched on bytes through the binding's program directly.

    The ``re2`` module's Python-level match objects cost 7-30 us per call (offsets are
    mapped back to characters for ``str``); a search here is one call into C (about
    3 us) that returns byte offsets, which is what the walk and grep need. ``prefix``,
    when not empty, is a literal every match starts with: a search first skips to it
    with ``bytes.find`` (a file without it costs no RE2 call at all).
    """

    __slots__ = ("_program", "match", "prefix")

    def __init__(self, pattern: str, options: re2.Options, *, prefix: bytes = b"") -> None:
        self._program = re2.compile(pattern, options)._regexp  # raises re2.error
        self.prefix = prefix
        #: The binding's ``Match(anchor, data, start, stop)``: grep's per-match loop calls
        #: it directly (one C call, no Python frame).
        self.match = self._program.Match

    def search(self, data: bytes, start: int, stop: int) -> int | None:
        """Where the first match inside ``data[start:stop]`` starts (anchors see all of
        ``data``), or ``None``."""
        begin = self._program.Match(_UNANCHORED, data, start, stop)[0][0]
        return None if begin < 0 else int(begin)

    def fullmatch(self, data: bytes) -> bool:
        return bool(self._program.Match(_ANCHOR_BOTH, data, 0, len(data))[0][0] >= 0)


class LiteralProgram:
    """A case-sensitive literal: ``bytes.find`` is linear and needs no regex engine."""

    __slots__ = ("_needle", "needle")
    prefix = b""  # the search is a find already

    def __init__(self, text: str) -> None:
        self._needle = self.needle = text.encode("utf-8")

    def search(self, data: bytes, start: int, stop: int) -> int | None:
        found = data.find(self._needle, start, stop)
        return None if found < 0 else found

    def fullmatch(self, data: bytes) -> bool:
        return data == self._needle


_UNANCHORED = re2._re2.RE2.Anchor.UNANCHORED
_ANCHOR_BOTH = re2._re2.RE2.Anchor.ANCHOR_BOTH


def _re2_options(*, case_insensitive: bool = False) -> re2.Options:
    options = re2.Options()
    options.log_errors = False  # errors become PatternError; RE2 must not print them
    options.max_mem = _RE2_MAX_MEM
    options.case_sensitive = not case_insensitive
    return options


@attrs.frozen
class Glob:
    """A compiled glob: ``regex`` (an RE2 pattern) fully matches ``/``-joined paths
    relative to the search base; :meth:`matches` tests one.

    ``*``, ``?`` and ``[...]`` stay within one component, ``**`` spans any number of
    components (including none), ``{a,b}`` is an alternation. ``max_depth`` is the number
    of components a match can have (``None`` with ``**``), so a walk can stop early.
    Matching takes time linear in the path, whatever the glob.
    """

    pattern: str
    regex: Re2Program
    max_depth: int | None
    name_suffixes: tuple[str, ...] | None = None
    """Set for a glob shaped ``**/*S`` (or ``**/*.{a,b}``): a path matches exactly when
    its last component ends with one of these (no regex call at all)."""

    def matches_file(self, prefix: str, name: str) -> bool:
        """Whether the file ``prefix + name`` (``prefix`` its ``/``-ended directory,
        relative) matches; :meth:`matches` with a fast path for ``**/*.ext``."""
        if self.name_suffixes is not None:
            return name.endswith(self.name_suffixes)
        return self.matches(prefix + name)

    def filter(self, prefix: str, names: list[str]) -> list[str]:
        """The files of ``names`` (in the ``/``-ended directory ``prefix``, relative)
        that match, in order: :meth:`matches_file` for a batch."""
        suffixes = self.name_suffixes
        if suffixes is not None:
            return [name for name in names if name.endswith(suffixes)]
        matches = self.matches
        return [name for name in names if matches(prefix + name)]

    def matches(self, path: str) -> bool:
        """Whether ``path`` (``/``-joined, relative) matches the whole glob."""
        if path.isascii():
            return self.regex.fullmatch(path.encode("ascii"))
        # A byte that is not UTF-8 (surrogate-escaped by os) becomes U+FFFD, so wildcards
        # match it as one character, as they match any other.
        text = path.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
        return self.regex.fullmatch(text.encode("utf-8"))


def compile_glob(pattern: str) -> Glob:
    """Compile a glob (``**/*.py``, ``src/*.{ts,tsx}``); raise ``PatternError`` if invalid."""
    return compile_globs((pattern,))


def compile_globs(patterns: tuple[str, ...]) -> Glob:
    """One :class:`Glob` matching a path when any of ``patterns`` does (one RE2 call
    however many patterns); raise ``PatternError`` naming the first invalid one."""
    if not patterns:
        raise PatternError("", "no glob given")
    texts = [_glob_regex(pattern) for pattern in patterns]
    pattern = "|".join(patterns)
    source = texts[0] if len(texts) == 1 else "|".join(f"(?:{text})" for text in texts)
    try:
        regex = Re2Program(source, _re2_options())
    except re2.error as error:
        raise PatternError(pattern, "invalid glob: " + _describe_re2_error(error)) from error
    except UnicodeEncodeError as error:  # a lone surrogate (JSON can carry one)
        raise PatternError(pattern, "the glob is not valid Unicode text") from error
    depths = [_glob_depth(p) for p in patterns]
    depth = None if None in depths else max(d for d in depths if d is not None)
    suffixes = _name_suffixes(patterns[0]) if len(patterns) == 1 else None
    return Glob(pattern, regex, depth, suffixes)


_GLOB_SPECIAL = frozenset("*?[]{}\\/")


def _name_suffixes(pattern: str) -> tuple[str, ...] | None:
    """The literal endings of a glob shaped ``**/*S`` or ``**/*P{a,b}S`` (the most common
    globs by far), or ``None`` for any other shape. Such a glob matches a relative path
    exactly when its last component ends with one of them: ``**/`` takes any
    directories and ``*`` any start of the name."""
    if not pattern.startswith("**/*"):
        return None
    tail = pattern[4:]
    head, brace, rest = tail.partition("{")
    options, close, end = rest.partition("}")
    if brace and not close:
        return None
    if _GLOB_SPECIAL.intersection(head + end) or _GLOB_SPECIAL.intersection(options):
        return None
    if not brace:
        return (tail,)
    return tuple(head + option + end for option in options.split(","))


def _glob_depth(pattern: str) -> int | None:
    parts = pattern.split("/")
    return None if "**" in parts else len([p for p in parts if p not in ("", ".")])


def _glob_regex(pattern: str) -> str:
    """The RE2 source of one glob (checked for size and form, not compiled)."""
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
            pieces.append("(?s:.*)" if last else "(?:[^/]+/)*")
        elif part in ("", "."):
            continue
        else:
            pieces.append(_translate_component(part, pattern) + ("" if last else "/"))
    return "".join(pieces)


# -- the walk -------------------------------------------------------------------------


@attrs.define
class _WalkStats:
    visited: int = 0
    skipped_secrets: int = 0
    skipped_links: int = 0
    skipped_special: int = 0
    skipped_hidden: int = 0
    errors: int = 0
    exhausted: bool = False  # max_visited was reached
    too_deep: bool = False


_CHUNK = 128
"""Most file names one batch of a walk holds: ``abort`` is checked between batches."""


class _Level:
    """One open directory of a walk: its regular files (sorted names) and its other
    entries (sorted ``(name, kind)``), with how far each has been visited."""

    __slots__ = (
        "fd",
        "files",
        "next_file",
        "next_other",
        "others",
        "parents",
        "prefix",
        "rel",
        "secrets",
        "siblings",
    )

    def __init__(
        self,
        fd: int,
        rel: tuple[str, ...],
        parents: tuple[str, ...],
        files: list[str],
        others: list[tuple[str, int]],
        secrets: frozenset[str],
        siblings: bool,
    ) -> None:
        self.fd = fd
        self.rel = rel
        self.parents = parents
        self.prefix = "/".join(rel) + "/" if rel else ""
        self.files = files
        self.others = others
        self.secrets = secrets
        #: whether some file name could be a temporary or recovery sibling
        self.siblings = siblings
        self.next_file = 0
        self.next_other = 0


def _list(fd: int, budget: int) -> tuple[list[str], list[tuple[str, int]]]:
    """A directory's regular files (names, sorted) and other entries (sorted ``(name,
    kind)``), at most ``budget`` entries in all. The kinds come from the listing
    (``d_type``): no ``stat`` per entry unless the file system does not say."""
    with os.scandir(fd) as scan:
        entries = list(itertools.islice(scan, budget))
    try:
        files = [entry.name for entry in entries if entry.is_file(follow_symlinks=False)]
    except OSError:  # d_type unknown and the entry vanished: sort it out one by one
        files = [entry.name for entry in entries if _kind(entry) == _FILE]
    files.sort()
    if len(files) == len(entries):
        return files, []
    regular = set(files)
    others = sorted((e.name, _kind(e)) for e in entries if e.name not in regular)
    return files, others


def _walk_batches(
    base_fd: int,
    base: Target,
    *,
    include_secrets: bool,
    skip_dirs: Collection[str],
    max_visited: int,
    max_depth: int | None,
    stats: _WalkStats,
    leftovers: bool = False,
    abort: threading.Event | None = None,
    hidden: Callable[[tuple[str, ...]], bool] | None = None,
) -> Generator[tuple[int, list[str], tuple[str, ...], str], None, None]:
    """Yield ``(dir_fd, names, rel_dir, prefix)``: batches of regular files below
    ``base_fd``, at most :data:`_CHUNK` names of one directory each.

    ``dir_fd`` stays open only until the next batch is requested. ``rel_dir`` is the
    directory relative to the base (components) and ``prefix`` the same joined with
    ``/`` and ending in ``/`` (empty at the base): a file's relative path is ``prefix +
    name``, built by the caller only when it needs it. Entries are visited in name
    order, depth first. Temporary and recovery siblings of interrupted writes are
    skipped, or (``leftovers``) the only files yielded. ``abort`` is checked before
    every batch and every directory. Entries ``hidden`` refuses (given their
    root-relative parts, judged on the last component: a hidden directory is never
    entered) are skipped.

    Per directory, the walk lists entries once, splits regular files from the rest by
    ``d_type`` and checks all names for secrets in bulk; the runs of files between two
    subdirectories then go to the caller as lists, with no Python work per name unless
    a name needs it (a possible secret, sibling or hidden entry).

    Memory does not grow with the entries visited: each open level keeps its unvisited
    names (and the kinds of the few entries that are not regular files) only, and a
    level reads at most as many entries as the ``max_visited`` budget has left (plus
    one, to tell an exhausted walk): a huge directory under a small budget is never
    read whole. (When the budget cuts a directory short, the entries seen are the first
    ones the directory lists, in name order; the result says it was cut.)
    """
    limit = MAX_DEPTH if max_depth is None else min(max_depth, MAX_DEPTH)
    secrets_of = None if include_secrets else secret_names_test()
    special = listing_prefilter()
    stack: list[_Level] = []

    def push(fd: int, rel: tuple[str, ...]) -> None:
        """List the directory open at ``fd`` onto the stack (which then owns ``fd``)."""
        try:
            check_abort(abort, base.display)
            try:
                files, others = _list(fd, max_visited - stats.visited + 1)
            except OSError:
                stats.errors += 1
                os.close(fd)
                return
            parents = (*base.absolute_parts, *rel)
            secrets: frozenset[str] = frozenset()
            siblings = False
            names = files + [name for name, _kind in others] if others else files
            if special(names):  # rare: some name could be a secret or a sibling
                if secrets_of is not None:
                    secrets = secrets_of(parents, names)
                siblings = ".emelex-" in "\n".join(files)
            stack.append(_Level(fd, rel, parents, files, others, secrets, siblings))
        except BaseException:  # an abort (or worse) before the stack owns ``fd``
            os.close(fd)
            raise

    def kept(level: _Level, names: list[str]) -> list[str]:
        """``names`` without secret, hidden and sibling (or, for ``leftovers``, only
        sibling) files, counting what was skipped."""
        if level.secrets:
            secret = level.secrets
            before = len(names)
            names = [name for name in names if name not in secret]
            stats.skipped_secrets += before - len(names)
        if hidden is not None:
            base_parts = (*base.parts, *level.rel)
            before = len(names)
            names = [name for name in names if not hidden((*base_parts, name))]
            stats.skipped_hidden += before - len(names)
        if leftovers:
            return [name for name in names if ".emelex-" in name and is_sibling(name)]
        if level.siblings:
            return [name for name in names if not (".emelex-" in name and is_sibling(name))]
        return names

    push(os.dup(base_fd), ())
    try:
        while stack:
            level = stack[-1]
            files = level.files
            others = level.others
            entered = False
            while not entered:
                # the files up to the next other entry (subdirectory, link, ...) in name order
                if level.next_other < len(others):
                    name, kind = others[level.next_other]
                    end = bisect.bisect_left(files, name, level.next_file)
                else:
                    name, kind = "", _FILE
                    end = len(files)
                while level.next_file < end:
                    room = max_visited - stats.visited
                    if room <= 0:
                        stats.exhausted = True
                        return
                    check_abort(abort, base.display)
                    start = level.next_file
                    stop = min(end, start + _CHUNK, start + room)
                    level.next_file = stop
                    stats.visited += stop - start
                    names = files[start:stop]
                    if level.secrets or level.siblings or hidden is not None or leftovers:
                        names = kept(level, names)
                    if names:
                        yield level.fd, names, level.rel, level.prefix
                if level.next_other >= len(others):
                    stack.pop()
                    os.close(level.fd)
                    break
                if stats.visited >= max_visited:
                    stats.exhausted = True
                    return
                level.next_other += 1
                stats.visited += 1
                if name in level.secrets:
                    stats.skipped_secrets += 1
                    continue
                if hidden is not None and hidden((*base.parts, *level.rel, name)):
                    stats.skipped_hidden += 1
                    continue
                if kind == _DIR:
                    if name in skip_dirs:
                        continue
                    if len(level.rel) + 1 >= limit:
                        if max_depth is None:
                            stats.too_deep = True
                        continue
                    try:
                        child = os.open(name, DIR_FLAGS, dir_fd=level.fd)
                    except OSError as error:
                        if error.errno in (errno.ELOOP, errno.ENOTDIR):
                            stats.skipped_links += 1  # swapped for a link or a file mid-walk
                        else:
                            stats.errors += 1
                        continue
                    push(child, (*level.rel, name))
                    entered = True  # depth first: the child's entries come next
                elif kind == _LINK:
                    stats.skipped_links += 1
                elif kind == _SPECIAL:
                    stats.skipped_special += 1
                else:
                    stats.errors += 1
    finally:
        for level in stack:
            os.close(level.fd)


def _walk_files(
    base_fd: int,
    base: Target,
    *,
    include_secrets: bool,
    skip_dirs: Collection[str],
    max_visited: int,
    max_depth: int | None,
    stats: _WalkStats,
    leftovers: bool = False,
    abort: threading.Event | None = None,
    hidden: Callable[[tuple[str, ...]], bool] | None = None,
) -> Iterator[tuple[int, str, tuple[str, ...], str]]:
    """:func:`_walk_batches` one file at a time: ``(dir_fd, name, rel_dir, prefix)``."""
    for fd, names, rel, prefix in _walk_batches(
        base_fd,
        base,
        include_secrets=include_secrets,
        skip_dirs=skip_dirs,
        max_visited=max_visited,
        max_depth=max_depth,
        stats=stats,
        leftovers=leftovers,
        abort=abort,
        hidden=hidden,
    ):
        for name in names:
            yield fd, name, rel, prefix


_FILE, _DIR, _LINK, _SPECIAL, _ERROR = range(5)


def _kind(entry: os.DirEntry[str]) -> int:
    """What an entry is, from the directory listing (no ``stat`` unless the file system
    does not say), never following a link."""
    try:
        if entry.is_file(follow_symlinks=False):
            return _FILE
        if entry.is_dir(follow_symlinks=False):
            return _DIR
        if entry.is_symlink():
            return _LINK
    except OSError:
        return _ERROR
    return _SPECIAL


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


def _hidden_test(ws: Workspace, target: Target) -> Callable[[tuple[str, ...]], bool] | None:
    """What a walk below ``target`` asks of each entry, or ``None`` when nothing there
    can be hidden (no patterns, or an approved walk outside the root)."""
    if ws.hidden is None or not ws.hidden or target.outside:
        return None
    return ws.hidden.hides_last


def _display_prefix(base: Target) -> str:
    """What a walk's relative paths are prefixed with to show them (``base.display``
    joined with ``/``; nothing at the root)."""
    shown = base.display
    if shown == ".":
        return ""
    return shown if shown.endswith("/") else shown + "/"


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
    skipped_hidden: int = 0


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
    abort: threading.Event | None = None,
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
        hit = glob.matches(opened[1])
        return FindResult((target.display,) if hit else (), False, None, 1, 0, 0)
    stats = _WalkStats()
    matches: list[str] = []
    truncation: str | None = None
    suffixes = glob.name_suffixes
    matches_path = glob.matches
    try:
        shown = _display_prefix(target)
        for _fd, names, _rel, prefix in _walk_batches(
            opened,
            target,
            include_secrets=include_secrets,
            skip_dirs=skip_dirs,
            max_visited=max_visited,
            max_depth=glob.max_depth,
            stats=stats,
            abort=abort,
            hidden=_hidden_test(ws, target),
        ):
            head = shown + prefix
            if suffixes is not None:
                hits = [head + name for name in names if name.endswith(suffixes)]
            else:
                hits = [head + name for name in names if matches_path(prefix + name)]
            if hits:
                room = max_results - len(matches)
                if len(hits) > room:
                    matches.extend(hits[:room])
                    truncation = "max_results"
                    break
                matches.extend(hits)
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
        stats.skipped_hidden,
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
    skipped_hidden: int = 0


_WINDOW = 16 * 1024
"""Bytes RE2 scans between two checks of the abort flag. Small on purpose: RE2 builds its
DFA lazily, and a hostile pattern (``a[ab]{20}c``) spent 175 ms building states for its
first 64 KiB; 16 KiB bounds one call to tens of ms whatever the pattern."""
_FIRST_READ = 64 * 1024
"""Bytes of a file grep reads before asking its size (most source files fit)."""
_RE2_MAX_MEM = 32 * 1024 * 1024
"""Memory RE2 may use for one compiled pattern; larger patterns are refused."""
_UNSUPPORTED_HINT = (
    "grep uses RE2 syntax: like Python's re, but without backreferences such as \\1 or "
    "lookaround such as (?=...), (?!...), (?<=...), (?<!...), and with repetition counts "
    "up to 1000"
)


@attrs.define
class _GrepState:
    regex: Program
    context: int
    max_matches: int
    max_bytes: int
    max_line_chars: int
    max_file_bytes: int
    abort: threading.Event | None = None
    lines: list[GrepLine] = attrs.Factory(list)
    matches: int = 0
    files_with_matches: int = 0
    searched: int = 0
    out_bytes: int = 0
    skipped_binary: int = 0
    skipped_large: int = 0
    truncation: str | None = None
    _first_read: int = attrs.field(init=False)
    #: ``(needle, match, prefix)`` of ``regex``: what the per-match loop calls
    _program: tuple[bytes | None, Any, bytes] = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self._first_read = min(_FIRST_READ, self.max_file_bytes + 1)
        regex = self.regex
        self._program = (
            getattr(regex, "needle", None),
            getattr(regex, "match", None),
            getattr(regex, "prefix", b""),
        )

    def search_fd(self, fd: int, shown: str | Callable[[], str]) -> None:
        """Search one open file the walk listed as regular. Sets ``truncation`` when a
        bound is reached."""
        data = self.read(fd)
        if data is None:
            return
        self.searched += 1
        if data.find(b"\0", 0, BINARY_PROBE_BYTES) >= 0:
            self.skipped_binary += 1
            return
        self.search_data(data, shown)

    def read(self, fd: int, data: bytes | None = None) -> bytes | None:
        """The contents of ``fd``, or ``None`` when it is too large or unreadable.

        One ``read`` of :data:`_FIRST_READ` bytes takes a whole small file (nearly
        every file of a source tree) with no ``fstat``; only a file that fills it is
        checked (still regular? within ``max_file_bytes``?) and read to its end. The walk
        saw the entry as a regular file in its listing and the file was opened with
        ``O_NOFOLLOW | O_NONBLOCK``: an entry swapped for a FIFO or a device in between
        neither blocks the search nor yields more than one bounded read.
        """
        first = self._first_read
        try:
            if data is None:  # else the caller read the first bytes (all ``first`` of them)
                data = os.read(fd, first)
            if len(data) < first:
                return data
            if first > self.max_file_bytes:
                self.skipped_large += 1
                return None
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                return None
            if info.st_size > self.max_file_bytes:
                self.skipped_large += 1
                return None
            if info.st_size >= first:
                data += os.read(fd, info.st_size + 1 - first)
        except OSError:
            return None
        if len(data) > self.max_file_bytes:
            self.skipped_large += 1
            return None
        return data

    def _find(self, data: bytes, position: int) -> int | None:
        """Where the first match at or after ``position`` starts, or ``None``.

        RE2 scans one window of at most about ``2 * _WINDOW`` bytes per call, ending at a
        line end when there is one, and ``abort`` is checked between windows: a search
        over a large file stops within milliseconds of being cancelled. (A match cannot
        span two windows; windows end at line ends whenever a line is shorter than
        ``_WINDOW``.) Anchors see the whole text, so ``^``/``$`` are exact at the edges.
        """
        length = len(data)
        search = self.regex.search
        abort = self.abort
        prefix = getattr(self.regex, "prefix", b"")
        if prefix:
            # Every match starts with the prefix: the first one starts at or after it.
            candidate = data.find(prefix, position)
            if candidate < 0:
                return None
            position = candidate
        while True:
            if abort is not None and abort.is_set():
                check_abort(abort, "grep")
            stop = position + _WINDOW
            if stop >= length:
                return search(data, position, length)  # the common case: a small file
            newline = data.find(b"\n", stop, stop + _WINDOW)
            stop = newline + 1 if newline >= 0 else stop
            found = search(data, position, stop)
            if found is not None:
                return found
            position = stop

    def _text(self, data: bytes, start: int, end: int) -> tuple[str, bool]:
        """The line ``data[start:end]`` decoded, cut to ``max_line_chars`` characters."""
        limit = self.max_line_chars
        stop = min(end, start + 4 * limit + 4)  # a character takes at most 4 bytes
        line = data[start:stop].decode("utf-8", "replace")
        cut = len(line) > limit or stop < end
        return (line[:limit] if cut else line), cut

    def _emit(
        self, shown: str, number: int, data: bytes, start: int, end: int, match: bool
    ) -> bool:
        line, cut = self._text(data, start, end)
        size = (len(line) if line.isascii() else len(line.encode("utf-8", "replace"))) + 1
        if self.out_bytes + size > self.max_bytes:
            self.truncation = "max_bytes"
            return False
        self.out_bytes += size
        self.lines.append(GrepLine(shown, number, line, match, cut))
        return True

    def _matches_only(self, data: bytes, shown: str, position: int | None) -> None:
        """The ``context == 0`` path of :meth:`search_data`, kept tight: it dominates
        searches with many hits. Per match: the line's ends (``rfind``/``find``), its
        number (``count`` of the newlines since the previous match), one decode, and for
        a regex one RE2 call to find the next match (none when its literal prefix is
        absent); the counters live in locals until the file is done."""
        self.files_with_matches += 1
        append = self.lines.append
        limit = self.max_line_chars
        length = len(data)
        small = length <= _WINDOW
        needle, match, prefix = self._program
        unanchored = _UNANCHORED
        new = tuple.__new__
        find = data.find
        rfind = data.rfind
        count = data.count
        matches = self.matches
        max_matches = self.max_matches
        out_bytes = self.out_bytes
        max_bytes = self.max_bytes
        line_number = 1
        counted_to = 0
        try:
            while position is not None:
                if matches >= max_matches:
                    self.truncation = "max_matches"
                    return
                start = rfind(b"\n", 0, position) + 1
                end = find(b"\n", position)
                if end < 0:
                    end = length
                line_number += count(b"\n", counted_to, start)
                counted_to = start
                if end - start <= limit:  # never cut: a character takes at least a byte
                    line = data[start:end].decode("utf-8", "replace")
                    cut = False
                else:
                    line, cut = self._text(data, start, end)
                size = (len(line) if line.isascii() else len(line.encode("utf-8", "replace"))) + 1
                if out_bytes + size > max_bytes:
                    self.truncation = "max_bytes"
                    return
                out_bytes += size
                # tuple.__new__ skips the named tuple's Python-level __new__ (0.2 us, not 1.3)
                append(new(GrepLine, (shown, line_number, line, True, cut)))
                matches += 1
                if end >= length:
                    return
                # _find, inlined for a file within one window (the common case)
                if not small:
                    position = self._find(data, end + 1)
                elif needle is not None:
                    found = find(needle, end + 1)
                    position = None if found < 0 else found
                elif match is not None:
                    begin = find(prefix, end + 1) if prefix else end + 1
                    if begin < 0:
                        return
                    found = match(unanchored, data, begin, length)[0][0]
                    position = None if found < 0 else found
                else:
                    position = self._find(data, end + 1)
        finally:
            self.matches = matches
            self.out_bytes = out_bytes

    def search_data(self, data: bytes, shown: str | Callable[[], str]) -> None:
        """Report matching lines of ``data`` (one per line) with merged context."""
        position = self._find(data, 0)
        if position is None:
            return
        self.report(data, shown() if not isinstance(shown, str) else shown, position)

    def report(self, data: bytes, shown: str, position: int | None) -> None:
        """Report the matching lines of ``data`` from its first match at ``position``."""
        if not self.context:
            self._matches_only(data, shown, position)
            return
        self.files_with_matches += 1
        emit = self._emit
        context = self.context
        length = len(data)
        line_number = 1  # number of the line starting at counted_to
        counted_to = 0
        last_emitted = 0  # highest line number emitted for this file
        last_end = 0  # index of the newline ending that line (or ``length``)
        owed = 0  # after-context lines still to emit for the previous match

        def flush_after(before_line: int) -> bool:
            nonlocal last_emitted, last_end, owed
            while owed > 0 and last_emitted + 1 < before_line and last_end < length - 1:
                begin = last_end + 1
                stop = data.find(b"\n", begin)
                if stop < 0:
                    stop = length
                if not emit(shown, last_emitted + 1, data, begin, stop, False):
                    return False
                last_emitted += 1
                last_end = stop
                owed -= 1
            return True

        while position is not None:
            if self.matches >= self.max_matches:
                self.truncation = "max_matches"
                return
            start = data.rfind(b"\n", 0, position) + 1
            end = data.find(b"\n", position)
            if end < 0:
                end = length
            line_number += data.count(b"\n", counted_to, start)
            counted_to = start
            if context:
                if not flush_after(line_number):
                    return
                first = max(last_emitted + 1, line_number - context)
                before: list[tuple[int, int]] = []
                cursor = start
                for _ in range(line_number - first):
                    previous = data.rfind(b"\n", 0, cursor - 1) + 1
                    before.append((previous, cursor - 1))
                    cursor = previous
                for offset, (begin, stop) in enumerate(reversed(before)):
                    if not emit(shown, first + offset, data, begin, stop, False):
                        return
            if not emit(shown, line_number, data, start, end, True):
                return
            self.matches += 1
            last_emitted = line_number
            last_end = end
            owed = context
            if end >= length:
                break
            position = self._find(data, end + 1)
        if context:
            flush_after(1 << 62)


def _grep_walk(
    state: _GrepState,
    batches: Iterator[tuple[int, list[str], tuple[str, ...], str]],
    shown: str,
    file_glob: Glob | None,
    stats: _WalkStats,
) -> None:
    """Search every file of a walk's ``batches`` until a bound of ``state`` is reached.

    Per file: an ``open``, one bounded ``read``, a ``close``, a NUL probe and the first
    search, inlined here for the common cases (a file read whole by the first read; a
    literal, or a regex whose literal prefix is absent or found) so that a file without
    a match costs no Python call of its own.
    """
    read = state.read
    report = state._matches_only if not state.context else state.report
    first = state._first_read
    needle, match, prefix = state._program
    unanchored = _UNANCHORED
    open_at = os.open
    read_at = os.read
    close = os.close
    flags = FILE_FLAGS
    searched = 0
    try:
        for dir_fd, names, _rel, prefix_dir in batches:
            if file_glob is not None:
                names = file_glob.filter(prefix_dir, names)
            for name in names:
                try:
                    fd = open_at(name, flags, dir_fd=dir_fd)
                except OSError:
                    stats.skipped_links += 1  # swapped for a link or removed mid-walk
                    continue
                try:
                    head = read_at(fd, first)
                    data = head if len(head) < first else read(fd, head)
                except OSError:
                    data = None
                finally:
                    close(fd)
                if data is None:
                    continue
                searched += 1
                if data.find(b"\0", 0, BINARY_PROBE_BYTES) >= 0:
                    state.skipped_binary += 1
                    continue
                length = len(data)
                position: int | None
                if length > _WINDOW:
                    position = state._find(data, 0)
                elif needle is not None:
                    position = data.find(needle)
                elif match is not None:
                    begin = data.find(prefix) if prefix else 0
                    position = -1 if begin < 0 else match(unanchored, data, begin, length)[0][0]
                else:
                    position = state._find(data, 0)
                if position is None or position < 0:
                    continue
                report(data, shown + prefix_dir + name, position)
                if state.truncation is not None:
                    return
    finally:
        state.searched += searched


def _describe_re2_error(error: Exception) -> str:
    detail = error.args[0] if error.args else ""
    if isinstance(detail, bytes):
        detail = detail.decode("utf-8", "replace")
    detail = str(detail).replace("(?m)", "", 1)
    text = f"invalid regular expression: {detail}"
    if any(word in detail for word in ("perl operator", "escape sequence", "repetition")):
        text += f"; {_UNSUPPORTED_HINT}"
    return text


def compile_search(pattern: str, *, literal: bool, case_insensitive: bool) -> Program:
    """Compile a grep pattern for RE2 (``^``/``$`` match at line boundaries).

    Raises ``PatternError`` for invalid patterns, naming what RE2 does not support.
    """
    if not pattern:
        raise PatternError(pattern, "empty search pattern")
    if len(pattern) > MAX_PATTERN_CHARS:
        raise LimitExceeded("pattern_chars", MAX_PATTERN_CHARS, len(pattern))
    text = pattern if literal else pure_literal(pattern)
    if text is not None and not case_insensitive:
        try:
            return LiteralProgram(text)
        except UnicodeEncodeError as error:
            raise PatternError(pattern, "the pattern is not valid Unicode text") from error
    options = _re2_options(case_insensitive=case_insensitive)
    options.literal = literal
    prefix = b"" if literal or case_insensitive else required_prefix(pattern)
    try:
        return Re2Program(pattern if literal else "(?m)" + pattern, options, prefix=prefix)
    except re2.error as error:
        raise PatternError(pattern, _describe_re2_error(error)) from error
    except UnicodeEncodeError as error:
        raise PatternError(pattern, "the pattern is not valid Unicode text") from error


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
    abort: threading.Event | None = None,
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
    state = _GrepState(
        regex, context, max_matches, max_bytes, max_line_chars, max_file_bytes, abort
    )
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
        batches = _walk_batches(
            opened,
            target,
            include_secrets=include_secrets,
            skip_dirs=skip_dirs,
            max_visited=max_visited,
            max_depth=file_glob.max_depth if file_glob is not None else None,
            stats=stats,
            abort=abort,
            hidden=_hidden_test(ws, target),
        )
        try:
            _grep_walk(state, batches, _display_prefix(target), file_glob, stats)
        finally:
            batches.close()  # the walk's descriptors now, not when a traceback is freed
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
        skipped_hidden=stats.skipped_hidden,
    )
