"""A probed chat format: how to render a conversation for one template, and what it keeps."""

from __future__ import annotations

import base64
import enum
import hashlib
import json
from collections.abc import Sequence
from typing import Any, Final, Literal

import attrs

from emelex.model._capabilities import Capabilities
from emelex.model._messages import Message, TextPart
from emelex.model._options import UNSET, Reasoning, Unset
from emelex.model._request import ToolDefinition
from emelex.model.templates._errors import UnsupportedContent
from emelex.model.templates._jinja import ChatTemplate


class ToolCallFamily(enum.Enum):
    """The markup a model family uses to propose tool calls.

    * ``HERMES``: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` blocks
      (Hermes, Qwen 2.5/3 and most ChatML tool templates);
    * ``LLAMA3_JSON``: the whole answer is ``{"name": ..., "parameters": {...}}``,
      optionally after ``<|python_tag|>`` (Llama 3.1-3.3);
    * ``MISTRAL``: ``[TOOL_CALLS]`` followed by a JSON array of calls (Mistral v3 and
      later; the ``name[ARGS]{...}`` form of newer releases is understood too);
    * ``NONE``: no known tool-call markup; calls are not parsed.
    """

    NONE = "none"
    HERMES = "hermes"
    LLAMA3_JSON = "llama3_json"
    MISTRAL = "mistral"


@attrs.frozen
class ThinkMarkers:
    """The tags that open and close reasoning text in a model's output."""

    open: str = "<think>"
    close: str = "</think>"


ArgumentsStyle = Literal["object", "string"]
ReasoningStyle = Literal["field", "inline", "drop"]
CallIdStyle = Literal["native", "alnum9"]


@attrs.frozen(kw_only=True)
class RenderStyle:
    """How conversation values are handed to one template, as found by probing.

    * ``arguments``: tool-call arguments as a JSON object (``"object"``) or as JSON
      text (``"string"``);
    * ``reasoning``: earlier reasoning as the ``reasoning_content`` field, inline in
      the content between think markers, or dropped;
    * ``call_ids``: tool-call ids as given, or mapped to stable 9-character
      alphanumeric ids (Mistral templates insist on those);
    * ``thinking_variable``: the template variable that switches thinking, if any.
    """

    arguments: ArgumentsStyle = "object"
    reasoning: ReasoningStyle = "drop"
    call_ids: CallIdStyle = "native"
    thinking_variable: str | None = None


def short_call_id(call_id: str) -> str:
    """A stable 9-character alphanumeric id derived from ``call_id``."""
    digest = hashlib.sha256(call_id.encode()).digest()
    text = base64.b32encode(digest).decode("ascii").lower()
    return text[:9]


_INLINE_REASONING: Final = "{open}\n{reasoning}\n{close}\n\n{content}"


def _text_of(message: Message) -> str:
    for part in message.content:
        if not isinstance(part, TextPart):
            raise UnsupportedContent(
                f"a {message.role} message holds {type(part).__name__} content; "
                "this chat template carries text only"
            )
    return message.text


def message_dicts(
    messages: Sequence[Message], style: RenderStyle, think: ThinkMarkers | None
) -> list[dict[str, Any]]:
    """Convert messages to the OpenAI-style dicts chat templates iterate over.

    Keys are present only when they carry something (templates test ``'tool_calls' in
    message``); an assistant message that only calls tools has ``content`` ``None``.
    Raises :class:`UnsupportedContent` for non-text parts.
    """

    def call_id(value: str) -> str:
        return short_call_id(value) if style.call_ids == "alnum9" else value

    result: list[dict[str, Any]] = []
    for message in messages:
        text = _text_of(message)
        entry: dict[str, Any] = {"role": message.role, "content": text}
        if message.role == "assistant":
            if message.reasoning and style.reasoning == "field":
                entry["reasoning_content"] = message.reasoning
            elif message.reasoning and style.reasoning == "inline" and think is not None:
                entry["content"] = _INLINE_REASONING.format(
                    open=think.open, reasoning=message.reasoning, close=think.close, content=text
                )
            if message.tool_calls:
                entry["tool_calls"] = [
                    {
                        "id": call_id(call.id),
                        "type": "function",
                        "function": {
                            "name": call.name,
                            "arguments": (
                                call.arguments
                                if style.arguments == "object"
                                else json.dumps(call.arguments, ensure_ascii=False)
                            ),
                        },
                    }
                    for call in message.tool_calls
                ]
                if not entry["content"]:
                    entry["content"] = None
        elif message.role == "tool":
            assert message.tool_call_id is not None  # guaranteed by Message
            entry["tool_call_id"] = call_id(message.tool_call_id)
        result.append(entry)
    return result


def tool_dicts(tools: Sequence[ToolDefinition]) -> list[dict[str, Any]]:
    """Tool definitions in the ``{"type": "function", "function": {...}}`` shape."""
    return [
        {
            "type": "function",
            "function": {
                "name": tool.name,
                "description": tool.description,
                "parameters": tool.parameters,
            },
        }
        for tool in tools
    ]


@attrs.frozen
class RenderedPrompt:
    """A conversation rendered for generation.

    ``text`` is the prompt; ``opens_reasoning`` is True when it ends inside an opened
    think block (the model continues with reasoning before it answers).
    """

    text: str
    opens_reasoning: bool


@attrs.frozen(kw_only=True)
class ChatFormat:
    """What probing one chat template found, and how to render conversations for it.

    Build one with :func:`probe_chat_template`. ``capabilities`` records each feature
    as proven present (True) or proven absent (False); ``tool_family`` is the tool-call
    markup to expect in output; ``think`` the reasoning tags (``None`` when the template
    knows none); ``style`` how values are handed to the template.
    """

    template: ChatTemplate
    capabilities: Capabilities
    tool_family: ToolCallFamily
    think: ThinkMarkers | None
    style: RenderStyle

    def thinking_variables(self, reasoning: Reasoning | Unset) -> dict[str, Any]:
        """The template variables that express ``reasoning`` (empty when the template
        has no toggle or ``reasoning`` is :data:`UNSET`)."""
        variable = self.style.thinking_variable
        if variable is None or reasoning is UNSET:
            return {}
        assert isinstance(reasoning, Reasoning)
        return {variable: reasoning.enabled}

    def render(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolDefinition] = (),
        *,
        reasoning: Reasoning | Unset = UNSET,
        add_generation_prompt: bool = True,
    ) -> RenderedPrompt:
        """Render a conversation (and the tools offered) as this template would.

        Pure; does not checkpoint. Raises :class:`ChatTemplateError` when the template
        fails or refuses the conversation and :class:`UnsupportedContent` for non-text
        content.
        """
        text = self.template.render(
            message_dicts(messages, self.style, self.think),
            tools=tool_dicts(tools) or None,
            add_generation_prompt=add_generation_prompt,
            **self.thinking_variables(reasoning),
        )
        opens = False
        if self.think is not None and add_generation_prompt:
            opens = text.rstrip().endswith(self.think.open)
        return RenderedPrompt(text, opens)
