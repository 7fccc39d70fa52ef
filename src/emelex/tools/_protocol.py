"""The tool extension point: what the harness calls, and what a tool receives."""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import attrs
import trio

from emelex._text import shorten
from emelex.model import (
    AudioPart,
    ImagePart,
    Message,
    Part,
    TextPart,
    ToolCall,
    ToolDefinition,
    VideoPart,
)
from emelex.runtime import AgentCancellation

#: Longest progress message a tool may report; longer ones are cut (with a marker).
MAX_PROGRESS_CHARS = 2_000


class ToolCancellationPolicy(enum.Enum):
    """What happens to a running tool when its turn is cancelled.

    ``FINISH_ONCE_STARTED`` (the default): once started, the harness waits for exactly
    one terminal result (the tool sees ``invocation.cancellation`` fire and may finish
    early), records it, and runs no later call of the batch.
    ``INTERRUPTIBLE``: the invocation is cancelled at its next checkpoint. Only for tools
    whose ``invoke`` leaves no host work or effects behind when dropped.
    """

    FINISH_ONCE_STARTED = "finish_once_started"
    INTERRUPTIBLE = "interruptible"


def _to_content(value: str | Sequence[Part]) -> tuple[Part, ...]:
    if isinstance(value, str):
        return (TextPart(value),)
    return tuple(value)


@attrs.frozen
class ToolOutput:
    """A tool's terminal result: content for the model, and whether it is an error.

    ``retry`` marks an error result that asks the model to correct its call (invalid
    arguments, :class:`~emelex.tools.RetryWithFeedback`): it counts against the retry
    budgets. Only ``content`` reaches the conversation."""

    content: tuple[Part, ...] = attrs.field(converter=_to_content)
    is_error: bool = False
    retry: bool = attrs.field(default=False, kw_only=True)

    @classmethod
    def error(cls, text: str) -> ToolOutput:
        return cls(text, is_error=True)

    @classmethod
    def feedback(cls, text: str) -> ToolOutput:
        """An error result asking the model to correct its call (``retry=True``)."""
        return cls(text, is_error=True, retry=True)

    @property
    def text(self) -> str:
        return "".join(part.text for part in self.content if isinstance(part, TextPart))

    def to_message(self, call_id: str) -> Message:
        content = self.content
        if (
            type(call_id) is not str
            or not call_id
            or any(type(part) not in _PART_CLASSES for part in content)
        ):
            return Message("tool", content, tool_call_id=call_id)  # it says what is wrong
        # Exactly what Message("tool", content, tool_call_id=call_id) builds once the
        # checks above passed (content is already a tuple of parts), without attrs'
        # converters and post-init: 4.3 -> ~1 µs, once per tool call of every turn.
        message = object.__new__(Message)
        for name, value in (
            ("role", "tool"),
            ("content", content),
            ("tool_calls", ()),
            ("tool_call_id", call_id),
            ("reasoning", None),
        ):
            object.__setattr__(message, name, value)
        return message


_PART_CLASSES = frozenset((TextPart, ImagePart, AudioPart, VideoPart))

ProgressSink = Callable[[str, int | None, int | None], None]


@attrs.frozen
class ToolInvocation:
    """Everything a tool receives for one call.

    ``call`` carries the harness-issued UUIDv7 id (never the provider's id).
    ``cancellation`` fires when the turn is cancelled; cooperative tools watch it.
    ``approved`` is True when this exact call was approved one-shot by the policy.
    ``validated`` is True when the harness already checked ``arguments`` against the
    tool's schema (a session always does, once, before approval): the tool need not
    check them again.
    """

    call: ToolCall
    cancellation: AgentCancellation
    turn_id: str
    session_id: str
    approved: bool = False
    validated: bool = False
    _progress: ProgressSink | None = attrs.field(default=None, alias="progress_sink")

    @property
    def arguments(self) -> dict[str, Any]:
        return self.call.arguments

    async def progress(
        self, message: str, *, completed: int | None = None, total: int | None = None
    ) -> None:
        """Report progress; it reaches the session's events as ``ToolProgress``.

        A checkpoint (so a tool looping on progress stays cancellable). Messages longer
        than :data:`MAX_PROGRESS_CHARS` are cut.
        """
        message = shorten(message, MAX_PROGRESS_CHARS)
        if self._progress is not None:
            self._progress(message, completed, total)
        await trio.lowlevel.checkpoint()


@runtime_checkable
class AgentTool(Protocol):
    """A tool the harness can offer to a model.

    ``definition`` is the name, description and JSON Schema of the arguments.
    ``approval_reason(arguments)`` returns None to run without asking, or a sentence
    naming the exact action to approve. In a session both receive arguments already
    validated against ``definition.parameters``. ``invoke`` runs the call; raising an
    exception is reported to the model as an error result (it does not fail the turn);
    raising :class:`~emelex.tools.RetryWithFeedback` asks the model to correct its call.
    An optional ``authority_identity`` mapping (str → str) joins the session's
    authority snapshot (for example digests of a shell's PATH); an optional
    ``max_retries`` (int or None) is the tool's retry budget per turn.
    """

    @property
    def definition(self) -> ToolDefinition: ...

    @property
    def cancellation_policy(self) -> ToolCancellationPolicy: ...

    def approval_reason(self, arguments: Mapping[str, Any]) -> str | None: ...

    def invoke(self, invocation: ToolInvocation) -> Awaitable[ToolOutput]: ...
