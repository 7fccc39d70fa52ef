"""``git_status`` and ``git_diff`` of a workspace: fresh, read-only observations.

The blocking functions take an abort flag checked between files; the async wrappers run
them on a worker thread (an actor) and set the flag when the caller is cancelled, then
wait for the thread to stop before re-raising.
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from dulwich.errors import NotTreeError
from dulwich.object_store import tree_lookup_path
from dulwich.objects import Commit

from emelex.contracts import (
    MAX_GIT_DIFF_INPUT_BYTES,
    GitArea,
    GitBinaryDiff,
    GitDiff,
    GitEntry,
    GitStatus,
    GitTextDiff,
    GitUnchangedDiff,
    GitUnsupportedDiff,
    to_base64,
    trusted,
)
from emelex.runtime import run_in_worker
from emelex.service._errors import (
    GitLimitExceeded,
    GitRepositoryError,
    InvalidWorkspacePath,
    ServiceError,
)
from emelex.service.workspace._files_access import CONTROL_NAMES, shown
from emelex.service.workspace._gitformat import (
    MODE_EXECUTABLE,
    MODE_FILE,
    MODE_SYMLINK,
    Side,
    file_patch,
    is_binary,
    same_kind,
)
from emelex.service.workspace._gitrepo import (
    OBJECT_ERRORS,
    Repository,
    check,
    open_repository,
    parents,
    raise_for_attributes,
)
from emelex.service.workspace._gitwork import (
    Change,
    Special,
    read_control,
    read_work,
    scan_worktree,
)

T = TypeVar("T")

_MODE_NAMES = {MODE_FILE: "file", MODE_EXECUTABLE: "executable", MODE_SYMLINK: "symlink"}
_AREAS = ("staged", "worktree", "untracked")


def _mode(mode: int | None) -> Any:
    if mode is None:
        return None
    # Trees written by old tools may hold 100664 and the like: Git reads them as files.
    return _MODE_NAMES.get(mode, "executable" if mode & 0o100 else "file")


def _change_kind(old: int | None, new: int | None) -> str:
    if old is None:
        return "added"
    if new is None:
        return "deleted"
    return "modified" if same_kind(old, new) else "typeChanged"


def _entry(change: Change) -> GitEntry:
    # Built from values this module derived and checked: no construction checks.
    return trusted(
        GitEntry,
        path=to_base64(change.path),
        change=_change_kind(change.old_mode, change.new_mode),
        old_mode=_mode(change.old_mode),
        new_mode=_mode(change.new_mode),
        old_object=change.old_oid,
        new_object=change.new_oid,
    )


def staged_changes(repo: Repository, abort: threading.Event | None) -> list[Change]:
    """HEAD against the index, path by path (renames are deletion plus addition)."""
    head, skipped = repo.head_tree(abort)
    if b"" in skipped:
        return []  # the index's cache-tree says the whole index is HEAD's tree
    changes = []
    covered: dict[bytes, bool] = {}  # directory -> lies below a skipped directory
    for path, offset in repo.index.offsets.items():
        if skipped:
            directory = path[: path.rfind(b"/") + 1]
            hidden = covered.get(directory)
            if hidden is None:
                hidden = covered[directory] = any(p in skipped for p in parents(directory))
            if hidden:
                continue
        tracked = repo.index.at(offset)
        before = head.get(path)
        if before is None:
            changes.append(Change(path, None, tracked.mode, None, tracked.oid))
        elif before != (tracked.mode, tracked.oid):
            changes.append(Change(path, before[0], tracked.mode, before[1], tracked.oid))
    check(abort)
    for path, (mode, oid) in head.items():
        if path not in repo.index:
            changes.append(Change(path, mode, None, oid, None))
    changes.sort(key=lambda change: change.path)
    return changes


def status_sync(
    root: str, abort: threading.Event | None = None, private: tuple[str, ...] = ()
) -> GitStatus | None:
    """The status of the repository at ``root`` (None: no repository there); untracked
    directories in ``private`` (the Host's own state) are left out, and so is every path
    the files API never lists (an ``.emelex`` marker at any depth): one rule for both."""
    repo = open_repository(root, private)
    if repo is None:
        return None
    with repo:
        staged = staged_changes(repo, abort)
        scan = scan_worktree(repo, abort)
        return trusted(
            GitStatus,
            head=repo.head,
            head_ref=None if repo.head_ref is None else to_base64(repo.head_ref),
            staged=tuple(_entry(c) for c in staged if _listed(c.path)),
            worktree=tuple(_entry(c) for c in scan.changed if _listed(c.path)),
            untracked=tuple(
                _entry(Change(path, None, mode, None, None))
                for path, mode in scan.untracked
                if _listed(path)
            ),
        )


def _listed(path: bytes) -> bool:
    """Whether the files API lists ``path`` (no control name such as ``.emelex`` in it)."""
    return not CONTROL_NAMES.intersection(path.split(b"/"))


def _check_path(path: bytes) -> None:
    parts = path.split(b"/")
    if not path or b"\0" in path or any(p in (b"", b".", b"..") for p in parts):
        raise ServiceError(f"{path!r} is not a Git path (relative, no empty, . or .. parts)")
    if parts[0] == b".git":
        raise ServiceError("paths inside .git are not part of the working tree")
    if not _listed(path):
        raise InvalidWorkspacePath(f"{shown(path)} is never listed")


def head_side(repo: Repository, path: bytes, limit: int) -> Side | None:
    """HEAD's side of ``path`` (None: absent or a directory there)."""
    if repo.head is None:
        return None
    try:
        commit = repo.repo[repo.head.encode()]
        if not isinstance(commit, Commit):
            raise GitRepositoryError(f"HEAD names {repo.head}, which is not a commit")
        mode, oid = tree_lookup_path(repo.repo.object_store.__getitem__, commit.tree, path)
    except (KeyError, NotTreeError):
        return None  # absent, or below a file of HEAD
    except (*OBJECT_ERRORS, TypeError) as exc:
        raise GitRepositoryError(f"cannot look {path!r} up in HEAD: {exc}") from exc
    if mode & 0o170000 not in (0o100000, MODE_SYMLINK):
        return None  # a tree (the path names a directory in HEAD)
    text = oid.decode("ascii")
    return Side(mode, text, repo.blob(text, limit))


def _index_side(repo: Repository, path: bytes) -> Side | None:
    tracked = repo.index.get(path)
    if tracked is None:
        return None
    return Side(tracked.mode, tracked.oid, repo.blob(tracked.oid, MAX_GIT_DIFF_INPUT_BYTES))


def _work_side(repo: Repository, path: bytes) -> Side | Special | None:
    tracked = repo.index.get(path)
    mode = None if tracked is None else tracked.mode
    return read_work(repo, path, MAX_GIT_DIFF_INPUT_BYTES, mode)


def _check_attributes(repo: Repository, path: bytes) -> None:
    for directory in (b"", *parents(path)):
        name = directory + b".gitattributes"
        data = read_control(repo.workspace, name)
        if data is not None:
            raise_for_attributes(data, os.fsdecode(name))


def _result(path: bytes, old: Side | None, new: Side | None) -> GitDiff:
    encoded = to_base64(path)
    if (old is None and new is None) or (
        old is not None and new is not None and (old.mode, old.data) == (new.mode, new.data)
    ):
        return GitUnchangedDiff(path=encoded)  # type: ignore[arg-type]
    sides: dict[str, Any] = {
        "path": encoded,
        "old_mode": _mode(None if old is None else old.mode),
        "new_mode": _mode(None if new is None else new.mode),
        "old_object": None if old is None else old.oid,
        "new_object": None if new is None else new.oid,
    }
    old_data = b"" if old is None else old.data
    new_data = b"" if new is None else new.data
    if is_binary(old_data) or is_binary(new_data):
        return GitBinaryDiff(old_size=len(old_data), new_size=len(new_data), **sides)
    try:
        patch = file_patch(path, old, new, binary=False).decode("utf-8")
    except UnicodeDecodeError:
        return GitUnsupportedDiff(path=encoded, reason="notUtf8")  # type: ignore[arg-type]
    return GitTextDiff(patch=patch, **sides)


def diff_sync(
    root: str,
    area: GitArea,
    path: bytes,
    abort: threading.Event | None = None,
    private: tuple[str, ...] = (),
) -> GitDiff | None:
    """One path's diff in ``area`` (None: no repository at ``root``)."""
    if area not in _AREAS:
        raise ServiceError(f"unknown git diff area {area!r}")
    _check_path(path)
    repo = open_repository(root, private)
    if repo is None:
        return None
    with repo:
        _check_attributes(repo, path)
        check(abort)
        try:
            if area == "staged":
                return _result(
                    path,
                    head_side(repo, path, MAX_GIT_DIFF_INPUT_BYTES),
                    _index_side(repo, path),
                )
            if area == "untracked" and (path in repo.index or repo.is_private(path)):
                return GitUnchangedDiff(path=to_base64(path))  # type: ignore[arg-type]
            old = _index_side(repo, path) if area == "worktree" else None
            if area == "worktree" and old is None:
                return GitUnchangedDiff(path=to_base64(path))  # type: ignore[arg-type]
            new = _work_side(repo, path)
        except GitLimitExceeded:
            return GitUnsupportedDiff(path=to_base64(path), reason="tooLarge")  # type: ignore[arg-type]
        if isinstance(new, Special):
            if not new.directory or area == "untracked":
                return GitUnsupportedDiff(path=to_base64(path), reason="specialFile")  # type: ignore[arg-type]
            new = None  # a directory replaced the tracked file: a deletion, as in status
        return _result(path, old, new)


async def run_abortable(fn: Callable[..., T], *args: Any, name: str, **kwargs: Any) -> T:
    """Run ``fn(*args, abort=flag, **kwargs)`` on a worker thread; cancelling the caller
    sets the flag, waits for the thread to stop at its next check, then re-raises
    Cancelled."""
    abort = threading.Event()
    # The worker raises _Aborted only once on_cancel set the flag, and then run_in_worker
    # re-raises the caller's Cancelled: _Aborted never escapes.
    return await run_in_worker(
        functools.partial(fn, *args, abort=abort, **kwargs), name=name, on_cancel=abort.set
    )


async def git_status(root: str, private: tuple[str, ...] = ()) -> GitStatus | None:
    """Status of the repository whose root is ``root`` (see :func:`status_sync`)."""
    return await run_abortable(status_sync, root, name="git-status", private=private)


async def git_diff(
    root: str, area: GitArea, path: bytes, private: tuple[str, ...] = ()
) -> GitDiff | None:
    """Diff of one path (see :func:`diff_sync`)."""
    return await run_abortable(diff_sync, root, area, path, name="git-diff", private=private)
