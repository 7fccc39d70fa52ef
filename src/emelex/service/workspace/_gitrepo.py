"""Opening a session's Git repository with dulwich, refusing what the Host cannot honour.

Blocking functions for a worker thread. Nothing here runs the ``git`` binary or any
configured command (hooks, filters, fsmonitor, textconv): dulwich reads the control
files and objects directly. Repository control files are the repository's own; working
files are read only through the descriptor-safe workspace layer (``_gitwork``).
"""

from __future__ import annotations

import os
import stat
import threading
import zlib
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from typing import Final

import attrs
from dulwich.config import StackedConfig
from dulwich.errors import (
    ApplyDeltaError,
    ChecksumMismatch,
    NotGitRepository,
    ObjectFormatException,
)
from dulwich.objects import Blob, Commit, ObjectID, Tree
from dulwich.refs import Ref
from dulwich.repo import Repo, UnsupportedExtension, UnsupportedVersion

from emelex.contracts import MAX_GIT_ENTRIES
from emelex.service._errors import (
    ExternalFilterUnsupported,
    GitLimitExceeded,
    GitRepositoryError,
    GitUnsupported,
    NotRepositoryRoot,
    SparseCheckoutUnsupported,
    SubmoduleUnsupported,
)
from emelex.service.workspace._gitformat import MODE_GITLINK
from emelex.service.workspace._gitindex import EMPTY_INDEX, MAX_INDEX_BYTES, GitIndex, parse_index
from emelex.tools.workspace import Workspace, WorkspaceError

#: Bytes read from one attributes or ignore file.
MAX_CONTROL_FILE_BYTES: Final = 1024 * 1024
#: Attributes that make Git convert content between the index and the working tree.
_CONVERTING: Final = (b"text", b"eol", b"crlf", b"ident", b"working-tree-encoding")
_CHECK_EVERY: Final = 256


#: What reading a damaged object or pack raises in dulwich (a missing one is KeyError).
OBJECT_ERRORS: Final = (
    ValueError,
    OSError,
    zlib.error,
    ChecksumMismatch,
    ObjectFormatException,
    ApplyDeltaError,
)


class _Aborted(Exception):
    """The caller was cancelled; the worker stops at the next check (never escapes)."""


def check(abort: threading.Event | None) -> None:
    if abort is not None and abort.is_set():
        raise _Aborted


@attrs.define
class Repository:
    """An open repository at a workspace root, checked for unsupported features."""

    workspace: Workspace
    repo: Repo
    config: StackedConfig
    head: str | None
    head_ref: bytes | None
    index: GitIndex
    #: mtime of the index file: entries modified at or after it are racily clean.
    index_mtime_ns: int
    file_mode: bool
    #: Untracked directories never walked nor captured: the Host's private state when it
    #: lies inside the workspace (``dir`` relative to the root, no trailing slash).
    private: frozenset[bytes] = frozenset()

    def is_private(self, path: bytes) -> bool:
        return any(path == p or path.startswith(p + b"/") for p in self.private)

    def close(self) -> None:
        self.repo.close()
        self.workspace.close()

    def __enter__(self) -> Repository:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def head_tree(
        self, abort: threading.Event | None
    ) -> tuple[dict[bytes, tuple[int, str]], set[bytes]]:
        """HEAD's blobs (path -> (mode, blob name)) outside the directories whose index
        cache-tree still names HEAD's tree there; those directories (``dir/``, ``b""``
        for the root) are returned too: the index matches HEAD below them."""
        found: dict[bytes, tuple[int, str]] = {}
        skipped: set[bytes] = set()
        if self.head is None:
            return found, skipped
        store = self.repo.object_store
        try:
            commit = store[ObjectID(self.head.encode())]
            if not isinstance(commit, Commit):
                raise GitRepositoryError(f"HEAD names {self.head}, which is not a commit")
            pending = [(b"", commit.tree)]
            while pending:
                check(abort)
                prefix, tree_id = pending.pop()
                if self.index.trees.get(prefix) == tree_id.decode("ascii"):
                    skipped.add(prefix)
                    continue
                tree = store[tree_id]
                if not isinstance(tree, Tree):
                    raise GitRepositoryError(f"{tree_id!r} is not a tree")
                for name, mode, sha in tree.iteritems():
                    path = prefix + name
                    if mode == 0o040000:
                        pending.append((path + b"/", sha))
                    elif mode == MODE_GITLINK:
                        raise SubmoduleUnsupported(f"HEAD holds a submodule at {path!r}")
                    else:
                        found[path] = (mode, sha.decode("ascii"))
                if len(found) > MAX_GIT_ENTRIES:
                    raise GitLimitExceeded("HEAD tree entries", MAX_GIT_ENTRIES, len(found))
        except KeyError as exc:
            raise GitRepositoryError(f"HEAD's tree is incomplete: missing {exc}") from exc
        except OBJECT_ERRORS as exc:
            raise GitRepositoryError(f"cannot read HEAD's tree: {exc}") from exc
        return found, skipped

    def blob(self, oid: str, limit: int) -> bytes:
        """The content of blob ``oid`` (at most ``limit`` bytes, else GitLimitExceeded)."""
        try:
            found = self.repo.object_store[ObjectID(oid.encode())]
        except KeyError as exc:
            raise GitRepositoryError(f"object {oid} is missing") from exc
        except OBJECT_ERRORS as exc:
            raise GitRepositoryError(f"cannot read object {oid}: {exc}") from exc
        if not isinstance(found, Blob):
            raise GitRepositoryError(f"object {oid} is not a blob")
        size = found.raw_length()
        if size > limit:
            raise GitLimitExceeded("git blob bytes", limit, size)
        return found.as_raw_string()


