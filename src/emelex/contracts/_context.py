"""Context: the latest main request a session prepared, grouped for inspection."""

from __future__ import annotations

from typing import Any, Literal

from emelex.contracts._history import Role
from emelex.contracts._ids import InvocationId, SessionId, TurnId
from emelex.contracts._limits import MAX_MESSAGE_CHARS, MAX_NAME_CHARS, MAX_SAFE_INTEGER, MAX_TOOLS
from emelex.contracts._wire import count, items, text, wire

RequestState = Literal["running", "completed", "failed", "interrupted"]


@wire
class RoleGroup:
    """The request's messages of one role: how many, and their estimated tokens."""

    role: Role
    messages: int = count(maximum=MAX_SAFE_INTEGER)
    estimated_tokens: int | None = count(maximum=MAX_SAFE_INTEGER)


@wire
class ToolSchema:
    """A tool the request declared to the model, with its JSON Schema parameters."""

    name: str = text(min_len=1, max_len=MAX_NAME_CHARS)
    description: str = text(max_len=MAX_MESSAGE_CHARS)
    parameters: dict[str, Any]
    estimated_tokens: int | None = count(maximum=MAX_SAFE_INTEGER)


@wire
class PreparedRequest:
    """One main model request: estimates beside the provider's reported input usage."""

    invocation_id: InvocationId
    turn_id: TurnId
    state: RequestState
    prepared_sequence: int = count(maximum=MAX_SAFE_INTEGER)
    groups: tuple[RoleGroup, ...] = items(max_items=4)
    tools: tuple[ToolSchema, ...] = items(max_items=MAX_TOOLS)
    estimated_tokens: int | None = count(maximum=MAX_SAFE_INTEGER)
    provider_input_tokens: int | None = count(maximum=MAX_SAFE_INTEGER)


@wire
class ContextRequest:
    """Read the context pinned by ``through`` (null: the newest event)."""

    session_id: SessionId
    through: int | None = count(maximum=MAX_SAFE_INTEGER)


@wire
class ContextReport:
    """``request`` is null when the session has prepared no request of its own."""

    session_id: SessionId
    through: int = count(maximum=MAX_SAFE_INTEGER)
    request: PreparedRequest | None
