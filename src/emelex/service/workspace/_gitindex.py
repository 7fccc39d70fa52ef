"""A fast reader of Git's index file (versions 2 to 4) and its cache-tree extension.

dulwich builds one object per entry and drops the cache-tree, which made reading a
10,000-entry index cost several times a whole ``git status``. Status needs only each
entry's stat data, mode and blob name, and the cache-tree lets it skip every directory
whose tree still matches HEAD, exactly as Git does. The checksum is verified.
"""

from __future__ import annotations

import hashlib
import struct
import threading
from collections.abc import Iterator
from typing import Any, Final, NamedTuple

from emelex.contracts import MAX_GIT_ENTRIES
from emelex.service._errors import (
    GitLimitExceeded,
    GitRepositoryError,
    GitUnsupported,
    SparseCheckoutUnsupported,
    SubmoduleUnsupported,
)
from emelex.service.workspace._gitformat import MODE_EXECUTABLE, MODE_GITLINK, MODE_SYMLINK

#: Bytes of an index file the Host reads (about 4 million short entries).
MAX_INDEX_BYTES: Final = 512 * 1024 * 1024
#: An entry's fixed part: ctime s/ns, mtime s/ns, dev, ino, mode, uid, gid, size, sha, flags.
ENTRY: Final = struct.Struct(">10I20sH")
#: Just the mode and the flags of an entry (what opening checks).
_MODE_FLAGS: Final = struct.Struct(">24xI32xH")
_HEADER: Final = struct.Struct(">4sII")
_EXTENDED: Final = 0x4000
_STAGE: Final = 0x3000
_NAME: Final = 0x0FFF
_SKIP_WORKTREE: Final = 0x4000
_INTENT_TO_ADD: Final = 0x2000


class Tracked(NamedTuple):
    """One index entry's fixed fields exactly as stored (stat data is 32 bits wide)."""

    ctime_s: int
    ctime_ns: int
    mtime_s: int
    mtime_ns: int
    dev: int
    ino: int
    mode: int
    uid: int
    gid: int
    size: int
    sha: bytes
    flags: int

    @property
    def oid(self) -> str:
        return self.sha.hex()


#: What a working file's lstat must show for its index entry to be trusted unread:
#: mtime and ctime (ns), then size, inode, uid, gid (32 bits, as the index keeps them)
#: and the file type with the owner's execute bit.
StatKey = tuple[int, ...]
#: The key of an entry that must always be read (racily clean, or a symlink).
NEVER: Final[StatKey] = (-1,)
#: File type and owner-execute bits compared (only the type without core.fileMode).
MODE_BITS: Final = 0o170100
TYPE_BITS: Final = 0o170000


def stat_key(fields: tuple[Any, ...], racy_from: int, file_mode: bool) -> StatKey:
    cs, cn, ms, mn, _dev, ino, mode, uid, gid, size, _sha, _flags = fields
    mtime = ms * 1_000_000_000 + mn
    if mtime >= racy_from or mode == MODE_SYMLINK:
        return NEVER  # written in the index's own instant, or a link: read it (like Git)
    bits = 0o100100 if mode == MODE_EXECUTABLE else 0o100000
    if not file_mode:
        bits = 0o100000
    return (mtime, cs * 1_000_000_000 + cn, size, ino, uid, gid, bits)


class GitIndex:
    """The entries of one index file, unpacked on demand from its bytes (a status looks
    at every entry once; building 10,000 objects up front cost more than the lookups)."""

    def __init__(self, data: bytes, offsets: dict[bytes, int], trees: dict[bytes, str]) -> None:
        self.data = data
        #: path -> offset of its entry in ``data``.
        self.offsets = offsets
        #: Valid cache-tree nodes: ``dir/`` (``b""`` for the root) -> tree object name.
        self.trees = trees
        self._keys: dict[tuple[int, bool], dict[bytes, StatKey]] = {}
        self._lock = threading.Lock()

    def stat_keys(self, racy_from: int, file_mode: bool) -> dict[bytes, StatKey]:
        """path -> the stat data a clean working file has (see :func:`stat_key`), built
        once per index (parsed indexes are cached between observations)."""
        with self._lock:
            found = self._keys.get((racy_from, file_mode))
            if found is None:
                unpack = ENTRY.unpack_from
                data = self.data
                found = {
                    path: stat_key(unpack(data, offset), racy_from, file_mode)
                    for path, offset in self.offsets.items()
                }
                self._keys = {(racy_from, file_mode): found}
            return found

    def __len__(self) -> int:
        return len(self.offsets)

    def __contains__(self, path: object) -> bool:
        return path in self.offsets

    def __iter__(self) -> Iterator[bytes]:
        return iter(self.offsets)

    def at(self, offset: int) -> Tracked:
        return Tracked._make(ENTRY.unpack_from(self.data, offset))

    def get(self, path: bytes) -> Tracked | None:
        offset = self.offsets.get(path)
        return None if offset is None else self.at(offset)

    def items(self) -> Iterator[tuple[bytes, Tracked]]:
        for path, offset in self.offsets.items():
            yield path, self.at(offset)


EMPTY_INDEX: Final = GitIndex(b"", {}, {})


