"""Forks: a side conversation from a complete turn or all current history."""

from __future__ import annotations

from emelex.contracts._ids import OperationRef, SessionId, TurnId
from emelex.contracts._limits import MAX_NAME_CHARS, MAX_SAFE_INTEGER, MAX_TOOLS
from emelex.contracts._operations import OperationReceipt
from emelex.contracts._sessions import Branch, SessionInfo
from emelex.contracts._wire import count, items, text, wire


@wire
class ForkRequest:
    """Fork through ``turn_id`` (null: all current history), if the source is at ``revision``.

    ``tools`` narrows the new session's enabled tools (null keeps the source's); it can
    never widen them.
    """

    session_id: SessionId
    turn_id: TurnId | None
    revision: int = count(maximum=MAX_SAFE_INTEGER)
    tools: tuple[str, ...] | None = items(max_items=MAX_TOOLS, limit="fork tools")
    title: str | None = text(max_len=MAX_NAME_CHARS)
    operation: OperationRef


@wire
class ForkReceipt:
    """The published fork: the new session, its branch and the operation receipt."""

    session: SessionInfo
    branch: Branch
    receipt: OperationReceipt


@wire
class ForkReceiptRequest:
    """Locate the fork published under ``operation``; a null answer proves nothing."""

    session_id: SessionId
    operation: OperationRef
