"""``list_files``: one page of a workspace directory's direct children.

Pages follow bytewise name order and resume after the last name a client saw, so the
cursor is the exact path of that entry. A page needs the directory's sorted names: the
sorted list is cached per directory identity and reused while the directory's change and
modification times stay the same, so paginating a 100,000-entry directory scans it once
instead of once per page. Each entry is still ``lstat``-ed fresh when its page is built.
The blocking functions here run on worker threads.
"""

from __future__ import annotations

import base64
import bisect
import os
import stat
import threading
import time
from collections import OrderedDict
from typing import Final

from emelex.contracts import (
    FILES_PAGE_TARGET_BYTES,
    MAX_FILES_PAGE,
    FileEntry,
    FileKind,
    FilesPage,
    WorkspacePath,
    trusted,
)
from emelex.service._errors import InvalidWorkspacePath
from emelex.service._files_access import (
    CONTROL_NAMES,
    FileAuthority,
    exact_name,
    identity_text,
    open_directory,
    os_failure,
    shown,
    split_parts,
)

#: A directory modified this close to the start of its scan may change again within the
#: same timestamp tick (timestamps are coarse): its names are not cached.
RACY_NS: Final = 100_000_000
#: Directories whose sorted names are kept, and their total names.
CACHED_DIRECTORIES: Final = 32
CACHED_NAMES: Final = 1_000_000
#: Encoded bytes of an entry besides its Base64 path (keys, kind, size, time).
ENTRY_OVERHEAD: Final = 128

_Key = tuple[int, int, tuple[object, ...]]


class NameCache:
    """Sorted visible child names per directory identity (thread-safe, bounded LRU)."""

    def __init__(self, directories: int = CACHED_DIRECTORIES, names: int = CACHED_NAMES) -> None:
        self._lock = threading.Lock()
        self._entries: OrderedDict[_Key, tuple[tuple[int, int], list[bytes]]] = OrderedDict()
        self._directories = directories
        self._names = names
        self._total = 0
        self.scans = 0

    def names(
        self, authority: FileAuthority, fd: int, info: os.stat_result, parts: tuple[bytes, ...]
    ) -> list[bytes]:
        key = (info.st_dev, info.st_ino, authority.key)
        stamp = (info.st_mtime_ns, info.st_ctime_ns)
        with self._lock:
            hit = self._entries.get(key)
            if hit is not None and hit[0] == stamp:
                self._entries.move_to_end(key)
                return hit[1]
        started = time.time_ns()
        names = scan_names(authority, fd, info, parts)
        self.scans += 1
        if max(stamp) < started - RACY_NS:
            self._keep(key, stamp, names)
        return names

    def _keep(self, key: _Key, stamp: tuple[int, int], names: list[bytes]) -> None:
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._total -= len(old[1])
            if len(names) > self._names:
                return
            self._entries[key] = (stamp, names)
            self._total += len(names)
            while len(self._entries) > self._directories or self._total > self._names:
                _, (_, dropped) = self._entries.popitem(last=False)
                self._total -= len(dropped)


def scan_names(
    authority: FileAuthority, fd: int, info: os.stat_result, parts: tuple[bytes, ...]
) -> list[bytes]:
    """The visible child names of the open directory ``fd``, sorted bytewise."""
    private_inodes = {inode for device, inode in authority.private if device == info.st_dev}
    hidden = bool(authority.hidden)
    names: list[bytes] = []
    try:
        with os.scandir(fd) as scan:
            for entry in scan:
                raw = exact_name(entry.name)
                if raw in CONTROL_NAMES or (hidden and authority.excluded((*parts, raw))):
                    continue
                if private_inodes and entry.inode() in private_inodes:
                    continue  # the Host's state (an lstat in the page confirms the device)
                names.append(raw)
    except OSError as exc:
        raise os_failure(exc, shown(b"/".join(parts))) from exc
    names.sort()
    return names


def _kind(mode: int) -> FileKind:
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "directory"
    if stat.S_ISLNK(mode):
        return "symlink"
    return "other"


def list_page(
    authority: FileAuthority,
    cache: NameCache,
    session_id: str,
    path: WorkspacePath | None,
    after: WorkspacePath | None,
) -> FilesPage:
    """One page of ``path``'s children after ``after`` (blocking; for a worker thread)."""
    raw = None if path is None else path.raw
    parts = split_parts(raw)
    prefix = b"" if raw is None else raw + b"/"
    after_name: bytes | None = None
    if after is not None:
        after_raw = after.raw
        after_name = after_raw[len(prefix) :]
        if not after_raw.startswith(prefix) or b"/" in after_name:
            raise InvalidWorkspacePath(f"{shown(after_raw)} is not a child of {shown(raw or b'')}")
    fd, _root, info = open_directory(authority, parts)
    try:
        names = cache.names(authority, fd, info, parts)
        index = 0 if after_name is None else bisect.bisect_right(names, after_name)
        entries: list[FileEntry] = []
        # The page repeats its own path and carries the cursor (as long as an entry's).
        used = 2 * ENTRY_OVERHEAD + 3 * len(base64.b64encode(prefix))
        while index < len(names) and len(entries) < MAX_FILES_PAGE:
            name = names[index]
            try:
                child = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                index += 1  # removed since the names were read
                continue
            except OSError as exc:
                raise os_failure(exc, shown(prefix + name)) from exc
            mode = child.st_mode
            if stat.S_ISDIR(mode) and authority.is_private(child):
                index += 1
                continue
            encoded = base64.b64encode(prefix + name).decode("ascii")
            cost = len(encoded) + ENTRY_OVERHEAD
            if entries and used + cost + cost > FILES_PAGE_TARGET_BYTES:
                break
            regular = stat.S_ISREG(mode)
            entries.append(
                trusted(
                    FileEntry,
                    path=trusted(WorkspacePath, bytes_base64=encoded),
                    kind=_kind(mode),
                    size=child.st_size if regular else None,
                    modified_ms=child.st_mtime_ns // 1_000_000 if regular else None,
                )
            )
            used += cost
            index += 1
    finally:
        os.close(fd)
    more = index < len(names) and bool(entries)
    return trusted(
        FilesPage,
        session_id=session_id,
        path=path,
        directory_identity=identity_text(info),
        entries=tuple(entries),
        next_after=entries[-1].path if more else None,
    )


#: The names cache of every Host in the process (keys include each session's exclusions).
NAMES: Final = NameCache()

__all__ = ["NAMES", "NameCache", "list_page", "scan_names"]