def _varint(data: bytes, at: int) -> tuple[int, int]:
    # Git's offset encoding (index v4 path prefix lengths).
    byte = data[at]
    at += 1
    value = byte & 0x7F
    while byte & 0x80:
        byte = data[at]
        at += 1
        value = ((value + 1) << 7) | (byte & 0x7F)
    return value, at


def parse_index(data: bytes, where: str) -> GitIndex:
    """Parse a whole index file. Raises GitRepositoryError when it is malformed and a
    GitUnsupported subclass for content status cannot honour."""
    try:
        return _parse(data, where)
    except (struct.error, IndexError, ValueError) as exc:
        raise GitRepositoryError(f"{where}: malformed index ({exc})") from exc


def _parse(data: bytes, where: str) -> GitIndex:
    if len(data) > MAX_INDEX_BYTES:
        raise GitLimitExceeded("git index bytes", MAX_INDEX_BYTES, len(data))
    signature, version, count = _HEADER.unpack_from(data, 0)
    if signature != b"DIRC" or version not in (2, 3, 4):
        raise GitRepositoryError(f"{where}: not an index file of version 2, 3 or 4")
    if count > MAX_GIT_ENTRIES:
        raise GitLimitExceeded("git index entries", MAX_GIT_ENTRIES, count)
    body, trailer = data[:-20], data[-20:]
    if trailer != b"\0" * 20 and hashlib.sha1(body, usedforsecurity=False).digest() != trailer:
        raise GitRepositoryError(f"{where}: index checksum mismatch")
    offsets: dict[bytes, int] = {}
    at = _HEADER.size
    previous = b""
    mode_flags = _MODE_FLAGS.unpack_from
    fixed = ENTRY.size
    for _ in range(count):
        # The hot loop of opening a repository: one unpack, one slice, one insert.
        mode, flags = mode_flags(data, at)
        name_at = at + fixed
        if flags & (_EXTENDED | _STAGE) or mode == MODE_GITLINK or version == 4:
            name_at = _refuse(mode, flags, data, name_at)
        if version == 4:
            strip, name_at = _varint(data, name_at)
            end = data.index(b"\0", name_at)
            name = previous[: len(previous) - strip] + data[name_at:end]
            previous = name
            offsets[name] = at
            at = end + 1
        else:
            length = flags & _NAME
            end = name_at + length if length < _NAME else data.index(b"\0", name_at)
            offsets[data[name_at:end]] = at
            at += ((end - at) // 8 + 1) * 8  # 1 to 8 NULs pad an entry to 8 bytes
    trees: dict[bytes, str] = {}
    while at + 8 <= len(body):
        ext, ext_size = struct.unpack_from(">4sI", data, at)
        at += 8
        chunk = data[at : at + ext_size]
        at += ext_size
        if ext == b"TREE":
            _cache_tree(chunk, trees)
        elif ext in (b"link", b"sdir"):
            kind = "a split index" if ext == b"link" else "a sparse index"
            raise GitUnsupported(f"{where}: {kind} is not supported")
        elif not b"A" <= ext[:1] <= b"Z":
            raise GitUnsupported(f"{where}: required index extension {ext!r} is unknown")
    return GitIndex(data, offsets, trees)


def _refuse(mode: int, flags: int, data: bytes, name_at: int) -> int:
    """Check an entry with flags the fast path does not handle; returns where its name
    starts (after the extended flags)."""
    shown = data[name_at + 2 if flags & _EXTENDED else name_at :][:64]
    if flags & _STAGE:
        raise GitUnsupported(f"the index has unmerged entries ({shown!r}...): finish the merge")
    if mode == MODE_GITLINK:
        raise SubmoduleUnsupported(f"the index holds a submodule ({shown!r}...)")
    if mode == 0o040000:
        raise SparseCheckoutUnsupported("the index holds sparse directory entries")
    if not flags & _EXTENDED:
        return name_at
    (extended,) = struct.unpack_from(">H", data, name_at)
    if extended & _SKIP_WORKTREE:
        raise SparseCheckoutUnsupported(f"{shown!r}... is outside the sparse checkout")
    if extended & _INTENT_TO_ADD:
        raise GitUnsupported(f"{shown!r}... is an intent-to-add entry (git add -N)")
    return name_at + 2


def _cache_tree(chunk: bytes, trees: dict[bytes, str]) -> None:
    # Pre-order nodes: "name\0<entries> <subtrees>\n<sha>" (no sha when entries is -1).
    at = 0
    stack: list[tuple[bytes, int]] = []  # (prefix, children left)
    while at < len(chunk):
        end = chunk.index(b"\0", at)
        name = chunk[at:end]
        line_end = chunk.index(b"\n", end)
        entry_count, subtrees = chunk[end + 1 : line_end].split(b" ")
        at = line_end + 1
        while stack and stack[-1][1] == 0:
            stack.pop()
        if stack:
            parent, left = stack[-1]
            stack[-1] = (parent, left - 1)
            prefix = parent + name + b"/"
        else:
            prefix = b""
        if int(entry_count) >= 0:
            trees[prefix] = chunk[at : at + 20].hex()
            at += 20
        stack.append((prefix, int(subtrees)))
