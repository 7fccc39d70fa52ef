"""Completed-work patches: capture once the workspace's writers settle, read by pages.

A capture compares HEAD with the working tree (staged, unstaged and untracked changes
alike), reading every changed file completely, and buffers the whole patch before it is
stored: what ``read_patch`` returns is always that original artifact, also after later
turns changed the workspace and after Host restarts. The Host's session queues say who
may write a workspace: every session sharing it (forks, WorkHub workers) must have no
running turn before and after the capture, or it is taken again.
"""

from __future__ import annotations

import hashlib
import json
import threading
import uuid
from typing import TYPE_CHECKING, Final

import attrs
import trio

from emelex.contracts import (
    MAX_PATCH_BYTES,
    OperationReceipt,
    PatchInfo,
    PatchPage,
    ReadPatchRequest,
    SnapshotPatchReceipt,
    from_wire,
    to_base64,
    to_wire,
)
from emelex.service._digest import operation_digest
from emelex.service._errors import (
    GitLimitExceeded,
    GitUnsupported,
    OperationConflict,
    ServiceError,
    SubmoduleUnsupported,
    UnknownPatch,
)
from emelex.service._watch import Subscriber
from emelex.service.workspace._git import head_side, run_abortable, staged_changes
from emelex.service.workspace._gitformat import file_patch
from emelex.service.workspace._gitrepo import check, open_repository
from emelex.service.workspace._gitwork import Special, read_work, scan_worktree
from emelex.store import NewEvent, OperationRecord, StoredEvent
from emelex.store import OperationConflict as StoreOperationConflict

if TYPE_CHECKING:
    from emelex.service._registry import Services
    from emelex.service._session import HostSession as _SessionState

#: The event recording a captured patch in its session's log.
PATCH_CAPTURED: Final = "patch.captured"
_PATCH_NAMESPACE: Final = uuid.UUID("0b6f1f52-3c1e-4a8e-9d57-5b1f0c7e2a41")


@attrs.frozen
class Captured:
    head: str | None
    data: bytes
    files: int


def capture_sync(
    root: str, abort: threading.Event | None = None, private: tuple[str, ...] = ()
) -> Captured:
    """The completed-work patch of the repository at ``root``: HEAD to working tree in
    ``git diff --binary --full-index`` form, untracked files (outside ``private``
    directories) as additions."""
    repo = open_repository(root, private)
    if repo is None:
        raise ServiceError(f"{root} holds no Git repository: there is no work to capture")
    with repo:
        staged = staged_changes(repo, abort)
        scan = scan_worktree(repo, abort)
        nested = [path for path, _mode in scan.untracked if path.endswith(b"/")]
        if nested:
            raise SubmoduleUnsupported(f"a nested repository at {nested[0]!r} cannot be captured")
        paths = {change.path for change in staged}
        paths.update(change.path for change in scan.changed)
        paths.update(path for path, _mode in scan.untracked)
        out = bytearray()
        files = 0
        for path in sorted(paths):
            check(abort)
            tracked = repo.index.get(path)
            old = head_side(repo, path, MAX_PATCH_BYTES)
            new = read_work(repo, path, MAX_PATCH_BYTES, None if tracked is None else tracked.mode)
            if isinstance(new, Special):
                if not new.directory:
                    raise GitUnsupported(f"{path!r} is a FIFO, socket or device: not capturable")
                new = None  # a directory replaced the file (its files are listed apart)
            block = file_patch(path, old, new, binary=True)
            if block:
                files += 1
                out += block
                if len(out) > MAX_PATCH_BYTES:
                    raise GitLimitExceeded("patch bytes", MAX_PATCH_BYTES, len(out))
        return Captured(head=repo.head, data=bytes(out), files=files)


def _marks(writers: list[_SessionState]) -> list[tuple[int, bool]]:
    return [(other.queue.revision, other.queue.running is not None) for other in writers]


