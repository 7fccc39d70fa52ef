"""Errors raised by the actor runtime."""

from __future__ import annotations

from collections.abc import Sequence

from emelex._errors import EmelexError, LimitExceeded


class ActorError(EmelexError):
    """Root of the runtime's errors."""


class ActorStartupError(ActorError):
    """An actor ended before it signalled that it had started."""


class DetachedWorkError(ActorError):
    """Work outlived its owner: actors were still registered (or threads alive) at scope exit.

    ``actors`` holds a description of every leaked actor, e.g. ``"tool 'grep' (#12, running)"``.
    """

    def __init__(self, owner: str, actors: Sequence[str]) -> None:
        self.owner = owner
        self.actors = tuple(actors)
        super().__init__(f"{owner} exited with detached work: {', '.join(self.actors)}")


class MailboxClosed(ActorError):
    """The mailbox was closed: nothing more can be sent, or everything has been received."""


class MailboxFull(LimitExceeded, ActorError):
    """A non-blocking send found the mailbox at capacity."""


class WorkerClosed(ActorError):
    """A dedicated worker is shutting down or has stopped and takes no more jobs."""


class WorkerBusy(LimitExceeded, ActorError):
    """A non-blocking submit found the dedicated worker's job queue full."""


class WorkerJobAborted(ActorError):
    """A job was aborted before it started on the worker thread."""


class ActorDropped(ActorError):
    """A policy-governed call was dropped (cancelled before it produced a result)."""
