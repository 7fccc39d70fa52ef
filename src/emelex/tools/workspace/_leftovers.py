"""Leftovers of interrupted writes: finding them, and cleaning stale temporary files.

A process killed in the middle of ``write_file``/``edit_file`` can leave a temporary
sibling (``.<name>.emelex-tmp-<id>``, a full copy of the content being written) behind,
and a lost race can leave a recovery sibling (``.<name>.emelex-recovered-<id>``, another
writer's version that could not be put back). :func:`list_leftovers` names both.

Stale temporary files are removed by the next mutation of their directory: "stale" means
their inode last changed (``st_ctime``; a rename counts) more than :data:`STALE_MARGIN`
seconds before the workspace was opened, so a write still in flight in another process
is not touched; this process's own writes in flight are never touched. Recovery files
are never removed automatically: they may hold the only copy of someone's version.
"""

from __future__ import annotations

import contextlib
import os
import stat
import threading

import attrs

from emelex._errors import LimitExceeded
from emelex.tools.workspace._errors import InvalidArgument
from emelex.tools.workspace._root import Workspace
from emelex.tools.workspace._search import DEFAULT_MAX_VISITED, _walk_files, _WalkStats
from emelex.tools.workspace._sibling import parse_sibling

_CACHE_LIMIT = 10_000  # directories remembered as clean, per workspace
STALE_MARGIN = 2.0
"""Seconds a temporary file's ``st_ctime`` must precede the workspace's opening for it to
count as stale. File timestamps come from a coarse kernel clock (a few ms behind
``time.time()``) and some filesystems keep 1-2 s granularity: without a margin, a write
started just after opening could look older than the session."""

# Temporary names this process is writing: never stale, whatever their timestamps say.
_IN_FLIGHT: set[tuple[int, int, str]] = set()
_IN_FLIGHT_LOCK = threading.Lock()


def _directory_key(parent_fd: int) -> tuple[int, int]:
    info = os.fstat(parent_fd)
    return info.st_dev, info.st_ino


def claim_temporary(parent_fd: int, temp: str) -> None:
    """Mark ``temp`` (in the directory ``parent_fd``) as being written by this process."""
    with _IN_FLIGHT_LOCK:
        _IN_FLIGHT.add((*_directory_key(parent_fd), temp))


def release_temporary(parent_fd: int, temp: str) -> None:
    with contextlib.suppress(OSError), _IN_FLIGHT_LOCK:
        _IN_FLIGHT.discard((*_directory_key(parent_fd), temp))


@attrs.frozen
class Leftover:
    """One leftover file: its display path, ``kind`` (``"temporary"`` or ``"recovery"``),
    the display path of the file it stands for (only its beginning when the name had to be
    shortened: ``shortened``), its size and its ``st_ctime``."""

    path: str
    kind: str
    stands_for: str
    shortened: bool
    size: int
    changed: float


@attrs.frozen
class LeftoverListing:
    """The result of :func:`list_leftovers`; ``truncated`` when a bound stopped the walk."""

    leftovers: tuple[Leftover, ...]
    truncated: bool
    visited: int


def list_leftovers(
    ws: Workspace,
    path: str = ".",
    *,
    max_results: int = 1000,
    max_visited: int = DEFAULT_MAX_VISITED,
    allow_outside: bool = False,
    abort: threading.Event | None = None,
) -> LeftoverListing:
    """Every temporary or recovery sibling below ``path``, in name order, depth first.

    Only names and sizes are read, so secret directories are walked too (a leftover of a
    secret file is itself secret: reading it still needs approval). Symlinks are not
    followed.
    """
    if max_results < 1:
        raise InvalidArgument("max_results", f"must be at least 1, got {max_results}")
    if max_visited > 10_000_000:
        raise LimitExceeded("max_visited", 10_000_000, max_visited)
    target = ws.target(path, allow_outside=allow_outside)
    base = ws.open_dir(target)
    stats = _WalkStats()
    found: list[Leftover] = []
    truncated = False
    try:
        for dir_fd, name, rel_dir, _prefix in _walk_files(
            base,
            target,
            include_secrets=True,
            skip_dirs=(),
            max_visited=max_visited,
            max_depth=None,
            stats=stats,
            leftovers=True,
            abort=abort,
        ):
            sibling = parse_sibling(name)
            if sibling is None:  # pragma: no cover - the walk yields siblings only
                continue
            try:
                info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            except OSError:
                continue  # removed meanwhile
            if len(found) >= max_results:
                truncated = True
                break
            where = target.with_parts((*target.parts, *rel_dir))
            found.append(
                Leftover(
                    where.child(name).display,
                    sibling.kind,
                    where.child(sibling.stands_for).display,
                    sibling.shortened,
                    info.st_size,
                    info.st_ctime,
                )
            )
    finally:
        os.close(base)
    truncated = truncated or stats.exhausted or stats.too_deep
    return LeftoverListing(tuple(found), truncated, stats.visited)


def clean_stale_temporaries(ws: Workspace, parent_fd: int) -> int:
    """Remove temporary siblings in one directory whose inode last changed before the
    workspace was opened; return how many. Cheap when nothing changed: a directory whose
    modification time is the one recorded after its last cleaning is not listed again."""
    try:
        info = os.fstat(parent_fd)
    except OSError:
        return 0
    key = (info.st_dev, info.st_ino)
    if ws._clean_dirs.get(key) == info.st_mtime_ns:
        return 0
    removed = 0
    try:
        with os.scandir(parent_fd) as scan:
            names = [entry.name for entry in scan if ".emelex-tmp-" in entry.name]
    except OSError:
        return 0
    cutoff = ws.opened_at - STALE_MARGIN
    for name in names:
        sibling = parse_sibling(name)
        if sibling is None or sibling.kind != "temporary":
            continue
        with _IN_FLIGHT_LOCK:
            if (*key, name) in _IN_FLIGHT:
                continue
        try:
            found = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
        except OSError:
            continue
        if stat.S_ISREG(found.st_mode) and found.st_ctime < cutoff:
            with contextlib.suppress(OSError):
                os.unlink(name, dir_fd=parent_fd)
                removed += 1
    remember_clean(ws, parent_fd)
    return removed


def remember_clean(ws: Workspace, parent_fd: int) -> None:
    """Record the directory's current modification time as cleaned (after our own
    mutation changed it, so the next mutation does not list it again)."""
    with contextlib.suppress(OSError):
        info = os.fstat(parent_fd)
        if len(ws._clean_dirs) >= _CACHE_LIMIT:
            ws._clean_dirs.clear()
        ws._clean_dirs[(info.st_dev, info.st_ino)] = info.st_mtime_ns