async def _settled(services: Services, writers: list[_SessionState]) -> None:
    """Return once no writer runs a turn (queue changes wake this up, no polling)."""
    while True:
        services.registry.check_open()
        if all(other.queue.running is None for other in writers):
            return
        subscriber = Subscriber(None, 8)
        for other in writers:
            other.subscribers.add(subscriber)
        try:
            if all(other.queue.running is None for other in writers):
                continue
            # Any update (or a lagged end) means "look again"; the Host's close ends it.
            await subscriber.receive()
        finally:
            for other in writers:
                other.subscribers.discard(subscriber)


def _patch_id(session_id: str, operation: str) -> str:
    return "p-" + uuid.uuid5(_PATCH_NAMESPACE, f"{session_id}\0{operation}").hex


async def snapshot_patch(
    services: Services, state: _SessionState, operation: str
) -> SnapshotPatchReceipt:
    """Capture the session's completed work once its workspace writers settle."""
    session_id = state.session_id
    digest = operation_digest("snapshotPatch", {"sessionId": session_id})
    original = await services.find_receipt(state, operation, digest)
    if original is not None:
        return from_wire(SnapshotPatchReceipt, original)
    while True:
        writers = services.registry.sharing(state.workspace)
        await _settled(services, writers)
        before = _marks(writers)
        captured = await run_abortable(
            capture_sync, state.workspace, name="snapshot-patch", private=services.private_dirs
        )
        async with state.lock:
            services.registry.check_open()
            if _marks(services.registry.sharing(state.workspace)) != before:
                continue  # a turn ran meanwhile: what was read may be half-written
            receipt = _receipt(state, operation, captured)
            record = OperationRecord(operation, digest, json.dumps(to_wire(receipt)))
            event = NewEvent(PATCH_CAPTURED, None, to_wire(receipt.patch))
            try:
                result = await services.store.append_patch(
                    session_id,
                    receipt.patch.id,
                    json.dumps(to_wire(receipt.patch)),
                    captured.data,
                    [event],
                    operation=record,
                )
            except StoreOperationConflict as exc:
                raise OperationConflict(
                    f"operation {operation!r} was already used for a different request"
                ) from exc
            if result.replayed:
                assert result.receipt is not None
                return from_wire(SnapshotPatchReceipt, json.loads(result.receipt))
            # The patch event goes through the reducer like every other event.
            state.absorb([StoredEvent(result.sequences[-1], event.kind, None, 0.0, event.payload)])
            return receipt


def _receipt(state: _SessionState, operation: str, captured: Captured) -> SnapshotPatchReceipt:
    sequence = state.next_sequence
    info = from_wire(
        PatchInfo,
        {
            "id": _patch_id(state.session_id, operation),
            "sessionId": state.session_id,
            "head": captured.head,
            "files": captured.files,
            "bytes": len(captured.data),
            "digest": "sha256:" + hashlib.sha256(captured.data).hexdigest(),
            "capturedSequence": sequence,
        },
    )
    return SnapshotPatchReceipt(
        patch=info,
        receipt=from_wire(
            OperationReceipt,
            {
                "operation": operation,
                "action": "snapshotPatch",
                "sessionId": state.session_id,
                "sequence": sequence,
            },
        ),
    )


async def read_patch(
    services: Services, session_id: str, patch_id: str, offset: int, limit: int
) -> PatchPage:
    """Original bytes ``[offset, offset + limit)`` of a captured patch."""
    request = ReadPatchRequest(
        session_id=session_id,  # type: ignore[arg-type]
        patch_id=patch_id,  # type: ignore[arg-type]
        offset=offset,
        limit=limit,
    )
    found = await services.store.read_patch(session_id, request.patch_id, offset, limit)
    if found is None:
        raise UnknownPatch(f"session {session_id} captured no patch {patch_id!r}")
    info_json, size, data = found
    info = from_wire(PatchInfo, json.loads(info_json))
    if offset > size:
        raise ServiceError(f"offset {offset} is past the patch's end ({size} bytes)")
    end = offset + len(data)
    await trio.lowlevel.checkpoint()
    return PatchPage(
        patch=info, offset=offset, data=to_base64(data), next_offset=end if end < size else None
    )
