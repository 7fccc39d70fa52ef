"""Errors of ``emelex.temporal``: Temporal's own errors are mapped here, at the boundary,
so an application catches emelex errors whichever engine runs its turns."""

from __future__ import annotations

from emelex._errors import EmelexError, LimitExceeded
from emelex.model import Message


class TemporalError(EmelexError):
    """Base class of every error ``emelex.temporal`` raises on purpose."""


class TemporalUnavailable(TemporalError):
    """The Temporal server could not be reached (or a dev server did not start)."""


class AuthorityDrift(TemporalError):
    """A worker's authority snapshot differs from the one the session pinned: it refuses
    the turn's tasks rather than run a model or tool the session was not built with."""


class NoPendingApproval(TemporalError):
    """``respond`` named a call that is not waiting for approval (unknown, or already
    answered); Temporal's Update validator refused it, so nothing was recorded."""


class TurnNotRunning(TemporalError):
    """The session has no running turn to query, answer or cancel."""


class TurnWorkflowFailed(TemporalError):
    """The turn's workflow failed or was terminated outside emelex's control (a bug, an
    operator's ``temporal workflow terminate``, a timeout); the session's history is
    unchanged."""


class TokenLimitExceeded(TemporalError, LimitExceeded):
    """The turn used ``max_turn_tokens`` before its next model round could start."""


class Interrupted(TemporalError):
    """A portal call was cancelled before it returned."""


class RemoteTurnFailed(TemporalError):
    """A turn failed on its workers; ``kind`` names the emelex error it raised there
    (e.g. ``RoundLimitExceeded``, ``CeilingExceeded``, ``ModelFailed``). As for an
    in-process turn, ``rolled_back`` says whether history kept nothing, ``checkpoint``
    what it kept otherwise."""

    def __init__(
        self, kind: str, message: str, rolled_back: bool, checkpoint: tuple[Message, ...]
    ) -> None:
        super().__init__(f"{kind}: {message}")
        self.kind = kind
        self.rolled_back = rolled_back
        self.checkpoint = checkpoint
