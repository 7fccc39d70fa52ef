"""Capability proofs: render probe conversations and look for sentinel strings.

Each probe renders a small conversation carrying unique sentinel strings through the
exact template and checks which sentinels reach the prompt. A feature counts as present
only when every sentinel it needs appears; a template that fails or refuses the probe
conversation proves the feature absent for that conversation shape. Where templates
differ in how they expect values (tool-call arguments as an object or as JSON text,
tool-call ids of any shape or exactly nine alphanumerics, reasoning as a field or inline),
the probes try each shape and record the first one that works in :class:`RenderStyle`.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from typing import Any, Final

from emelex.model._capabilities import Capabilities
from emelex.model._messages import Message, ToolCall
from emelex.model._request import ToolDefinition
from emelex.model.templates._errors import ChatTemplateError
from emelex.model.templates._format import (
    ArgumentsStyle,
    CallIdStyle,
    ChatFormat,
    ReasoningStyle,
    RenderStyle,
    ThinkMarkers,
    ToolCallFamily,
    message_dicts,
    tool_dicts,
)
from emelex.model.templates._jinja import ChatTemplate

# Sentinels: lowercase ASCII letters and digits only, so no template filter (trim, title,
# JSON escaping) can change them and no two of them overlap.
_SYSTEM: Final = "sysprobe4fq2"
_USER: Final = "userprobe8kx1"
_USER_AGAIN: Final = "userprobe3mz7"
_ANSWER: Final = "answerprobe5tn0"
_TOOL_NAME: Final = "toolprobe6wd4"
_TOOL_DESCRIPTION: Final = "descprobe2hv9"
_PARAMETER: Final = "paramprobe7yc3"
_ARGUMENT_VALUE: Final = "argprobe1rj8"
_RESULT: Final = "resultprobe9bs5"
_REASONING: Final = "reasonprobe0lg6"
_CALL_ID: Final = "call_probe_0001"

_THINKING_VARIABLES: Final = ("enable_thinking", "thinking")

_PROBE_TOOL: Final = ToolDefinition(
    _TOOL_NAME,
    _TOOL_DESCRIPTION,
    {
        "type": "object",
        "properties": {_PARAMETER: {"type": "string", "description": "probe"}},
        "required": [_PARAMETER],
    },
)
_PROBE_CALL: Final = ToolCall(_CALL_ID, _TOOL_NAME, {_PARAMETER: _ARGUMENT_VALUE})
# The arguments must appear as JSON, not as a Python dict repr or doubly encoded text.
_ARGUMENTS_RE: Final = re.compile(rf'"{_PARAMETER}"\s*:\s*"{_ARGUMENT_VALUE}"')


def _render(
    template: ChatTemplate,
    messages: Sequence[Message],
    style: RenderStyle,
    think: ThinkMarkers | None,
    *,
    tools: Sequence[ToolDefinition] = (),
    add_generation_prompt: bool = True,
    variables: dict[str, Any] | None = None,
) -> str | None:
    """The rendered text, or None when the template fails or refuses."""
    try:
        return template.render(
            message_dicts(messages, style, think),
            tools=tool_dicts(tools) or None,
            add_generation_prompt=add_generation_prompt,
            **(variables or {}),
        )
    except ChatTemplateError:
        return None


def _contains(text: str | None, *needles: str) -> bool:
    return text is not None and all(needle in text for needle in needles)


def _tool_family(source: str) -> ToolCallFamily:
    if "<tool_call>" in source:
        return ToolCallFamily.HERMES
    if "[TOOL_CALLS]" in source:
        return ToolCallFamily.MISTRAL
    if "<|python_tag|>" in source or ("ipython" in source and '"parameters"' in source):
        return ToolCallFamily.LLAMA3_JSON
    return ToolCallFamily.NONE


def _think_markers(source: str) -> ThinkMarkers | None:
    markers = ThinkMarkers()
    if markers.open in source and markers.close in source:
        return markers
    return None


def probe_chat_template(
    source: str | ChatTemplate, *, bos_token: str = "", eos_token: str = ""
) -> ChatFormat:
    """Probe a chat template and return the :class:`ChatFormat` that renders for it.

    ``source`` is the template's Jinja text (or an already compiled
    :class:`ChatTemplate`); ``bos_token``/``eos_token`` are the model's special token
    texts, which templates may print. Pure and deterministic; takes a few milliseconds.
    Raises :class:`ChatTemplateError` when the template does not compile or cannot
    render even a single user message.
    """
    template = (
        source
        if isinstance(source, ChatTemplate)
        else ChatTemplate(source, bos_token=bos_token, eos_token=eos_token)
    )
    think = _think_markers(template.source)
    base = RenderStyle()

    only_user = [Message.user(_USER)]
    try:
        template.render(message_dicts(only_user, base, think), add_generation_prompt=True)
    except ChatTemplateError as exc:
        raise ChatTemplateError(f"the chat template cannot render one user message: {exc}") from exc

    system_prompt = _contains(
        _render(template, [Message.system(_SYSTEM), *only_user], base, think), _SYSTEM, _USER
    )
    tool_declarations = _contains(
        _render(template, only_user, base, think, tools=[_PROBE_TOOL]),
        _TOOL_NAME,
        _TOOL_DESCRIPTION,
        _PARAMETER,
    )

    # Tool history: a call and its result, trying each argument and id shape.
    history = [
        *only_user,
        Message.assistant(tool_calls=[_PROBE_CALL]),
        Message.tool(_CALL_ID, _RESULT),
    ]
    tool_history = False
    arguments: ArgumentsStyle = "object"
    call_ids: CallIdStyle = "native"
    shapes: Sequence[tuple[ArgumentsStyle, CallIdStyle]] = list(
        itertools.product(("object", "string"), ("native", "alnum9"))
    )
    for arguments_shape, ids_shape in shapes:
        style = RenderStyle(arguments=arguments_shape, call_ids=ids_shape)
        text = _render(template, history, style, think, tools=[_PROBE_TOOL])
        if _contains(text, _TOOL_NAME, _RESULT) and text is not None and _ARGUMENTS_RE.search(text):
            tool_history = True
            arguments, call_ids = arguments_shape, ids_shape
            break

    # Thinking toggle: a variable whose value changes the rendered generation prompt.
    thinking_variable: str | None = None
    for variable in _THINKING_VARIABLES:
        on = _render(template, only_user, base, think, variables={variable: True})
        off = _render(template, only_user, base, think, variables={variable: False})
        if on is not None and off is not None and on != off:
            thinking_variable = variable
            break

    # Reasoning history: reasoning of an earlier, finished turn reaches the prompt.
    earlier_turn = [
        *only_user,
        Message.assistant(_ANSWER, reasoning=_REASONING),
        Message.user(_USER_AGAIN),
    ]
    thinking_on: dict[str, Any] = {thinking_variable: True} if thinking_variable else {}
    reasoning: ReasoningStyle = "drop"
    shapes_r: tuple[ReasoningStyle, ...] = ("field", "inline") if think else ("field",)
    for reasoning_shape in shapes_r:
        style = RenderStyle(reasoning=reasoning_shape)
        text = _render(template, earlier_turn, style, think, variables=thinking_on)
        if _contains(text, _REASONING, _ANSWER, _USER_AGAIN):
            reasoning = reasoning_shape
            break

    capabilities = Capabilities(
        system_prompt=system_prompt,
        tool_declarations=tool_declarations,
        tool_history=tool_history,
        thinking_toggle=thinking_variable is not None,
        reasoning_history=reasoning != "drop",
    )
    return ChatFormat(
        template=template,
        capabilities=capabilities,
        tool_family=_tool_family(template.source),
        think=think,
        style=RenderStyle(
            arguments=arguments,
            reasoning=reasoning,
            call_ids=call_ids,
            thinking_variable=thinking_variable,
        ),
    )
