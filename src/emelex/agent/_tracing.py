"""What the agent layer adds to the runtime's actor spans: the OpenTelemetry GenAI
semantic conventions (operation, model, token usage, tool name and call id) and emelex's
own turn outcome.

The runtime opens and closes one span per actor; these functions only annotate the
span of an actor the session already holds, and return at once when it has none (no
tracer provider configured). Prompt, completion, tool argument and tool result text are
recorded only when ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` is ``true``
(the switch the OpenTelemetry GenAI instrumentations share), each clipped to
:data:`MAX_CONTENT_CHARS`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from emelex._text import shorten
from emelex.agent._approval import ApprovalDecision, Deny
from emelex.model import (
    AgentModel,
    GenerationRequest,
    Message,
    Response,
    TextPart,
    ToolCall,
    Usage,
)
from emelex.runtime import Actor

if TYPE_CHECKING:
    from emelex.agent._turn_core import AgentTurn, TurnCore
    from emelex.model import ToolDefinition
    from emelex.tools import ToolOutput

#: The environment switch that lets spans carry message and tool text.
CAPTURE_CONTENT_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
#: Longest text one content attribute carries.
MAX_CONTENT_CHARS = 16_000

#: ``emelex.turn.outcome`` values.
COMMITTED = "committed"
ROLLED_BACK = "rolled_back"
CHECKPOINTED = "checkpointed"


def capture_content() -> bool:
    return os.environ.get(CAPTURE_CONTENT_ENV, "").strip().lower() == "true"


def model_identity(model: AgentModel) -> tuple[str, str | None]:
    """``(gen_ai.provider.name, gen_ai.request.model)`` for a model, as far as known.
    Wrappers that expose the model they wrap as ``wrapped`` (the Engine's gating and
    budgeting models) are looked through."""
    for _ in range(8):  # bounded: a wrapper chain is a handful deep
        inner = getattr(model, "wrapped", None)
        if inner is None:
            break
        model = inner
    module = type(model).__module__
    if module.startswith("emelex.model.openai"):
        name = getattr(model, "model", None)
        return "openai", name if isinstance(name, str) else None
    if module.startswith("emelex.model.llama"):
        path = getattr(model, "path", None)
        return "llama.cpp", getattr(path, "name", None)
    return type(model).__name__, None


def session_started(actor: Actor, session_id: str) -> None:
    span = actor.span
    if span is not None:
        span.set_attribute("gen_ai.conversation.id", session_id)


def turn_started(actor: Actor | None, session_id: str, core: TurnCore, model: AgentModel) -> None:
    span = actor.span if actor is not None else None
    if span is None:
        return
    provider, name = model_identity(model)
    span.update_name("invoke_agent")
    span.set_attributes(
        {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.provider.name": provider,
            "gen_ai.conversation.id": session_id,
            "emelex.turn.id": core.turn_id,
            "emelex.turn.max_rounds": core.max_rounds,
        }
    )
    if name:
        span.set_attribute("gen_ai.request.model", name)


def turn_ended(
    actor: Actor | None,
    core: TurnCore,
    result: AgentTurn | None,
    consumer_failed: bool,
    cancelled: bool,
) -> None:
    """Record how the turn resolves, by the same rule the session then applies: it
    commits when the drive finished and the consumer did not fail, otherwise it rolls
    back unless a tool may have run (then it keeps a checkpoint)."""
    span = actor.span if actor is not None else None
    if span is None:
        return
    if result is not None and not consumer_failed:
        outcome = COMMITTED
        span.set_attributes(_usage(result.usage))
    else:
        outcome = CHECKPOINTED if core.tools_may_have_run else ROLLED_BACK
    span.set_attributes(
        {
            "emelex.turn.outcome": outcome,
            "emelex.turn.rounds": core.round,
            "emelex.turn.cancelled": cancelled,
        }
    )
    if cancelled and result is None:
        # A turn whose AgentCancellation reached a running tool ends by returning once
        # the tool's result is in (its scope is never cancelled): cancelled all the same.
        span.set_attribute("emelex.actor.cancelled", True)


def _usage(usage: Usage) -> dict[str, Any]:
    """Token counts; ``emelex.usage.estimated`` only when the backend counted them itself
    (the provider reported none), so an estimate is never read as a report."""
    attributes: dict[str, Any] = {
        "gen_ai.usage.input_tokens": usage.input_tokens,
        "gen_ai.usage.output_tokens": usage.output_tokens,
    }
    if usage.estimated:
        attributes["emelex.usage.estimated"] = True
    return attributes


def model_round_started(actor: Actor, model: AgentModel, request: GenerationRequest) -> None:
    span = actor.span
    if span is None:
        return
    provider, name = model_identity(model)
    options = request.options
    span.update_name(f"chat {name}" if name else "chat")
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": provider,
        "gen_ai.request.stream": True,
    }
    if name:
        attributes["gen_ai.request.model"] = name
    if options.max_tokens is not None:
        attributes["gen_ai.request.max_tokens"] = options.max_tokens
    if options.temperature is not None:
        attributes["gen_ai.request.temperature"] = options.temperature
    if options.top_p is not None:
        attributes["gen_ai.request.top_p"] = options.top_p
    if options.seed is not None:
        attributes["gen_ai.request.seed"] = options.seed
    if capture_content():
        attributes["gen_ai.input.messages"] = _clip_json(_messages(request.messages))
    span.set_attributes(attributes)


def model_round_completed(actor: Actor, response: Response) -> None:
    span = actor.span
    if span is None:
        return
    attributes: dict[str, Any] = {
        "gen_ai.response.finish_reasons": (response.finish_reason,),
        **_usage(response.usage),
        "emelex.model.tool_calls": len(response.tool_calls),
    }
    if capture_content():
        output = _message(response.to_message())
        output["finish_reason"] = response.finish_reason
        attributes["gen_ai.output.messages"] = _clip_json([output])
    span.set_attributes(attributes)


def approval_decided(actor: Actor, call: ToolCall, decision: ApprovalDecision) -> None:
    span = actor.span
    if span is None:
        return
    span.set_attributes(
        {
            "gen_ai.tool.name": call.name,
            "gen_ai.tool.call.id": call.id,
            "emelex.approval.decision": "deny" if isinstance(decision, Deny) else "approve",
        }
    )


def tool_started(actor: Actor, definition: ToolDefinition, call: ToolCall) -> None:
    span = actor.span
    if span is None:
        return
    span.update_name(f"execute_tool {call.name}")
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": call.name,
        "gen_ai.tool.call.id": call.id,
        "gen_ai.tool.type": "function",
    }
    if definition.description:
        attributes["gen_ai.tool.description"] = shorten(definition.description, 1_000)
    if capture_content():
        attributes["gen_ai.tool.call.arguments"] = _clip_json(call.arguments)
    span.set_attributes(attributes)


def tool_returned(actor: Actor, output: ToolOutput) -> None:
    span = actor.span
    if span is None:
        return
    span.set_attribute("emelex.tool.is_error", output.is_error)
    if capture_content():
        span.set_attribute("gen_ai.tool.call.result", shorten(output.text, MAX_CONTENT_CHARS))


def _message(message: Message) -> dict[str, Any]:
    parts: list[dict[str, Any]] = []
    for part in message.content:
        if isinstance(part, TextPart):
            parts.append({"type": "text", "content": part.text})
        else:
            parts.append({"type": "blob", "mime_type": getattr(part, "mime_type", None)})
    if message.reasoning:
        parts.append({"type": "reasoning", "content": message.reasoning})
    parts.extend(
        {"type": "tool_call", "id": call.id, "name": call.name, "arguments": call.arguments}
        for call in message.tool_calls
    )
    if message.tool_call_id is not None:
        text = "".join(part.text for part in message.content if isinstance(part, TextPart))
        parts = [{"type": "tool_call_response", "id": message.tool_call_id, "response": text}]
    return {"role": message.role, "parts": parts}


def _messages(messages: Sequence[Message]) -> list[dict[str, Any]]:
    return [_message(message) for message in messages]


def _clip_json(value: object) -> str:
    return shorten(json.dumps(value, ensure_ascii=False, default=str), MAX_CONTENT_CHARS)
