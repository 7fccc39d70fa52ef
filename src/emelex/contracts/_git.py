"""Git status and diff of a session's workspace, and completed-work patches.

Paths are exact Git pathname bytes (``bytesBase64``): Git stores names as bytes, and a
lossy text conversion would show two different files under one name. A rename appears as
a deletion plus an addition.
"""

from __future__ import annotations

from typing import Final, Literal, NewType

from emelex.contracts._bytes import BASE64_PATTERN, BytesBase64
from emelex.contracts._ids import _ID, Digest, OperationRef, SessionId
from emelex.contracts._limits import MAX_ID_CHARS, MAX_SAFE_INTEGER
from emelex.contracts._operations import OperationReceipt
from emelex.contracts._wire import count, items, text, wire, wire_string, wire_union

#: Entries in one status area (staged, worktree or untracked) and in one index.
MAX_GIT_ENTRIES: Final = 1_000_000
#: Bytes of one side of a per-file diff (larger inputs are ``unsupported``/``tooLarge``).
MAX_GIT_DIFF_INPUT_BYTES: Final = 8 * 1024 * 1024
#: Code points of one per-file text patch.
MAX_GIT_PATCH_CHARS: Final = 32 * 1024 * 1024
#: Bytes of one captured completed-work patch.
MAX_PATCH_BYTES: Final = 64 * 1024 * 1024
#: Original bytes in one ``readPatch`` page.
MAX_PATCH_PAGE_BYTES: Final = 256 * 1024

GitObjectId = NewType("GitObjectId", str)
wire_string(
    GitObjectId,
    "GitObjectId",
    pattern=r"^(?:[0-9a-f]{40}|[0-9a-f]{64})$",
    max_len=64,
    description="A Git object name: 40 (SHA-1) or 64 (SHA-256) lowercase hex digits.",
)
PatchId = NewType("PatchId", str)
wire_string(
    PatchId,
    "PatchId",
    pattern=_ID,
    max_len=MAX_ID_CHARS,
    description="A captured completed-work patch of a session.",
)

#: ``staged``: HEAD vs index; ``worktree``: index vs working file; ``untracked``: a file
#: neither tracked nor ignored (compared with an empty file).
GitArea = Literal["staged", "worktree", "untracked"]
#: How a path differs between the two sides of its area (a mode change is ``modified``;
#: a file replaced by a symlink or back is ``typeChanged``).
GitChange = Literal["added", "deleted", "modified", "typeChanged"]
#: The Git mode of one side: 100644, 100755 or 120000.
GitFileMode = Literal["file", "executable", "symlink"]


@wire
class GitStatusRequest:
    """Status of the session's repository (its workspace must be the repository root)."""

    session_id: SessionId


@wire
class GitEntry:
    """One changed path of one area. Objects name the blobs of each side (null: absent)."""

    path: BytesBase64
    change: GitChange
    old_mode: GitFileMode | None
    new_mode: GitFileMode | None
    old_object: GitObjectId | None
    new_object: GitObjectId | None


@wire
class GitStatus:
    """Every staged, worktree and untracked change, observed fresh.

    ``head`` is null in an unborn repository; ``head_ref`` is the branch HEAD points
    at (exact ref name bytes), null when HEAD is detached.
    """

    head: GitObjectId | None
    head_ref: BytesBase64 | None
    staged: tuple[GitEntry, ...] = items(max_items=MAX_GIT_ENTRIES, limit="git status entries")
    worktree: tuple[GitEntry, ...] = items(max_items=MAX_GIT_ENTRIES, limit="git status entries")
    untracked: tuple[GitEntry, ...] = items(max_items=MAX_GIT_ENTRIES, limit="git status entries")


@wire
class GitDiffRequest:
    """Diff one path of one area: HEAD->index, index->working file, or empty->untracked."""

    session_id: SessionId
    area: GitArea
    path: BytesBase64


@wire
class GitTextDiff:
    """A complete unified patch in Git's format (``diff --git`` headers, three lines of
    context); both sides are UTF-8 text without NUL bytes."""

    kind: Literal["text"] = "text"
    path: BytesBase64
    old_mode: GitFileMode | None
    new_mode: GitFileMode | None
    old_object: GitObjectId | None
    new_object: GitObjectId | None
    patch: str = text(max_len=MAX_GIT_PATCH_CHARS, limit="git patch")


@wire
class GitBinaryDiff:
    """The sides differ and one holds a NUL byte in its first 8000 bytes (Git's rule)."""

    kind: Literal["binary"] = "binary"
    path: BytesBase64
    old_mode: GitFileMode | None
    new_mode: GitFileMode | None
    old_object: GitObjectId | None
    new_object: GitObjectId | None
    old_size: int = count(maximum=MAX_SAFE_INTEGER)
    new_size: int = count(maximum=MAX_SAFE_INTEGER)


@wire
class GitUnchangedDiff:
    """Both sides are the same (or the path is absent from both)."""

    kind: Literal["unchanged"] = "unchanged"
    path: BytesBase64


#: ``tooLarge``: a side exceeds MAX_GIT_DIFF_INPUT_BYTES; ``notUtf8``: text that is not
#: UTF-8 (a text patch would be lossy); ``specialFile``: the working path is a
#: directory, FIFO, socket or device.
GitUnsupportedReason = Literal["tooLarge", "notUtf8", "specialFile"]


@wire
class GitUnsupportedDiff:
    """The sides differ but no complete text or binary comparison can be returned."""

    kind: Literal["unsupported"] = "unsupported"
    path: BytesBase64
    reason: GitUnsupportedReason


GitDiff = GitTextDiff | GitBinaryDiff | GitUnchangedDiff | GitUnsupportedDiff
wire_union("GitDiff", GitDiff)


@wire
class SnapshotPatchRequest:
    """Capture the session's completed work (HEAD to working tree, untracked files
    included) as one immutable patch, once its workspace writers have settled."""

    session_id: SessionId
    operation: OperationRef


@wire
class PatchInfo:
    """A captured patch: its base commit (null: unborn), size, digest and file count."""

    id: PatchId
    session_id: SessionId
    head: GitObjectId | None
    files: int = count(maximum=MAX_GIT_ENTRIES)
    bytes: int = count(maximum=MAX_PATCH_BYTES)
    digest: Digest
    captured_sequence: int = count(maximum=MAX_SAFE_INTEGER)


@wire
class SnapshotPatchReceipt:
    """The captured patch and the operation receipt (a retry returns both again)."""

    patch: PatchInfo
    receipt: OperationReceipt


@wire
class ReadPatchRequest:
    """Read ``limit`` bytes of a captured patch from ``offset``."""

    session_id: SessionId
    patch_id: PatchId
    offset: int = count(maximum=MAX_PATCH_BYTES)
    limit: int = count(minimum=1, maximum=MAX_PATCH_PAGE_BYTES)


@wire
class PatchPage:
    """Original patch bytes ``[offset, offset + len(data))``; ``next_offset`` is null at
    the end. Check the reassembled bytes against ``patch.digest``."""

    patch: PatchInfo
    offset: int = count(maximum=MAX_PATCH_BYTES)
    data: str = text(
        max_len=(MAX_PATCH_PAGE_BYTES + 2) // 3 * 4, pattern=BASE64_PATTERN, limit="patch page"
    )
    next_offset: int | None = count(maximum=MAX_PATCH_BYTES)
