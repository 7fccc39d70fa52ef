"""What a model is asked: the conversation, the declared tools and the options."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from emelex.model._checks import tuple_of
from emelex.model._errors import InvalidRequest
from emelex.model._messages import Message
from emelex.model._options import GenerationOptions, ToolChoice


def _check_name(_instance: Any, _attribute: Any, value: Any) -> None:
    if not isinstance(value, str) or not value:
        raise InvalidRequest(f"a tool name must be a non-empty string, got {value!r}")


def _check_description(_instance: Any, _attribute: Any, value: Any) -> None:
    if not isinstance(value, str):
        raise InvalidRequest(f"a tool description must be a string, got {value!r}")


def _to_schema(value: Mapping[str, Any]) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise InvalidRequest(f"tool parameters must be a JSON Schema object, got {value!r}")
    return value if type(value) is dict else dict(value)


@attrs.frozen
class ToolDefinition:
    """A tool as declared to the model.

    ``parameters`` is the JSON Schema (a dict) the call arguments must satisfy. It is
    stored as given and should be treated as read-only; validating the schema itself
    is the tool layer's job. Like :class:`ToolCall` it compares by value but is not
    hashable.
    """

    name: str = attrs.field(validator=_check_name)
    description: str = attrs.field(validator=_check_description)
    parameters: dict[str, Any] = attrs.field(converter=_to_schema)


def _to_messages(value: Sequence[Message]) -> tuple[Message, ...]:
    messages = tuple_of(value, Message, "messages", InvalidRequest)
    if not messages:
        raise InvalidRequest("a generation request needs at least one message")
    return messages


def _to_tools(value: Sequence[ToolDefinition]) -> tuple[ToolDefinition, ...]:
    tools = tuple_of(value, ToolDefinition, "tools", InvalidRequest)
    if len({tool.name for tool in tools}) != len(tools):
        seen: set[str] = set()
        for tool in tools:
            if tool.name in seen:
                raise InvalidRequest(f"tool {tool.name!r} is declared twice")
            seen.add(tool.name)
    return tools


def _check_options(_instance: Any, _attribute: Any, value: Any) -> None:
    if not isinstance(value, GenerationOptions):
        raise InvalidRequest(f"options must be GenerationOptions, got {value!r}")


@attrs.frozen
class GenerationRequest:
    """One call to a model: a non-empty conversation, the tools it may call and options.

    Sequences are stored as tuples. An empty conversation, a non-``Message`` item, two
    tools with the same name, or a ``tool_choice`` that forces a call of a tool not
    offered raise :class:`InvalidRequest`.
    """

    messages: tuple[Message, ...] = attrs.field(converter=_to_messages)
    tools: tuple[ToolDefinition, ...] = attrs.field(default=(), kw_only=True, converter=_to_tools)
    options: GenerationOptions = attrs.field(
        factory=GenerationOptions, kw_only=True, validator=_check_options
    )

    @staticmethod
    def _checked(
        messages: tuple[Message, ...],
        *,
        tools: tuple[ToolDefinition, ...],
        options: GenerationOptions,
    ) -> GenerationRequest:
        """:func:`checked_request`, reachable from other packages (the turn core)."""
        return checked_request(messages, tools=tools, options=options)

    def __attrs_post_init__(self) -> None:
        choice = self.options.tool_choice
        if isinstance(choice, ToolChoice) and choice.forces_call:
            if not self.tools:
                raise InvalidRequest(f"tool_choice {choice!r} needs at least one offered tool")
            if choice.name is not None and all(tool.name != choice.name for tool in self.tools):
                raise InvalidRequest(f"tool_choice names {choice.name!r}, which is not offered")


def checked_request(
    messages: tuple[Message, ...],
    *,
    tools: tuple[ToolDefinition, ...],
    options: GenerationOptions,
) -> GenerationRequest:
    """A :class:`GenerationRequest` whose ``messages`` the caller already knows are a
    tuple of :class:`Message` (the turn core: history was checked when it entered, and
    the turn's own messages are built there). Everything else is checked as usual; only
    the per-message type check, which costs time linear in the history on every model
    round, is skipped."""
    if type(messages) is not tuple:
        return GenerationRequest(messages, tools=tools, options=options)
    if not messages:
        raise InvalidRequest("a generation request needs at least one message")
    _check_options(None, None, options)
    request: GenerationRequest = object.__new__(GenerationRequest)
    object.__setattr__(request, "messages", messages)
    object.__setattr__(request, "tools", _to_tools(tools))
    object.__setattr__(request, "options", options)
    request.__attrs_post_init__()
    return request
