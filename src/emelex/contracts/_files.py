"""Workspace files: listing, watching and reading one directory or file of a session.

Paths are exact relative pathname bytes, carried as canonical Base64 (``bytesBase64``):
a name that is not UTF-8 travels unchanged instead of being converted lossily.
"""

from __future__ import annotations

import base64
import binascii
from typing import Final, Literal, NewType

from emelex.contracts._errors import ContractError
from emelex.contracts._ids import Digest, SessionId
from emelex.contracts._limits import MAX_SAFE_INTEGER
from emelex.contracts._wire import count, items, text, wire, wire_string, wire_union

#: Longest relative path, in bytes (Linux ``PATH_MAX``), and one component (``NAME_MAX``).
MAX_WORKSPACE_PATH_BYTES: Final = 4096
MAX_WORKSPACE_NAME_BYTES: Final = 255
#: Entries in one files page, and the soft target of a page's encoded size.
MAX_FILES_PAGE: Final = 128
FILES_PAGE_TARGET_BYTES: Final = 512 * 1024
#: Original bytes in one read chunk, and the largest file a read captures.
MAX_FILE_CHUNK_BYTES: Final = 32 * 1024
MAX_READ_FILE_BYTES: Final = 64 * 1024 * 1024

# Canonical standard Base64 with padding (RFC 4648 section 4).
_BASE64 = r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$"


