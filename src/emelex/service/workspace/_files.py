"""``list_files``: one page of a workspace directory's direct children.

Pages follow bytewise name order and resume after the last name a client saw, so the
cursor is the exact path of that entry. A page needs the directory's sorted names: the
sorted list is cached per directory identity and reused while the directory's change and
modification times stay the same, so paginating a 100,000-entry directory scans it once
instead of once per page. Each entry is still ``lstat``-ed fresh when its page is read;
one read may build several consecutive pages (the read-ahead of ``_files_pages``).
The blocking functions here run on worker threads.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import os
import stat
import threading
import time
from collections import OrderedDict
from typing import Final

import attrs

from emelex.contracts import (
    FILES_PAGE_TARGET_BYTES,
    MAX_FILES_PAGE,
    MAX_WORKSPACE_NAME_BYTES,
    FileEntry,
    FileKind,
    FilesPage,
    WorkspacePath,
    trusted,
)
from emelex.service._errors import InvalidWorkspacePath
from emelex.service.workspace._files_access import (
    CONTROL_NAMES,
    FileAuthority,
    identity_text,
    list_names,
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
    """The visible child names of the open directory ``fd``, sorted bytewise. (The
    Host's private directories are dropped when a page ``lstat``-s them.)"""
    try:
        names = list_names(fd)
    except OSError as exc:
        raise os_failure(exc, shown(b"/".join(parts))) from exc
    if authority.hidden:
        names = authority.visible(parts, names)
    names.sort()
    for control in CONTROL_NAMES:  # a sorted list: find the few control names directly
        at = bisect.bisect_left(names, control)
        if at < len(names) and names[at] == control:
            del names[at]
    return names


def _kind(mode: int) -> FileKind:
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "directory"
    if stat.S_ISLNK(mode):
        return "symlink"
    return "other"


# Entries are built without the construction checks (``trusted``, faster still): the
# Host derived every value from the filesystem itself, and a page holds up to 128.
_new = object.__new__
_set_bytes = WorkspacePath.__dict__["bytes_base64"].__set__
_set_path = FileEntry.__dict__["path"].__set__
_set_kind = FileEntry.__dict__["kind"].__set__
_set_size = FileEntry.__dict__["size"].__set__
_set_modified = FileEntry.__dict__["modified_ms"].__set__
lstat = os.lstat
b2a_base64 = binascii.b2a_base64
S_ISDIR = stat.S_ISDIR
S_ISREG = stat.S_ISREG


def _within_budget(names: list[bytes], start: int, prefix: int, used: int) -> list[bytes]:
    """The names from ``start`` that fit one page: at most ``MAX_FILES_PAGE``, within the
    byte target (with room for the cursor), and always at least one."""
    batch = names[start : start + MAX_FILES_PAGE]
    widest = 4 * ((prefix + MAX_WORKSPACE_NAME_BYTES + 2) // 3) + ENTRY_OVERHEAD
    if used + (len(batch) + 1) * widest <= FILES_PAGE_TARGET_BYTES:
        return batch  # the usual case: even the longest names would fit
    for count, name in enumerate(batch):
        cost = 4 * ((prefix + len(name) + 2) // 3) + ENTRY_OVERHEAD
        if count and used + cost + cost > FILES_PAGE_TARGET_BYTES:
            return batch[:count]
        used += cost
    return batch


@attrs.define
class RawEntries:
    """A page's entries as they were read: Base64 paths, kinds, sizes, modification
    times, one list each (four containers a page instead of one tuple an entry)."""

    paths: list[str] = attrs.Factory(list)
    kinds: list[FileKind] = attrs.Factory(list)
    sizes: list[int | None] = attrs.Factory(list)
    modified: list[int | None] = attrs.Factory(list)


def _read_entries(
    fd: int, batch: list[bytes], prefix: bytes, private: frozenset[tuple[int, int]]
) -> RawEntries:
    """One pass over ``batch``: ``lstat`` each name below ``fd``, leaving out names
    removed meanwhile and the Host's private directories."""
    read = RawEntries()
    path = read.paths.append
    kind = read.kinds.append
    size = read.sizes.append
    modified = read.modified.append
    for name in batch:
        try:
            child = lstat(name, dir_fd=fd)
        except FileNotFoundError:
            continue  # removed since the scan
        except OSError as exc:
            raise os_failure(exc, shown(prefix + name)) from exc
        mode = child.st_mode
        if S_ISREG(mode):
            kind("file")
            size(child.st_size)
            modified(child.st_mtime_ns // 1_000_000)
        elif not S_ISDIR(mode):
            kind(_kind(mode))
            size(None)
            modified(None)
        elif not private or (child.st_dev, child.st_ino) not in private:
            kind("directory")
            size(None)
            modified(None)
        else:
            continue
        path(b2a_base64(prefix + name, newline=False).decode("ascii"))
    return read


@attrs.frozen
class RawPage:
    """One page as the worker thread read it; :meth:`build` makes the contract object.
    (Plain lists of strings and integers until then: a batch of pages read ahead stays
    cheap to hold and leaves the garbage collector little to trace.)"""

    directory_identity: str
    entries: RawEntries
    next_after: str | None  # the cursor leading past this page, if more may follow
    cost: int  # estimated wire bytes

    def build(self, session_id: str, path: WorkspacePath | None) -> FilesPage:
        """The contract page (on the caller's thread: about a microsecond an entry)."""
        entries = _entries(self.entries)
        return trusted(
            FilesPage,
            session_id=session_id,
            path=path,
            directory_identity=self.directory_identity,
            entries=entries,
            next_after=entries[-1].path if self.next_after is not None else None,
        )


def _entries(read: RawEntries) -> tuple[FileEntry, ...]:
    built: list[FileEntry] = []
    append = built.append
    columns = zip(read.paths, read.kinds, read.sizes, read.modified, strict=True)
    for encoded, kind, size, modified in columns:  # inlined: no call per entry
        path = _new(WorkspacePath)
        _set_bytes(path, encoded)
        entry = _new(FileEntry)
        _set_path(entry, path)
        _set_kind(entry, kind)
        _set_size(entry, size)
        _set_modified(entry, modified)
        append(entry)
    return tuple(built)


def list_pages(
    authority: FileAuthority,
    cache: NameCache,
    path: WorkspacePath | None,
    after: WorkspacePath | None,
    pages: int = 1,
    budget: int = FILES_PAGE_TARGET_BYTES,
) -> list[RawPage]:
    """Up to ``pages`` consecutive pages of ``path``'s children after ``after``, all from
    one open descriptor of the directory (blocking; for a worker thread). Pages after
    the first stop once their estimated wire bytes reach ``budget``."""
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
    found: list[RawPage] = []
    spent = 0
    try:
        names = cache.names(authority, fd, info, parts)
        index = 0 if after_name is None else bisect.bisect_right(names, after_name)
        private = authority.private
        identity = identity_text(info)
        # A page repeats its own path and carries the cursor (as long as an entry's).
        base = 2 * ENTRY_OVERHEAD + 3 * len(base64.b64encode(prefix))
        while True:
            entries = RawEntries()
            used = base
            while not entries.paths and index < len(names):  # a page of vanished names: go on
                batch = _within_budget(names, index, len(prefix), base)
                index += len(batch)
                entries = _read_entries(fd, batch, prefix, private)
                # An upper bound of the entries' Base64 paths (one pass in C over the names).
                paths = len(prefix) * len(batch) + sum(map(len, batch))
                used += 4 * paths // 3 + (ENTRY_OVERHEAD + 4) * len(batch)
            more = index < len(names)
            found.append(RawPage(identity, entries, entries.paths[-1] if more else None, used))
            spent += used
            if not more or len(found) >= pages or spent >= budget:
                return found
    finally:
        os.close(fd)


def list_page(
    authority: FileAuthority,
    cache: NameCache,
    session_id: str,
    path: WorkspacePath | None,
    after: WorkspacePath | None,
) -> FilesPage:
    """One page of ``path``'s children after ``after`` (blocking; for a worker thread)."""
    return list_pages(authority, cache, path, after)[0].build(session_id, path)


#: The names cache of every Host in the process (keys include each session's exclusions).
NAMES: Final = NameCache()

__all__ = ["NAMES", "NameCache", "RawEntries", "RawPage", "list_page", "list_pages", "scan_names"]
