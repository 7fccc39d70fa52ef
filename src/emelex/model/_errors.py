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
