"""Errors of the OpenAI-compatible HTTP backend.

Every failure of a request or a stream is an :class:`OpenAIError` (a
:class:`~emelex.model.ModelError`); httpx errors are mapped where they surface and
chained with ``raise ... from``, so ``__cause__`` holds the original.
"""

from __future__ import annotations

from emelex._errors import LimitExceeded
from emelex._text import clip
from emelex.model._errors import InvalidRequest, InvalidResponse, ModelError


class OpenAIError(ModelError):
    """Base class of the errors raised by :class:`~emelex.model.openai.OpenAIModel`."""


class UnsupportedContent(OpenAIError, InvalidRequest):
    """A message holds content the chat completions format cannot carry (a video part,
    or media outside a user message). Raised when the generation is entered, before
    anything is sent."""


class TransportFailure(OpenAIError):
    """The conversation with the server broke (connecting, waiting or reading); the
    request may or may not have been processed, so retrying is the caller's decision."""


class ConnectionFailed(TransportFailure):
    """No connection to the server could be made (refused, unresolvable, TLS failure,
    ``connect_timeout`` or no free connection in the client's pool in time)."""


class Disconnected(TransportFailure):
    """The server closed the connection before the response was complete (before the
    response headers, inside the body, or before the stream's ``data: [DONE]``)."""


class StreamStalled(TransportFailure):
    """No byte arrived within ``stall_timeout`` seconds (waiting for the response or
    between two reads of its body). ``timeout`` is the configured bound."""

    def __init__(self, message: str, *, timeout: float) -> None:
        super().__init__(message)
        self.timeout = timeout


class HTTPStatusError(OpenAIError):
    """The server answered with a status other than 2xx.

    ``status`` is the HTTP status, ``body`` the start of the response body (decoded,
    at most a few kilobytes) and ``message`` the server's own error message when the body
    is the usual ``{"error": {"message": ...}}`` JSON (``None`` otherwise). ``hint`` is
    emelex's own suggestion (e.g. a 404 from a base URL without ``/v1``), ``None`` when
    it has none; it ends the error's text.
    """

    def __init__(
        self, status: int, body: str, message: str | None = None, *, hint: str | None = None
    ) -> None:
        detail = f"the server answered HTTP {status}"
        if message:
            detail += f": {message}"
        elif body:
            detail += f": {clip(body, 200)}"
        if hint:
            detail += f" ({hint})"
        super().__init__(detail)
        self.status = status
        self.body = body
        self.message = message
        self.hint = hint


class RateLimited(HTTPStatusError):
    """HTTP 429. ``retry_after`` is the delay in seconds the server asked for
    (``Retry-After`` in seconds or as an HTTP date, or ``retry-after-ms``), ``None`` when
    it gave none."""

    def __init__(
        self, status: int, body: str, message: str | None = None, *, retry_after: float | None
    ) -> None:
        super().__init__(status, body, message)
        self.retry_after = retry_after


class StreamError(OpenAIError):
    """The server reported an error inside the stream (a chunk carrying ``"error"``, or
    an SSE event named ``error``) after it had answered 200. ``message`` is its text."""

    def __init__(self, message: str) -> None:
        super().__init__(f"the server reported an error mid-stream: {message}")
        self.message = message


class MalformedChunk(OpenAIError, InvalidResponse):
    """A stream chunk (or a non-streamed response body) is not what the chat
    completions format allows: not JSON, not UTF-8, or a field of the wrong type.
    ``excerpt`` holds the start of the offending data."""

    def __init__(self, message: str, *, excerpt: str = "") -> None:
        super().__init__(f"{message}: {clip(repr(excerpt), 200)}" if excerpt else message)
        self.excerpt = excerpt


class MalformedToolCall(MalformedChunk):
    """A streamed tool call cannot be assembled: it has no function name (arguments
    that are not a JSON object are handed on as ``ToolCall.arguments_error``).
    ``name`` and ``call_id`` are what arrived (possibly ``None``), ``excerpt`` the start
    of the raw arguments text."""

    def __init__(
        self, message: str, *, name: str | None, call_id: str | None, excerpt: str = ""
    ) -> None:
        super().__init__(message, excerpt=excerpt)
        self.name = name
        self.call_id = call_id


class ChunkTooLarge(LimitExceeded, OpenAIError):
    """One SSE line or event was longer than ``max_line_bytes`` (``limit`` is
    ``"max_line_bytes"``)."""


class ResponseTooLarge(LimitExceeded, OpenAIError):
    """The response body grew past ``max_response_bytes`` (``limit`` is
    ``"max_response_bytes"``)."""
