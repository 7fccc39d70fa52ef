"""Hypothesis strategies for every model-layer type, for fuzzing code built on emelex.

Every strategy produces valid values (they satisfy the invariants the constructors
check), kept small so property tests stay fast. Functions return strategies, in the
style of ``hypothesis.strategies``::

    from hypothesis import given
    from emelex.testing import strategies as est

    @given(est.generation_requests())
    def test_my_backend_accepts(request): ...

This module needs the ``hypothesis`` package (a development dependency).
"""

from __future__ import annotations

from typing import Any, Final, TypeAlias

from hypothesis import strategies as st

from emelex.model import (
    UNSET,
    AudioPart,
    Capabilities,
    Completed,
    FinishReason,
    GenerationEvent,
    GenerationOptions,
    GenerationRequest,
    ImagePart,
    Message,
    Part,
    Progress,
    Reasoning,
    ReasoningDelta,
    Response,
    Role,
    TextDelta,
    TextPart,
    ToolCall,
    ToolDefinition,
    Usage,
    VideoPart,
)

__all__ = [
    "assistant_messages",
    "audio_parts",
    "capabilities",
    "completed_events",
    "finish_reasons",
    "generation_events",
    "generation_options",
    "generation_requests",
    "image_parts",
    "json_objects",
    "json_schemas",
    "json_values",
    "messages",
    "parts",
    "progress_events",
    "reasoning_deltas",
    "reasonings",
    "responses",
    "roles",
    "system_messages",
    "text_deltas",
    "text_parts",
    "tool_calls",
    "tool_definitions",
    "tool_messages",
    "usages",
    "user_messages",
    "video_parts",
]

JsonValue: TypeAlias = bool | int | float | str | list[Any] | dict[str, Any] | None

_IMAGE_TYPES: Final = ("image/png", "image/jpeg", "image/webp", "image/gif")
_AUDIO_TYPES: Final = ("audio/wav", "audio/mpeg", "audio/ogg", "audio/flac")
_VIDEO_TYPES: Final = ("video/mp4", "video/webm", "video/quicktime")
_ROLES: Final[tuple[Role, ...]] = ("system", "user", "assistant", "tool")
_FINISH_REASONS: Final[tuple[FinishReason, ...]] = (
    "stop",
    "length",
    "tool_calls",
    "cancelled",
    "error",
)
_SCHEMA_TYPES: Final = ("string", "integer", "number", "boolean", "array", "object")


def _short_text(*, min_size: int = 0) -> st.SearchStrategy[str]:
    return st.text(min_size=min_size, max_size=40)


# --- JSON --------------------------------------------------------------------------------


def json_values(*, max_leaves: int = 10) -> st.SearchStrategy[JsonValue]:
    """Any JSON value: null, booleans, integers, finite floats, strings, arrays, objects."""
    scalars: st.SearchStrategy[JsonValue] = st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(2**63), max_value=2**63 - 1),
        st.floats(allow_nan=False, allow_infinity=False),
        _short_text(),
    )
    return st.recursive(
        scalars,
        lambda children: st.one_of(
            st.lists(children, max_size=4),
            st.dictionaries(_short_text(), children, max_size=4),
        ),
        max_leaves=max_leaves,
    )


def json_objects(*, max_size: int = 4) -> st.SearchStrategy[dict[str, Any]]:
    """A JSON object (``dict[str, JSON value]``), as tool arguments are."""
    return st.dictionaries(_short_text(), json_values(), max_size=max_size)


@st.composite
def json_schemas(draw: st.DrawFn) -> dict[str, Any]:
    """A small JSON Schema for an object, as tool parameters are declared."""
    names = draw(st.lists(st.from_regex(r"[a-z][a-z0-9_]{0,11}", fullmatch=True), max_size=4))
    properties = {name: {"type": draw(st.sampled_from(_SCHEMA_TYPES))} for name in names}
    required = draw(st.lists(st.sampled_from(names), unique=True)) if names else []
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    return schema


# --- content parts -------------------------------------------------------------------------


def text_parts() -> st.SearchStrategy[TextPart]:
    """A :class:`TextPart` with arbitrary text (possibly empty)."""
    return st.builds(TextPart, _short_text())


def image_parts() -> st.SearchStrategy[ImagePart]:
    """An :class:`ImagePart` with a few random bytes and a common image type."""
    return st.builds(ImagePart, st.binary(max_size=32), st.sampled_from(_IMAGE_TYPES))


def audio_parts() -> st.SearchStrategy[AudioPart]:
    """An :class:`AudioPart` with a few random bytes and a common audio type."""
    return st.builds(AudioPart, st.binary(max_size=32), st.sampled_from(_AUDIO_TYPES))


def video_parts() -> st.SearchStrategy[VideoPart]:
    """A :class:`VideoPart` with a few random bytes and a common video type."""
    return st.builds(VideoPart, st.binary(max_size=32), st.sampled_from(_VIDEO_TYPES))


def parts() -> st.SearchStrategy[Part]:
    """Any content part, text most often."""
    return st.one_of(text_parts(), text_parts(), image_parts(), audio_parts(), video_parts())


def _contents(
    part_strategy: st.SearchStrategy[Part] | None = None,
) -> st.SearchStrategy[tuple[Part, ...]]:
    return st.lists(part_strategy if part_strategy is not None else parts(), max_size=3).map(tuple)


# --- tool calls and definitions ------------------------------------------------------------


def tool_calls(
    *,
    ids: st.SearchStrategy[str] | None = None,
    names: st.SearchStrategy[str] | None = None,
    arguments: st.SearchStrategy[dict[str, Any]] | None = None,
) -> st.SearchStrategy[ToolCall]:
    """A :class:`ToolCall`; pass ``names`` to restrict it to tools you registered."""
    return st.builds(
        ToolCall,
        ids if ids is not None else _short_text(min_size=1),
        names if names is not None else _short_text(min_size=1),
        arguments if arguments is not None else json_objects(),
    )


