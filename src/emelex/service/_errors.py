"""Errors of the agent service (all :class:`ServiceError`, under ``EmelexError``)."""

from __future__ import annotations

from emelex._errors import EmelexError, LimitExceeded


class ServiceError(EmelexError):
    """The Host refused or failed an operation."""


class UnknownSession(ServiceError):
    """No session of this Host has that id."""


class UnknownAgent(ServiceError):
    """The Host knows no agent by that name."""


class UnknownInvocation(ServiceError):
    """The session never admitted that invocation."""


class UnknownInteraction(ServiceError):
    """The session holds no interaction with that id."""


class InteractionSettled(ServiceError):
    """The interaction was already answered or settled; it is never asked again."""


class OperationConflict(ServiceError):
    """An operation reference was reused for a different request. Retry a mutation with
    exactly its original request to get its original receipt."""


class QueueFull(ServiceError):
    """The session's work queue holds its maximum of unfinished invocations."""


class HostClosed(ServiceError):
    """The Host is closing or closed."""


class ForkRefused(ServiceError):
    """The fork cannot be made as asked: the revision or turn does not exist or is not
    settled there, or the fork would enable tools its source has not."""


class AttachmentError(ServiceError):
    """The attachments resource does not match its metadata (a size, a digest, a
    duplicate name, the total) or is larger than the Host accepts."""


# -- the wire transport (issue 15: emelex serve, HostClient) --------------------------
class TransportError(ServiceError):
    """The Host could not be reached, or the exchange broke the wire protocol."""


class Unauthorized(TransportError):
    """The request carried no bearer token, or a wrong one."""


class InvalidRequest(TransportError):
    """The request is not one JSON object of the operation's contract (bad JSON, nested
    too deep, the wrong shape or an unexpected WebSocket frame)."""


class RequestTooLarge(TransportError):
    """The request body or WebSocket message exceeds the Host's bound."""


class RequestTimedOut(TransportError):
    """A request's body, or a subscription's first frame, did not arrive in time."""


class UnknownRoute(TransportError):
    """No operation or subscription of the Host has that name."""


class TooManyConnections(TransportError):
    """The Host holds its maximum of open connections; retry once others closed."""


class HostLocked(ServiceError):
    """Another running Host already serves this root (the lock file names its pid)."""


class ServeError(TransportError):
    """``emelex serve`` cannot start as configured (address, TLS, permissions)."""


# -- issue 14, part A: git status/diff and completed-work patches ---------------------------


class NotRepositoryRoot(ServiceError):
    """The session's workspace lies inside a Git repository but is not its root (the
    Host reads a repository only from its root)."""


class GitRepositoryError(ServiceError):
    """The repository could not be read (corrupt or missing objects, an unreadable
    index, a malformed reference)."""


class GitUnsupported(ServiceError):
    """The repository uses a feature the Host does not implement; it fails explicitly
    instead of answering wrongly (configured commands are never run)."""


class ExternalFilterUnsupported(GitUnsupported):
    """A ``filter=`` attribute names an external clean/smudge filter."""


class SparseCheckoutUnsupported(GitUnsupported):
    """Sparse checkout is enabled, or the index holds skip-worktree or sparse entries."""


class SubmoduleUnsupported(GitUnsupported):
    """The repository holds a submodule (a gitlink) or a nested repository."""


class GitLimitExceeded(ServiceError, LimitExceeded):
    """A bound on repository reads was reached (index entries, status entries, file
    size read for a diff or patch, patch size)."""

    def __init__(self, limit: str, maximum: int, actual: int | None = None) -> None:
        LimitExceeded.__init__(self, limit, maximum, actual)


class UnknownPatch(ServiceError):
    """The session captured no patch with that id."""


# -- workspace files (issue 14, part B): list_files, watch_files, read_file ---------------
class WorkspaceUnavailable(ServiceError):
    """The session's workspace cannot be used under its authority: it is gone, no longer a
    directory, or was replaced after the operation began."""


class InvalidWorkspacePath(ServiceError):
    """The path cannot be used: a symlink or non-directory on the way, a directory that is
    never listed (``.git``, the workspace marker, private Host state), a hidden path, or
    a malformed path."""


class WorkspacePathNotFound(InvalidWorkspacePath):
    """A directory named by the path does not exist."""


class UnrepresentableName(InvalidWorkspacePath):
    """A file name cannot be represented losslessly as bytes on this platform."""


class FileAccessDenied(ServiceError):
    """The operating system refused access (permissions) to a path of the workspace."""


class FileReadError(ServiceError):
    """An I/O error while reading the workspace."""


class FileTooLarge(ServiceError, LimitExceeded):
    """A file is larger than a read captures (``MAX_READ_FILE_BYTES``)."""

    def __init__(self, maximum: int, actual: int) -> None:
        LimitExceeded.__init__(self, "read_file bytes", maximum, actual)


class FileReadIncomplete(ServiceError):
    """A read's updates ended before its ``end`` item: the content is not complete."""


class FileReadCorrupt(ServiceError):
    """A read's updates do not verify: offsets not contiguous, a size, version or digest
    that does not match, or an update out of order."""