def _has_git(path: str) -> bool:
    try:
        os.lstat(os.path.join(path, ".git"))
    except OSError:
        return False
    return True


def open_repository(root: str, private: Iterable[str] = ()) -> Repository | None:
    """The repository whose root is ``root``; None when ``root`` is in no repository.

    ``private`` names directories (absolute paths) that belong to the Host, not to the
    work: those inside the workspace are left out of untracked files and patches.
    Raises :class:`NotRepositoryRoot` when an ancestor holds the repository, and a
    :class:`GitUnsupported` subclass for a feature the Host cannot read faithfully.
    """
    try:
        workspace = Workspace.open(root)
    except WorkspaceError as exc:
        raise GitRepositoryError(f"cannot open the workspace: {exc}") from exc
    try:
        opened = _open(workspace)
    except BaseException:
        workspace.close()
        raise
    if opened is None:
        workspace.close()
        return None
    inside = []
    for directory in private:
        relative = os.path.relpath(os.path.realpath(directory), workspace.root)
        if relative != "." and not relative.startswith(".."):
            inside.append(os.fsencode(relative))
    opened.private = frozenset(inside)
    return opened


def _open(workspace: Workspace) -> Repository | None:
    try:
        info = os.stat(".git", dir_fd=workspace.fileno(), follow_symlinks=False)
    except FileNotFoundError:
        parent = os.path.dirname(workspace.root)
        while parent and parent != os.path.dirname(parent):
            if _has_git(parent):
                raise NotRepositoryRoot(
                    f"{workspace.root} is inside the repository at {parent}, not its root"
                ) from None
            parent = os.path.dirname(parent)
        if _has_git(parent):
            raise NotRepositoryRoot(
                f"{workspace.root} is inside the repository at {parent}"
            ) from None
        return None
    if stat.S_ISLNK(info.st_mode):
        raise GitUnsupported(".git is a symbolic link")
    try:
        repo = Repo(workspace.root)
    except NotGitRepository as exc:
        raise GitRepositoryError(f"{workspace.root}/.git is not a repository: {exc}") from exc
    except (UnsupportedVersion, UnsupportedExtension) as exc:
        raise GitUnsupported(f"repository format not supported: {exc}") from exc
    except (OSError, ValueError, KeyError) as exc:
        raise GitRepositoryError(f"cannot open the repository: {exc}") from exc
    try:
        return _checked(workspace, repo)
    except BaseException:
        repo.close()
        raise


def _checked(workspace: Workspace, repo: Repo) -> Repository:
    if repo.bare or os.path.realpath(repo.path) != workspace.root:
        raise NotRepositoryRoot(f"the repository's working tree is {repo.path}, not the workspace")
    config = repo.get_config_stack()

    def flag(section: bytes, name: bytes, default: bool) -> bool:
        try:
            return bool(config.get_boolean((section,), name, default))
        except ValueError as exc:
            raise GitRepositoryError(f"config {section.decode()}.{name.decode()}: {exc}") from exc

    def value(section: bytes, name: bytes) -> bytes | None:
        try:
            found = config.get((section,), name)
        except KeyError:
            return None
        return found if isinstance(found, bytes) else None

    if flag(b"core", b"sparseCheckout", False):
        raise SparseCheckoutUnsupported("core.sparseCheckout is enabled")
    if flag(b"core", b"splitIndex", False):
        raise GitUnsupported("a split index (core.splitIndex) is not supported")
    if not flag(b"core", b"symlinks", True):
        raise GitUnsupported("core.symlinks=false is not supported")
    if flag(b"core", b"ignoreCase", False):
        raise GitUnsupported("core.ignoreCase=true is not supported")
    autocrlf = (value(b"core", b"autocrlf") or b"false").lower()
    if autocrlf not in (b"false", b"no", b"off", b"0"):
        raise GitUnsupported("line-ending conversion (core.autocrlf) is not supported")
    object_format = (value(b"extensions", b"objectFormat") or b"sha1").lower()
    if object_format != b"sha1":
        raise GitUnsupported(f"object format {object_format.decode()} is not supported")
    _check_attributes_file(os.path.join(repo.controldir(), "info", "attributes"))
    global_attributes = value(b"core", b"attributesFile")
    if global_attributes is not None:
        _check_attributes_file(os.path.expanduser(os.fsdecode(global_attributes)))
    else:
        xdg = os.environ.get("XDG_CONFIG_HOME") or os.path.expanduser("~/.config")
        _check_attributes_file(os.path.join(xdg, "git", "attributes"))
    try:
        refs, head = repo.refs.follow(Ref(b"HEAD"))
    except (KeyError, ValueError, OSError) as exc:
        raise GitRepositoryError(f"cannot read HEAD: {exc}") from exc
    head_ref = refs[-1] if len(refs) > 1 else None
    index, mtime = _read_index(repo)
    return Repository(
        workspace=workspace,
        repo=repo,
        config=config,
        head=None if head is None else head.decode("ascii"),
        head_ref=None if head_ref is None else bytes(head_ref),
        index=index,
        index_mtime_ns=mtime,
        file_mode=flag(b"core", b"fileMode", True),
    )


