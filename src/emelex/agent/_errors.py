"""Errors of the agent harness, rooted in :class:`AgentError`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from emelex._errors import EmelexError, LimitExceeded
from emelex._text import shorten

if TYPE_CHECKING:
    from emelex.model import Message


class AgentError(EmelexError):
    """Root of the harness's errors.

    Errors raised by a failed turn also say what happened to its history:
    ``rolled_back`` is True when nothing was committed (no tool may have run), False
    when a structurally complete checkpoint was committed (``checkpoint`` holds exactly
    those messages), and None for errors raised outside a turn.
    """

    rolled_back: bool | None = None
    checkpoint: tuple[Message, ...] = ()


class InvalidWorkspace(AgentError):
    """The workspace is not an existing directory that can be opened."""


class InvalidToolDeclaration(AgentError):
    """A tool declaration is malformed: bad JSON Schema, duplicate or invalid name."""


class InvalidHistory(AgentError):
    """Resumed history is structurally invalid (calls without results, duplicates, ...)."""


class ConfigurationConflict(AgentError):
    """Two settings contradict each other (e.g. a system prompt and a system message)."""


class CapabilityMissing(AgentError):
    """The model is proven unable to preserve something the session relies on."""


class CeilingExceeded(LimitExceeded, AgentError):
    """A request or the history exceeds an aggregate resource ceiling."""


class RoundLimitExceeded(LimitExceeded, AgentError):
    """The turn used all of its model rounds (``max_rounds``) and the model still called
    tools instead of answering. History follows the usual rule: rolled back if no tool
    may have run, otherwise the complete rounds are committed as a checkpoint."""

    def __init__(self, maximum: int) -> None:
        super().__init__("max_rounds", maximum, maximum + 1)
        self.args = (
            f"the turn used its {maximum} model round{'s' if maximum != 1 else ''} "
            "(max_rounds) and the model was still calling tools; raise max_rounds or ask "
            "for a smaller step",
        )


class RetryBudgetExhausted(LimitExceeded, AgentError):
    """The model needed more corrections than a retry budget allows: one tool's
    (``tool`` names it; ``max_retries`` on the tool) or the turn's (``tool`` is None;
    ``max_retries`` of the session). A correction is an error result that asks the model
    to fix its call: invalid or malformed arguments, an unknown tool, or
    :class:`~emelex.tools.RetryWithFeedback`; each round with corrections counts once.
    ``feedback`` is the last correction sent. History follows the usual rule: the round
    that spent the budget is committed with the rest of the checkpoint when a tool may
    have run, and everything is rolled back otherwise."""

    def __init__(self, maximum: int, *, tool: str | None, feedback: str) -> None:
        limit = "max_retries" if tool is None else f"max_retries of tool {tool!r}"
        super().__init__(limit, maximum, maximum + 1)
        self.tool = tool
        self.feedback = feedback
        whose = "the turn's" if tool is None else f"tool {tool!r}'s"
        self.args = (
            f"the model still needed corrections after {whose} {maximum} "
            f"retr{'y' if maximum == 1 else 'ies'} (last: {shorten(feedback, 300)})",
        )


class ToolUnavailable(AgentError):
    """A tool name is outside the session's tool-authority ceiling."""


class UnsupportedContent(AgentError):
    """User content of a kind the harness refuses (encoded video)."""


class InvalidTurnOptions(AgentError):
    """Per-turn generation options are invalid on their own or merged with defaults."""


class TurnInProgress(AgentError):
    """A session runs one turn at a time."""


class SessionClosed(AgentError):
    """The session was closed."""


class TurnCancelled(AgentError):
    """The turn's AgentCancellation fired."""


class ModelFailed(AgentError):
    """The model (or its stream) raised; the original error is the ``__cause__``."""


class ProtocolViolation(AgentError):
    """The model broke the stream contract (non-prefix deltas, missing completion, ...)."""


class EventConsumerError(AgentError):
    """The ``on_event`` consumer of a turn raised; the error is the ``__cause__``."""


class ApprovalFailed(AgentError):
    """The approval policy raised instead of deciding; the error is the ``__cause__``."""


class OutputValidationError(AgentError):
    """The model's answer did not become the requested ``output_type`` within the retry
    budget. ``answer`` is the last answer text, ``problem`` what was wrong with it and
    ``attempts`` how many structured answers were asked for. The turns that produced
    those answers completed, so they stay committed: ``rolled_back`` is False and
    ``checkpoint`` holds their messages."""

    def __init__(self, message: str, *, answer: str, problem: str, attempts: int) -> None:
        super().__init__(message)
        self.answer = answer
        self.problem = problem
        self.attempts = attempts


class InvalidTurnProgress(AgentError):
    """A progress record that cannot be continued: not a turn's messages (its first is
    not the user's), an unknown call named as not started, or an unreadable shape."""


class ToolJournalFailed(AgentError):
    """The session's tool journal raised before a call could start: the call did not
    run, and the turn ended by the usual rule (rolled back, or checkpointed when an
    earlier tool may have run)."""


class HookRefused(AgentError):
    """A hook ended the turn on purpose (``FailTurn`` or raised). ``hook`` names it,
    ``point`` is where, ``reason`` why. History follows the usual rule."""

    def __init__(self, message: str, *, hook: str, point: str, reason: str) -> None:
        super().__init__(message)
        self.hook = hook
        self.point = point
        self.reason = reason


class HookFailed(AgentError):
    """A hook raised, returned a value its point does not allow, or rewrote something
    into a value that fails validation (arguments outside the tool's schema, a
    request over a ceiling). History follows the usual rule."""


class GuardrailTripped(HookRefused):
    """A guardrail's tripwire stopped the turn. ``guardrail`` names it and ``kind`` is
    ``"input"``, ``"output"`` or ``"tool"``; ``info`` is what the check returned."""

    def __init__(self, guardrail: str, kind: str, point: str, reason: str, info: Any) -> None:
        super().__init__(
            f"guardrail {guardrail!r} ({kind}) tripped: {reason}",
            hook=guardrail,
            point=point,
            reason=reason,
        )
        self.guardrail = guardrail
        self.kind = kind
        self.info = info
