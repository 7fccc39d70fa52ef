"""The search segment: the text of closed search blocks (UTF-8, or Latin-1 where every
character fits one byte; see ``_search``), in a file beside the store.

Reading a 32 KiB blob out of SQLite walks a chain of overflow pages and copies the text
twice (into SQLite's buffer, then into a Python ``bytes``): a search over 100 MiB of
history spent about 0.05 s on that alone, twice that on a fresh connection. A closed
block never changes, so its text is appended to ``<store>-search`` instead, which
readers map into memory; the block's row keeps the offset and length. The newest block
of a session, which still grows, keeps its text in SQLite.

The file is derived data. The writer appends while it holds SQLite's write lock (inside
the transaction that records the offsets) and syncs the file before that transaction
commits, so a committed block's bytes are on disk; a crash in between leaves bytes at
the end that no block names, which are never read. A file that is missing or shorter
than its blocks need (lost, truncated, copied without it) is found when the store opens,
and every session's blocks are rebuilt from the rows (see ``_schema``).
"""

from __future__ import annotations

import mmap
import os
import sqlite3
from typing import Final

from emelex.store._permissions import PRIVATE_FILE

#: The segment file's name: the store's path plus this suffix (like SQLite's ``-wal``).
SEGMENT_SUFFIX: Final = "-search"


class _SegmentError(Exception):
    """The segment file cannot be read where a block says its text is (the store maps
    it to ``StoreCorrupt``)."""


class Segment:
    """One connection's handle on the segment file: appends (the writer) and a
    read-only map (readers), both opened on first use. Thread-confined, like the
    connection that carries it."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._fd: int | None = None
        self._unsynced = False
        self._map: mmap.mmap | None = None

    def append(self, data: bytes) -> int:
        """Append ``data`` and return its offset. Call inside a write transaction (the
        SQLite write lock keeps other writers out), then :meth:`sync` before commit."""
        if self._fd is None:
            flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
            self._fd = os.open(self.path, flags, PRIVATE_FILE)
        offset = os.fstat(self._fd).st_size
        view = memoryview(data)
        at = offset
        while view:
            written = os.pwrite(self._fd, view, at)
            view = view[written:]
            at += written
        self._unsynced = True
        return offset

    def sync(self) -> None:
        """Make the appended bytes durable (before the transaction naming them commits)."""
        if self._unsynced and self._fd is not None:
            os.fdatasync(self._fd)
            self._unsynced = False

    def view(self, offset: int, length: int) -> mmap.mmap:
        """The file's map, which holds the ``length`` bytes at ``offset`` (searched in
        place: slicing it copies); raises :class:`_SegmentError` when the file does not
        hold them."""
        end = offset + length
        if offset < 0 or length < 0:
            raise _SegmentError(f"a block names bytes {offset}+{length} of the search segment")
        current = self._map
        if current is None or end > len(current):
            current = self._remap(end)
        return current

    def _remap(self, end: int) -> mmap.mmap:
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as exc:
            raise _SegmentError(f"cannot open the search segment ({exc.strerror})") from exc
        try:
            size = os.fstat(fd).st_size
            if size < end:
                raise _SegmentError(f"the search segment holds {size} bytes, a block needs {end}")
            fresh = mmap.mmap(fd, size, access=mmap.ACCESS_READ)
        finally:
            os.close(fd)
        if self._map is not None:
            self._map.close()
        self._map = fresh
        return fresh

    def close(self) -> None:
        if self._map is not None:
            self._map.close()
            self._map = None
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class SegmentConnection(sqlite3.Connection):
    """A store connection that carries its :class:`Segment` (see ``_schema.connect``)."""

    search_segment: Segment | None = None

    def close(self) -> None:
        if self.search_segment is not None:
            self.search_segment.close()
        super().close()


def segment_of(db: sqlite3.Connection) -> Segment | None:
    """The connection's segment; None for a plain connection, whose closed blocks keep
    their text in SQLite (always correct, only slower to scan)."""
    return getattr(db, "search_segment", None)


def segment_path(store_path: str) -> str:
    return store_path + SEGMENT_SUFFIX