def _encoded_chars(size: int) -> int:
    return 4 * ((size + 2) // 3)


DirectoryIdentity = NewType("DirectoryIdentity", str)
wire_string(
    DirectoryIdentity,
    "DirectoryIdentity",
    pattern=r"^[0-9]{1,20}:[0-9]{1,20}$",
    max_len=41,
    description="The physical identity (device:inode) of a listed or watched directory.",
)
FileVersion = NewType("FileVersion", str)
wire_string(
    FileVersion,
    "FileVersion",
    pattern=r"^v1:[0-9a-f]{64}$",
    max_len=67,
    description=(
        "Binds a file's original bytes, its physical file and parent identity and its "
        "pathname; equal versions mean the same content read at the same place."
    ),
)


def decode_base64(value: str, where: str) -> bytes:
    """The bytes of canonical Base64 ``value`` (refusing any other spelling)."""
    try:
        raw = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ContractError(f"{where}: not canonical Base64") from exc
    if base64.b64encode(raw).decode("ascii") != value:
        raise ContractError(f"{where}: not canonical Base64")
    return raw


def check_relative_path(raw: bytes, where: str) -> None:
    """Raise :class:`ContractError` unless ``raw`` is a normalized relative path: no NUL,
    not absolute, no empty, ``.`` or ``..`` component, bounded lengths."""
    if not raw:
        raise ContractError(f"{where}: an empty path (use null for the workspace root)")
    if len(raw) > MAX_WORKSPACE_PATH_BYTES:
        raise ContractError(f"{where}: longer than {MAX_WORKSPACE_PATH_BYTES} bytes")
    if b"\0" in raw:
        raise ContractError(f"{where}: contains a NUL byte")
    for name in raw.split(b"/"):
        if name in (b"", b".", b".."):
            raise ContractError(f"{where}: empty, '.' or '..' component (or an absolute path)")
        if len(name) > MAX_WORKSPACE_NAME_BYTES:
            raise ContractError(f"{where}: a component longer than {MAX_WORKSPACE_NAME_BYTES}")


@wire
class WorkspacePath:
    """Exact relative pathname bytes below the workspace root, as canonical Base64."""

    bytes_base64: str = text(
        min_len=4, max_len=_encoded_chars(MAX_WORKSPACE_PATH_BYTES), pattern=_BASE64
    )

    def __attrs_post_init__(self) -> None:
        check_relative_path(decode_base64(self.bytes_base64, "WorkspacePath"), "WorkspacePath")

    @classmethod
    def of(cls, raw: bytes | str) -> WorkspacePath:
        """The path of ``raw`` bytes (a ``str`` is encoded as UTF-8)."""
        data = raw.encode("utf-8") if isinstance(raw, str) else bytes(raw)
        return cls(bytes_base64=base64.b64encode(data).decode("ascii"))

    @property
    def raw(self) -> bytes:
        """The exact pathname bytes."""
        return base64.b64decode(self.bytes_base64)

    @property
    def name(self) -> bytes:
        """The last component's bytes."""
        return self.raw.rsplit(b"/", 1)[-1]


FileKind = Literal["file", "directory", "symlink", "other"]


@wire
class FileEntry:
    """One direct child. ``size`` and ``modifiedMs`` are set for regular files only;
    a symlink is a leaf entry (never followed)."""

    path: WorkspacePath
    kind: FileKind
    size: int | None = count(maximum=MAX_SAFE_INTEGER)
    modified_ms: int | None = count(maximum=MAX_SAFE_INTEGER)


@wire
class ListFilesRequest:
    """List the children of ``path`` (null: the workspace root) after ``after``
    (exclusive; a page's ``nextAfter``, null for the first page)."""

    session_id: SessionId
    path: WorkspacePath | None
    after: WorkspacePath | None


@wire
class FilesPage:
    """Entries in bytewise name order; follow ``nextAfter`` until it is null. A live
    observation: compare ``directoryIdentity`` with the watch's ``ready``."""

    session_id: SessionId
    path: WorkspacePath | None
    directory_identity: DirectoryIdentity
    entries: tuple[FileEntry, ...] = items(max_items=MAX_FILES_PAGE, limit="files page")
    next_after: WorkspacePath | None


@wire
class WatchFilesRequest:
    """Watch ``path`` (null: the workspace root) for changes of its direct children."""

    session_id: SessionId
    path: WorkspacePath | None


@wire
class FilesReady:
    """The initial scan is done: list from the beginning and compare identities."""

    kind: Literal["ready"] = "ready"
    directory_identity: DirectoryIdentity


@wire
class FilesChanged:
    """The directory needs rereading: discard the cursor and list from the beginning.
    Notifications coalesce and may repeat."""

    kind: Literal["changed"] = "changed"


FilesUnavailableReason = Literal["deleted", "replaced"]


@wire
class FilesUnavailable:
    """The watched subdirectory was deleted or replaced; the watch has ended."""

    kind: Literal["unavailable"] = "unavailable"
    reason: FilesUnavailableReason


FilesFailureCode = Literal["authority", "observation"]


@wire
class FilesWatchFailed:
    """The session's workspace authority is no longer valid, or the filesystem could not
    be observed; the watch has ended."""

    kind: Literal["error"] = "error"
    code: FilesFailureCode
    message: str = text(max_len=4096)


#: A file watch coalesces instead of buffering, so it never ends ``lagged``.
FilesWatchEndReason = Literal["closed"]


@wire
class FilesWatchEnded:
    """The watch ended because the Host is closing."""

    kind: Literal["end"] = "end"
    reason: FilesWatchEndReason


WatchFilesUpdate = FilesReady | FilesChanged | FilesUnavailable | FilesWatchFailed | FilesWatchEnded
wire_union("WatchFilesUpdate", WatchFilesUpdate)


@wire
class ReadFileRequest:
    """Read one current regular file; ``expectedVersion`` is a reread precondition (the
    read answers ``changed`` when the file is no longer that version), never permission."""

    session_id: SessionId
    path: WorkspacePath
    expected_version: FileVersion | None


FileContentKind = Literal["text", "image"]


@wire
class ReadFileBegin:
    """A capture follows: ``size`` original bytes in chunks, then an ``end``."""

    kind: Literal["begin"] = "begin"
    path: WorkspacePath
    version: FileVersion
    size: int = count(maximum=MAX_READ_FILE_BYTES)
    content: FileContentKind
    mime_type: str = text(min_len=3, max_len=64)


@wire
class ReadFileChunk:
    """Original bytes ``[offset, offset + len)``; text chunks end at UTF-8 boundaries."""

    kind: Literal["chunk"] = "chunk"
    offset: int = count(maximum=MAX_READ_FILE_BYTES)
    bytes_base64: str = text(
        min_len=4, max_len=_encoded_chars(MAX_FILE_CHUNK_BYTES), pattern=_BASE64
    )


@wire
class ReadFileEnd:
    """The capture is complete: check offsets, size and the SHA-256 of every byte."""

    kind: Literal["end"] = "end"
    version: FileVersion
    size: int = count(maximum=MAX_READ_FILE_BYTES)
    digest: Digest


@wire
class ReadFileAbsent:
    """No file (of any kind) has that path."""

    kind: Literal["absent"] = "absent"


@wire
class ReadFileChanged:
    """The file is not ``expectedVersion`` any more (``version`` is the current one), or
    it kept changing while being captured (``version`` null)."""

    kind: Literal["changed"] = "changed"
    version: FileVersion | None


@wire
class ReadFileBinary:
    """A regular file that is neither UTF-8 text nor a supported image."""

    kind: Literal["binary"] = "binary"
    version: FileVersion
    size: int = count(maximum=MAX_SAFE_INTEGER)


UnsupportedFileKind = Literal[
    "directory", "symlink", "fifo", "socket", "charDevice", "blockDevice", "other"
]


@wire
class ReadFileUnsupported:
    """The path names something other than a regular file (never opened or followed)."""

    kind: Literal["unsupported"] = "unsupported"
    file_kind: UnsupportedFileKind


ReadFileUpdate = (
    ReadFileBegin
    | ReadFileChunk
    | ReadFileEnd
    | ReadFileAbsent
    | ReadFileChanged
    | ReadFileBinary
    | ReadFileUnsupported
)
wire_union("ReadFileUpdate", ReadFileUpdate)