def tool_definitions(
    *, names: st.SearchStrategy[str] | None = None
) -> st.SearchStrategy[ToolDefinition]:
    """A :class:`ToolDefinition` with a small object schema."""
    return st.builds(
        ToolDefinition,
        names if names is not None else _short_text(min_size=1),
        _short_text(),
        json_schemas(),
    )


# --- messages -------------------------------------------------------------------------------


def roles() -> st.SearchStrategy[Role]:
    """One of the four message roles."""
    return st.sampled_from(_ROLES)


def system_messages() -> st.SearchStrategy[Message]:
    """A system message with text content."""
    return st.builds(Message.system, _short_text())


def user_messages() -> st.SearchStrategy[Message]:
    """A user message with text or multimodal content."""
    return st.builds(Message.user, _contents())


def assistant_messages() -> st.SearchStrategy[Message]:
    """An assistant message, possibly with tool calls and reasoning."""
    return st.builds(
        Message.assistant,
        _contents(text_parts()),
        tool_calls=st.lists(tool_calls(), max_size=3),
        reasoning=st.none() | _short_text(),
    )


def tool_messages() -> st.SearchStrategy[Message]:
    """A tool-result message answering some call id."""
    return st.builds(Message.tool, _short_text(min_size=1), _contents())


def messages(*, roles: tuple[Role, ...] = _ROLES) -> st.SearchStrategy[Message]:
    """A message of one of ``roles`` (all roles by default) that obeys its role's rules."""
    by_role = {
        "system": system_messages(),
        "user": user_messages(),
        "assistant": assistant_messages(),
        "tool": tool_messages(),
    }
    return st.one_of([by_role[role] for role in roles])


# --- options and requests -------------------------------------------------------------------


def reasonings() -> st.SearchStrategy[Reasoning]:
    """``Reasoning.OFF``, ``Reasoning.AUTO`` or a positive budget."""
    return st.one_of(
        st.just(Reasoning.OFF),
        st.just(Reasoning.AUTO),
        st.integers(min_value=1, max_value=2**31).map(Reasoning.budget),
    )


def generation_options() -> st.SearchStrategy[GenerationOptions]:
    """Any valid :class:`GenerationOptions`, with each field set or left unset."""
    return st.builds(
        GenerationOptions,
        max_tokens=st.none() | st.integers(min_value=1, max_value=2**31),
        temperature=st.none() | st.floats(min_value=0.0, max_value=2.0),
        top_p=st.none() | st.floats(min_value=0.0, max_value=1.0),
        seed=st.none() | st.integers(min_value=0, max_value=2**63 - 1),
        stop=st.lists(_short_text(min_size=1), max_size=3).map(tuple),
        reasoning=st.just(UNSET) | reasonings(),
    )


def generation_requests() -> st.SearchStrategy[GenerationRequest]:
    """A :class:`GenerationRequest`: 1-5 messages, uniquely named tools, any options."""
    return st.builds(
        GenerationRequest,
        st.lists(messages(), min_size=1, max_size=5),
        tools=st.lists(tool_definitions(), max_size=3, unique_by=lambda tool: tool.name),
        options=generation_options(),
    )


# --- events and responses --------------------------------------------------------------------


def usages() -> st.SearchStrategy[Usage]:
    """A :class:`Usage` with non-negative counts."""
    counts = st.integers(min_value=0, max_value=2**31)
    return st.builds(Usage, counts, counts)


def finish_reasons() -> st.SearchStrategy[FinishReason]:
    """One of the finish reasons."""
    return st.sampled_from(_FINISH_REASONS)


def responses() -> st.SearchStrategy[Response]:
    """Any :class:`Response` (the finish reason is not tied to the tool calls)."""
    return st.builds(
        Response,
        _short_text(),
        st.none() | _short_text(),
        st.lists(tool_calls(), max_size=3).map(tuple),
        usages(),
        finish_reasons(),
    )


def text_deltas() -> st.SearchStrategy[TextDelta]:
    """A :class:`TextDelta`."""
    return st.builds(TextDelta, _short_text())


def reasoning_deltas() -> st.SearchStrategy[ReasoningDelta]:
    """A :class:`ReasoningDelta`."""
    return st.builds(ReasoningDelta, _short_text())


@st.composite
def progress_events(draw: st.DrawFn) -> Progress:
    """A :class:`Progress` event with ``completed <= total`` when the total is known."""
    stage = draw(st.sampled_from(("load", "prompt")) | _short_text(min_size=1))
    total = draw(st.none() | st.integers(min_value=0, max_value=1_000_000))
    completed = draw(st.integers(min_value=0, max_value=total if total is not None else 10**6))
    message = draw(st.none() | _short_text())
    return Progress(stage, completed, total, message)


def completed_events() -> st.SearchStrategy[Completed]:
    """A :class:`Completed` event carrying any response."""
    return st.builds(Completed, responses())


def generation_events() -> st.SearchStrategy[GenerationEvent]:
    """Any single stream event."""
    return st.one_of(text_deltas(), reasoning_deltas(), progress_events(), completed_events())


def capabilities() -> st.SearchStrategy[Capabilities]:
    """A :class:`Capabilities` with each feature proven, proven absent or unknown."""
    tristate = st.sampled_from((True, False, None))
    return st.builds(
        Capabilities,
        system_prompt=tristate,
        tool_declarations=tristate,
        tool_history=tristate,
        thinking_toggle=tristate,
        reasoning_history=tristate,
    )
