"""From a :class:`GenerationRequest` to a chat completions request body.

Messages map one to one:

* ``system`` and ``tool`` messages carry their text as a string (``tool`` with its
  ``tool_call_id``); media in them raises :class:`UnsupportedContent`;
* ``user`` messages carry a string when they are text only, otherwise a list of parts:
  ``text``, ``image_url`` with a ``data:`` URL, ``input_audio`` with base64 data and a
  format taken from the mime type (``audio/wav`` → ``wav``, ``audio/mpeg`` → ``mp3``,
  otherwise the subtype); a video part raises :class:`UnsupportedContent`;
* ``assistant`` messages carry their text (``""`` when they only call tools: the spec
  allows ``null`` there, but llama-cpp-python's server refuses it), their
  ``tool_calls`` (``type: function``, arguments re-encoded as a JSON string) and, only
  when ``send_reasoning`` is set, their reasoning as ``reasoning_content``.

Tools become ``{"type": "function", "function": {name, description, parameters}}``.
Options map to ``max_tokens``, ``temperature``, ``top_p``, ``seed`` and ``stop``; the
reasoning setting goes through a ``reasoning_fields`` function (by default
:func:`reasoning_effort_fields`).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, TypeAlias

from emelex.model._messages import AudioPart, ImagePart, Message, Part, TextPart, VideoPart
from emelex.model._options import UNSET, Reasoning, ToolChoice
from emelex.model._request import GenerationRequest, ToolDefinition
from emelex.model.openai._errors import UnsupportedContent

ReasoningFields: TypeAlias = Callable[[Reasoning], Mapping[str, Any]]
"""Turns a :class:`Reasoning` setting into extra request-body fields."""

_AUDIO_FORMATS: Final = {
    "audio/wav": "wav",
    "audio/wave": "wav",
    "audio/x-wav": "wav",
    "audio/vnd.wave": "wav",
    "audio/mpeg": "mp3",
    "audio/mp3": "mp3",
    "audio/mpeg3": "mp3",
    "audio/x-mp3": "mp3",
}

_LOW_BUDGET: Final = 2048
_MEDIUM_BUDGET: Final = 8192


def reasoning_effort_fields(reasoning: Reasoning) -> Mapping[str, Any]:
    """The default reasoning mapping, onto OpenAI's ``reasoning_effort``.

    * ``Reasoning.OFF`` → ``{"reasoning_effort": "none"}``;
    * ``Reasoning.AUTO`` → nothing (the server's default effort);
    * ``Reasoning.budget(n)`` → ``"low"`` up to 2048 tokens, ``"medium"`` up to 8192,
      ``"high"`` above (the API has levels, not token budgets).

    An unset reasoning option sends nothing. Servers that switch thinking another way
    (e.g. ``chat_template_kwargs``) take a different function through
    ``OpenAIModel(reasoning_fields=...)``.
    """
    if reasoning.mode == "off":
        return {"reasoning_effort": "none"}
    if reasoning.mode == "auto" or reasoning.budget_tokens is None:
        return {}
    tokens = reasoning.budget_tokens
    effort = "low" if tokens <= _LOW_BUDGET else "medium" if tokens <= _MEDIUM_BUDGET else "high"
    return {"reasoning_effort": effort}


def _data_url(data: bytes, mime_type: str) -> str:
    return f"data:{mime_type};base64,{base64.b64encode(data).decode('ascii')}"


def audio_format(mime_type: str) -> str:
    """The ``input_audio`` format name for an ``audio/*`` mime type."""
    known = _AUDIO_FORMATS.get(mime_type)
    if known is not None:
        return known
    subtype = mime_type.partition("/")[2]
    return subtype.removeprefix("x-")


def _text_only(message: Message, index: int) -> str:
    for part in message.content:
        if not isinstance(part, TextPart):
            raise UnsupportedContent(
                f"message {index} ({message.role}) holds a {type(part).__name__}; the chat "
                f"completions format carries media only in user messages"
            )
    return message.text


def _user_part(part: Part, index: int) -> dict[str, Any]:
    if isinstance(part, TextPart):
        return {"type": "text", "text": part.text}
    if isinstance(part, ImagePart):
        return {"type": "image_url", "image_url": {"url": _data_url(part.data, part.mime_type)}}
    if isinstance(part, AudioPart):
        return {
            "type": "input_audio",
            "input_audio": {
                "data": base64.b64encode(part.data).decode("ascii"),
                "format": audio_format(part.mime_type),
            },
        }
    if isinstance(part, VideoPart):
        raise UnsupportedContent(
            f"message {index} holds a video part ({part.mime_type}); the chat completions "
            "format has no video input"
        )
    raise UnsupportedContent(f"message {index} holds an unknown part {type(part).__name__}")


def message_dict(message: Message, index: int, *, send_reasoning: bool) -> dict[str, Any]:
    """The chat completions form of one message (``index`` is used in errors)."""
    role = message.role
    if role == "user":
        content = message.content
        if all(isinstance(part, TextPart) for part in content):
            return {"role": "user", "content": message.text}
        return {"role": "user", "content": [_user_part(part, index) for part in content]}
    if role == "system":
        return {"role": "system", "content": _text_only(message, index)}
    if role == "tool":
        return {
            "role": "tool",
            "tool_call_id": message.tool_call_id,
            "content": _text_only(message, index),
        }
    text = _text_only(message, index)
    result: dict[str, Any] = {"role": "assistant", "content": text}
    if message.tool_calls:
        result["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {
                    "name": call.name,
                    "arguments": json.dumps(call.arguments, ensure_ascii=False),
                },
            }
            for call in message.tool_calls
        ]
    if send_reasoning and message.reasoning:
        result["reasoning_content"] = message.reasoning
    return result


def tool_dict(tool: ToolDefinition) -> dict[str, Any]:
    """The chat completions form of one function tool."""
    return {
        "type": "function",
        "function": {
            "name": tool.name,
            "description": tool.description,
            "parameters": tool.parameters,
        },
    }


def tool_choice_value(choice: ToolChoice) -> str | dict[str, Any]:
    """The ``tool_choice`` field of the Chat Completions API for ``choice``."""
    if choice.name is not None:
        return {"type": "function", "function": {"name": choice.name}}
    return choice.mode


def request_body(
    request: GenerationRequest,
    model: str,
    *,
    send_reasoning: bool = False,
    include_usage: bool = True,
    reasoning_fields: ReasoningFields = reasoning_effort_fields,
    extra_body: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The JSON body of a streaming ``/chat/completions`` request for ``request``.

    ``extra_body`` fields are added last and override computed ones. Raises
    :class:`UnsupportedContent` for content the format cannot carry.
    """
    messages: Sequence[Message] = request.messages
    body: dict[str, Any] = {
        "model": model,
        "messages": [
            message_dict(message, index, send_reasoning=send_reasoning)
            for index, message in enumerate(messages)
        ],
        "stream": True,
    }
    if include_usage:
        body["stream_options"] = {"include_usage": True}
    if request.tools:
        body["tools"] = [tool_dict(tool) for tool in request.tools]
    options = request.options
    if options.max_tokens is not None:
        body["max_tokens"] = options.max_tokens
    if options.temperature is not None:
        body["temperature"] = options.temperature
    if options.top_p is not None:
        body["top_p"] = options.top_p
    if options.seed is not None:
        body["seed"] = options.seed
    if options.stop:
        body["stop"] = list(options.stop)
    if options.reasoning is not UNSET:
        body.update(reasoning_fields(options.reasoning))
    if options.tool_choice is not UNSET:
        body["tool_choice"] = tool_choice_value(options.tool_choice)
    if options.output_schema is not None:
        body["response_format"] = {
            "type": "json_schema",
            "json_schema": {"name": "answer", "schema": options.output_schema},
        }
    if extra_body:
        body.update(extra_body)
    return body