#: Parsed indexes kept between observations (a UI asks for status again and again):
#: keyed by the file's identity and stat data, so a rewritten index (Git renames a new
#: one into place) is parsed afresh. Small indexes only, a few of them.
_INDEX_CACHE: OrderedDict[tuple[str, int, int, int, int, int], GitIndex] = OrderedDict()
_INDEX_CACHE_LOCK = threading.Lock()
_INDEX_CACHE_ENTRIES: Final = 4
_INDEX_CACHE_MAX_BYTES: Final = 16 * 1024 * 1024


def _read_index(repo: Repo) -> tuple[GitIndex, int]:
    path = repo.index_path()
    try:
        with open(path, "rb") as handle:
            info = os.fstat(handle.fileno())
            key = (path, info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)
            with _INDEX_CACHE_LOCK:
                cached = _INDEX_CACHE.get(key)
                if cached is not None:
                    _INDEX_CACHE.move_to_end(key)
                    return cached, info.st_mtime_ns
            data = handle.read(MAX_INDEX_BYTES + 1)
    except FileNotFoundError:
        return EMPTY_INDEX, 0
    except OSError as exc:
        raise GitRepositoryError(f"cannot read the index: {exc}") from exc
    index = parse_index(data, path)
    if len(data) == info.st_size and len(data) <= _INDEX_CACHE_MAX_BYTES:
        with _INDEX_CACHE_LOCK:
            _INDEX_CACHE[key] = index
            while len(_INDEX_CACHE) > _INDEX_CACHE_ENTRIES:
                _INDEX_CACHE.popitem(last=False)
    return index, info.st_mtime_ns


def attribute_problem(data: bytes) -> tuple[type[GitUnsupported], str] | None:
    """Why a ``.gitattributes`` text asks for something unsupported, or None.

    ``filter=`` names an external command (never run); content conversions (``text``,
    ``eol``, ``crlf``, ``ident``, ``working-tree-encoding``) would change what Git
    compares. Unsetting them (``-text``, ``binary``) is fine.
    """
    for raw in data.splitlines():
        line = raw.strip()
        if not line or line.startswith(b"#"):
            continue
        for token in _tokens(line)[1:]:
            if token.startswith((b"-", b"!")):
                continue
            name = token.split(b"=", 1)[0]
            shown = token.decode(errors="replace")
            if name == b"filter":
                return ExternalFilterUnsupported, f"external filter {shown!r} is never run"
            if name in _CONVERTING:
                return GitUnsupported, f"content conversion attribute {shown!r} is not supported"
    return None


def _tokens(line: bytes) -> list[bytes]:
    if line.startswith(b'"'):
        end = line.find(b'"', 1)
        while end > 0 and line[end - 1 : end] == b"\\":
            end = line.find(b'"', end + 1)
        if end < 0:
            return [line]
        return [line[: end + 1], *line[end + 1 :].split()]
    return line.split()


def raise_for_attributes(data: bytes, where: str) -> None:
    problem = attribute_problem(data)
    if problem is not None:
        kind, detail = problem
        raise kind(f"{where}: {detail}")


def _check_attributes_file(path: str) -> None:
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_CONTROL_FILE_BYTES + 1)
    except (FileNotFoundError, NotADirectoryError):
        return
    except OSError as exc:
        raise GitRepositoryError(f"cannot read {path}: {exc}") from exc
    if len(data) > MAX_CONTROL_FILE_BYTES:
        raise GitLimitExceeded("git attributes file bytes", MAX_CONTROL_FILE_BYTES, len(data))
    raise_for_attributes(data, path)


def parents(path: bytes) -> Iterator[bytes]:
    """Every proper ancestor directory of ``path`` as ``dir/`` (shallowest first)."""
    start = 0
    while (slash := path.find(b"/", start)) >= 0:
        yield path[: slash + 1]
        start = slash + 1


__all__ = [
    "Repository",
    "attribute_problem",
    "check",
    "open_repository",
    "parents",
    "raise_for_attributes",
]
