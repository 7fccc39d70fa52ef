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
