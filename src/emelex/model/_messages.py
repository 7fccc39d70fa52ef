"""Conversation values: roles, content parts, tool calls and messages.

All of them are frozen attrs classes checked when built, so a malformed message is
refused where it is made rather than deep inside a backend.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, Literal, TypeAlias, get_args

import attrs

from emelex.model._checks import tuple_of
from emelex.model._errors import InvalidMessage

Role: TypeAlias = Literal["system", "user", "assistant", "tool"]
"""Who speaks a message: instructions, the user, the model, or a tool result."""

_ROLES: Final = frozenset(get_args(Role))

# type/subtype as in RFC 6838, without parameters; stored lowercase.
_MIME_RE: Final = re.compile(r"[a-z0-9][a-z0-9!#$&^_.+-]*/[a-z0-9][a-z0-9!#$&^_.+-]*")

_Validator: TypeAlias = Callable[[Any, Any, Any], None]


def _nonempty_str(what: str) -> _Validator:
    def check(_instance: Any, _attribute: Any, value: Any) -> None:
        if not isinstance(value, str) or not value:
            raise InvalidMessage(f"{what} must be a non-empty string, got {value!r}")

    return check


def _check_str(what: str) -> _Validator:
    def check(_instance: Any, _attribute: Any, value: Any) -> None:
        if not isinstance(value, str):
            raise InvalidMessage(f"{what} must be a string, got {type(value).__name__}")

    return check


def _to_bytes(value: bytes | bytearray | memoryview) -> bytes:
    if type(value) is bytes:
        return value
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    raise InvalidMessage(f"media data must be bytes, got {type(value).__name__}")


def _mime_of_kind(value: str, kind: str) -> str:
    if not isinstance(value, str):
        raise InvalidMessage(f"mime_type must be a string, got {type(value).__name__}")
    lowered = value.lower()
    if not _MIME_RE.fullmatch(lowered) or not lowered.startswith(kind + "/"):
        raise InvalidMessage(f"expected a {kind}/* mime type, got {value!r}")
    return lowered


def _image_mime(value: str) -> str:
    return _mime_of_kind(value, "image")


def _audio_mime(value: str) -> str:
    return _mime_of_kind(value, "audio")


def _video_mime(value: str) -> str:
    return _mime_of_kind(value, "video")


def _data_repr(data: bytes) -> str:
    # Media can be megabytes; a repr that prints it all is useless in logs and tracebacks.
    return f"<{len(data)} bytes>"


@attrs.frozen
class TextPart:
    """A span of plain text inside a message."""

    text: str = attrs.field(validator=_check_str("TextPart.text"))


@attrs.frozen
class ImagePart:
    """An encoded image (PNG, JPEG, ...) with its ``image/*`` mime type.

    ``mime_type`` is matched case-insensitively and stored in lowercase.
    """

    data: bytes = attrs.field(converter=_to_bytes, repr=_data_repr)
    mime_type: str = attrs.field(converter=_image_mime)


@attrs.frozen
class AudioPart:
    """Encoded audio with its ``audio/*`` mime type (stored in lowercase)."""

    data: bytes = attrs.field(converter=_to_bytes, repr=_data_repr)
    mime_type: str = attrs.field(converter=_audio_mime)


@attrs.frozen
class VideoPart:
    """Encoded video with its ``video/*`` mime type (stored in lowercase)."""

    data: bytes = attrs.field(converter=_to_bytes, repr=_data_repr)
    mime_type: str = attrs.field(converter=_video_mime)


Part: TypeAlias = TextPart | ImagePart | AudioPart | VideoPart
"""One piece of message content."""

_PART_TYPES: Final = (TextPart, ImagePart, AudioPart, VideoPart)


def _to_arguments(value: Mapping[str, Any]) -> dict[str, Any]:
    if type(value) is dict:
        arguments: dict[str, Any] = value
    elif isinstance(value, Mapping):
        arguments = dict(value)
    else:
        raise InvalidMessage(
            f"tool call arguments must be a JSON object (dict), got {type(value).__name__}"
        )
    for key in arguments:
        if not isinstance(key, str):
            raise InvalidMessage(f"tool call argument names must be strings, got {key!r}")
    return arguments


@attrs.frozen
class ToolCall:
    """A request from the model to run one tool.

    ``id`` is the identifier the call carries in the conversation (provider-local as
    produced by a model; the agent harness replaces it with a UUIDv7). ``arguments`` is
    the already parsed JSON object; it is stored as given (a non-dict mapping is copied
    into a dict) and should be treated as read-only. Because it is a dict, a ``ToolCall``
    compares by value but is not hashable.

    ``arguments_error`` is set by a model adapter when the provider's arguments could
    not be parsed into an object: ``arguments`` is then ``{}`` and this says why. The
    agent harness answers such a call with a correction for the model and commits it
    with ``{}`` (never with this field).
    """

    id: str = attrs.field(validator=_nonempty_str("ToolCall.id"))
    name: str = attrs.field(validator=_nonempty_str("ToolCall.name"))
    arguments: dict[str, Any] = attrs.field(converter=_to_arguments)
    arguments_error: str | None = attrs.field(
        default=None,
        kw_only=True,
        validator=attrs.validators.optional(_nonempty_str("ToolCall.arguments_error")),
    )


def _to_content(value: str | Sequence[Part | str]) -> tuple[Part, ...]:
    if isinstance(value, str):
        # An empty string means "no content" (e.g. an assistant message that only calls
        # tools), so it becomes the empty tuple rather than one empty TextPart.
        return (TextPart(value),) if value else ()
    if type(value) is not tuple and type(value) is not list and not isinstance(value, Sequence):
        raise InvalidMessage(
            f"message content must be a string or a sequence of parts, got {type(value).__name__}"
        )
    parts: list[Part] = []
    for index, item in enumerate(value):
        if isinstance(item, _PART_TYPES):
            parts.append(item)
        elif isinstance(item, str):
            parts.append(TextPart(item))
        else:
            raise InvalidMessage(
                f"message content item {index} must be a part or a string, "
                f"got {type(item).__name__}"
            )
    return tuple(parts)


def _to_tool_calls(value: Sequence[ToolCall]) -> tuple[ToolCall, ...]:
    return tuple_of(value, ToolCall, "tool_calls", InvalidMessage)


@attrs.frozen
class Message:
    """One message of a conversation.

    ``content`` accepts a string or a sequence of parts (strings inside the sequence
    become :class:`TextPart`) and is always stored as a tuple of parts. A non-empty
    string becomes a single :class:`TextPart`; the empty string becomes the empty tuple.

    The role decides what else a message may carry, and breaking a rule raises
    :class:`InvalidMessage`:

    * ``tool_calls`` and ``reasoning`` only on ``"assistant"`` messages;
    * ``tool_call_id`` (a non-empty string naming the answered call) on every
      ``"tool"`` message and on no other.
    """

    role: Role = attrs.field()
    content: tuple[Part, ...] = attrs.field(converter=_to_content)
    tool_calls: tuple[ToolCall, ...] = attrs.field(
        default=(), kw_only=True, converter=_to_tool_calls
    )
    tool_call_id: str | None = attrs.field(default=None, kw_only=True)
    reasoning: str | None = attrs.field(default=None, kw_only=True)

    def __attrs_post_init__(self) -> None:
        role = self.role
        if not isinstance(role, str) or role not in _ROLES:
            raise InvalidMessage(f"unknown role {role!r}; expected one of {sorted(_ROLES)}")
        if self.tool_calls and role != "assistant":
            raise InvalidMessage(f"only assistant messages may carry tool_calls, not {role!r}")
        if self.reasoning is not None:
            if role != "assistant":
                raise InvalidMessage(f"only assistant messages may carry reasoning, not {role!r}")
            if not isinstance(self.reasoning, str):
                raise InvalidMessage("reasoning must be a string or None")
        if role == "tool":
            if not isinstance(self.tool_call_id, str) or not self.tool_call_id:
                raise InvalidMessage("a tool message needs a non-empty tool_call_id")
        elif self.tool_call_id is not None:
            raise InvalidMessage(f"only tool messages may carry a tool_call_id, not {role!r}")

    @property
    def text(self) -> str:
        """The text parts of the content joined without a separator (media is skipped)."""
        return "".join(part.text for part in self.content if isinstance(part, TextPart))

    @classmethod
    def system(cls, text: str) -> Message:
        """A system (instructions) message."""
        return cls("system", text)

    @classmethod
    def user(cls, content: str | Sequence[Part | str]) -> Message:
        """A user message with text or multimodal content."""
        return cls("user", content)

    @classmethod
    def assistant(
        cls,
        content: str | Sequence[Part | str] = "",
        *,
        tool_calls: Sequence[ToolCall] = (),
        reasoning: str | None = None,
    ) -> Message:
        """A model message, optionally with tool calls and reasoning."""
        return cls("assistant", content, tool_calls=tool_calls, reasoning=reasoning)

    @classmethod
    def tool(cls, tool_call_id: str, content: str | Sequence[Part | str]) -> Message:
        """The result of the tool call identified by ``tool_call_id``."""
        return cls("tool", content, tool_call_id=tool_call_id)
