"""Structural rules for conversation history (pure functions)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import attrs

from emelex.agent._ceilings import argument_bytes
from emelex.agent._errors import InvalidHistory
from emelex.model import Message


def validate_history(messages: Sequence[Message], declared: Iterable[str] | None) -> None:
    """Raise :class:`InvalidHistory` unless ``messages`` is a replayable conversation.

    Rules: a system message may only come first; every assistant tool call has a unique
    id, names a declared tool and is answered by exactly one tool message among the
    messages directly following it; tool messages answer a call of that batch only.
    ``declared=None`` checks structure only (no declaration check): for history the
    harness committed itself, whose calls of tools a session lacks were answered with a
    synthetic result (requests declare those names with a retired placeholder).
    """
    names = None if declared is None else set(declared)
    seen_ids: set[str] = set()
    open_calls: dict[str, str] = {}
    for index, message in enumerate(messages):
        if message.role == "system" and index != 0:
            raise InvalidHistory(f"message {index}: a system message may only come first")
        if message.role == "tool":
            call_id = message.tool_call_id
            if call_id is None or call_id not in open_calls:
                raise InvalidHistory(
                    f"message {index}: tool result {call_id!r} answers no open call of the "
                    "preceding assistant message"
                )
            del open_calls[call_id]
            continue
        if open_calls:
            raise InvalidHistory(f"message {index}: calls {sorted(open_calls)} were never answered")
        for call in message.tool_calls:
            if call.id in seen_ids:
                raise InvalidHistory(f"message {index}: duplicate tool call id {call.id!r}")
            if names is not None and call.name not in names:
                raise InvalidHistory(
                    f"message {index}: call {call.id!r} names undeclared tool {call.name!r}"
                )
            problem = _unmeasurable(call.arguments)
            if problem is not None:
                raise InvalidHistory(f"message {index}: call {call.id!r} {problem}")
            seen_ids.add(call.id)
            open_calls[call.id] = call.name
    if open_calls:
        raise InvalidHistory(f"calls {sorted(open_calls)} at the end were never answered")


def _unmeasurable(arguments: object) -> str | None:
    # Stored sessions may hold NaN (json writes and reads it), so only what cannot be
    # encoded at all is refused; new rounds are held to json_problem's stricter rule.
    try:
        argument_bytes(arguments)
    except (TypeError, ValueError, RecursionError) as exc:
        return f"has arguments that cannot be encoded as JSON ({type(exc).__name__}: {exc})"
    return None


def strip_reasoning(messages: Sequence[Message]) -> tuple[Message, ...]:
    """The messages with assistant reasoning removed (same objects when there is none)."""
    return tuple(
        attrs.evolve(message, reasoning=None) if message.reasoning is not None else message
        for message in messages
    )


def referenced_tools(messages: Iterable[Message]) -> set[str]:
    return {call.name for message in messages for call in message.tool_calls}


def has_tool_history(messages: Iterable[Message]) -> bool:
    return any(message.tool_calls or message.role == "tool" for message in messages)
