"""What a model produces: stream events, the terminal response and token usage."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final, Literal, TypeAlias, get_args

import attrs

from emelex.model._checks import tuple_of
from emelex.model._errors import InvalidResponse
from emelex.model._messages import Message, ToolCall

FinishReason: TypeAlias = Literal["stop", "length", "tool_calls", "cancelled", "error"]
"""Why generation ended: natural stop, token limit, tool calls, cancellation or error."""

_FINISH_REASONS: Final = frozenset(get_args(FinishReason))


def _check_text(_instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if not isinstance(value, str):
        raise InvalidResponse(f"{attribute.name} must be a string, got {value!r}")


def _check_count(_instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if type(value) is not int or value < 0:
        raise InvalidResponse(f"{attribute.name} must be a non-negative integer, got {value!r}")


@attrs.frozen
class TextDelta:
    """The next piece of the answer text."""

    text: str = attrs.field(validator=_check_text)


@attrs.frozen
class ReasoningDelta:
    """The next piece of the model's reasoning (thinking) text."""

    text: str = attrs.field(validator=_check_text)


@attrs.frozen
class Progress:
    """Telemetry about work that produces no text yet.

    ``stage`` names the work, e.g. ``"load"`` (loading weights) or ``"prompt"``
    (processing prompt tokens); ``completed`` of ``total`` units are done (``total`` is
    ``None`` when unknown) and ``message`` is optional human-readable detail. Progress is
    for display only: the terminal response's usage is what counts.
    """

    stage: str = attrs.field()
    completed: int = attrs.field(validator=_check_count)
    total: int | None = None
    message: str | None = None

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.stage, str) or not self.stage:
            raise InvalidResponse(f"progress stage must be a non-empty string: {self.stage!r}")
        if self.total is not None:
            if type(self.total) is not int or self.total < 0:
                raise InvalidResponse(f"progress total must be >= 0 or None: {self.total!r}")
            if self.completed > self.total:
                raise InvalidResponse(
                    f"progress completed ({self.completed}) exceeds total ({self.total})"
                )
        if self.message is not None and not isinstance(self.message, str):
            raise InvalidResponse(f"progress message must be a string or None: {self.message!r}")


def _check_flag(_instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if type(value) is not bool:
        raise InvalidResponse(f"{attribute.name} must be a bool, got {value!r}")


@attrs.frozen
class Usage:
    """Tokens consumed by one generation; usages add up with ``+``.

    ``estimated`` is True when the provider did not report the figures and the backend
    counted them itself (see ``docs/usage.md``); a sum is estimated when any part is.
    """

    input_tokens: int = attrs.field(default=0, validator=_check_count)
    output_tokens: int = attrs.field(default=0, validator=_check_count)
    estimated: bool = attrs.field(
        default=False, kw_only=True, validator=_check_flag, metadata={"omit_if_default": True}
    )

    @property
    def total_tokens(self) -> int:
        """Input plus output tokens."""
        return self.input_tokens + self.output_tokens

    def __add__(self, other: Usage) -> Usage:
        if not isinstance(other, Usage):
            return NotImplemented
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            estimated=self.estimated or other.estimated,
        )


def _to_tool_calls(value: Sequence[ToolCall]) -> tuple[ToolCall, ...]:
    return tuple_of(value, ToolCall, "tool_calls", InvalidResponse)


@attrs.frozen
class Response:
    """The complete result of one generation, delivered by :class:`Completed`.

    ``text`` is the whole answer and ``reasoning`` the whole reasoning text (``None``
    when the model did not reason). Streamed deltas are expected to concatenate to these
    values; the agent harness enforces that. ``tool_calls`` carry provider-local ids.
    """

    text: str = attrs.field(validator=_check_text)
    reasoning: str | None = None
    tool_calls: tuple[ToolCall, ...] = attrs.field(default=(), converter=_to_tool_calls)
    usage: Usage = attrs.field(factory=Usage)
    finish_reason: FinishReason = "stop"

    def __attrs_post_init__(self) -> None:
        if self.reasoning is not None and not isinstance(self.reasoning, str):
            raise InvalidResponse(f"reasoning must be a string or None, got {self.reasoning!r}")
        if not isinstance(self.usage, Usage):
            raise InvalidResponse(f"usage must be a Usage, got {self.usage!r}")
        if not isinstance(self.finish_reason, str) or self.finish_reason not in _FINISH_REASONS:
            raise InvalidResponse(f"unknown finish_reason {self.finish_reason!r}")

    def to_message(self) -> Message:
        """The assistant message that records this response in a conversation."""
        return Message("assistant", self.text, tool_calls=self.tool_calls, reasoning=self.reasoning)


@attrs.frozen
class Completed:
    """The last event of every successful stream, carrying the terminal response."""

    response: Response = attrs.field()

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.response, Response):
            raise InvalidResponse(f"Completed needs a Response, got {self.response!r}")


GenerationEvent: TypeAlias = TextDelta | ReasoningDelta | Progress | Completed
"""One item of a generation stream."""
