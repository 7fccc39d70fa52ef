"""Errors of the agent service (all :class:`ServiceError`, under ``EmelexError``)."""

from __future__ import annotations

from emelex._errors import EmelexError


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
