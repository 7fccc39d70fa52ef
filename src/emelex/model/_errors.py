"""Errors of the model layer.

Every error the model layer raises on purpose derives from :class:`ModelError`. Values
are checked when they are built, so an invalid message, option set or event never
reaches a backend; the subclass names the kind of value that was refused.
"""

from __future__ import annotations

from emelex._errors import EmelexError


class ModelError(EmelexError):
    """Base class of every error raised by ``emelex.model`` and model backends."""


class InvalidMessage(ModelError):
    """A message, content part or tool call breaks the rules of the conversation format."""


class InvalidOptions(ModelError):
    """A generation option or reasoning setting is out of range or of the wrong type."""


class InvalidRequest(ModelError):
    """A generation request, tool definition or client argument is malformed."""


class InvalidResponse(ModelError):
    """A response, usage record or stream event is malformed."""


class ToolCallMissing(ModelError):
    """A generation whose tool choice forced a call (``ToolChoice.REQUIRED`` or
    ``ToolChoice.tool(name)``) ended without one: no call at all, or none of the named
    tool. Raised instead of an answer the caller did not ask for.

    ``tool`` is the forced tool's name (``None`` for ``REQUIRED``), ``finish_reason``
    how the generation ended, ``text`` what the model wrote instead (model output: an
    attribute for diagnosis, never part of the message) and ``calls`` the names of the
    calls it made instead.
    """

    def __init__(
        self,
        message: str,
        *,
        tool: str | None,
        finish_reason: str,
        text: str,
        calls: tuple[str, ...] = (),
    ) -> None:
        super().__init__(message)
        self.tool = tool
        self.finish_reason = finish_reason
        self.text = text
        self.calls = calls
