"""Sessions: their summary, branch of origin and creation."""

from __future__ import annotations

from typing import Literal

from emelex.contracts._ids import AgentName, OperationRef, SessionId, TurnId
from emelex.contracts._limits import MAX_NAME_CHARS, MAX_SAFE_INTEGER
from emelex.contracts._operations import OperationReceipt
from emelex.contracts._wire import count, text, wire

SessionState = Literal["idle", "running"]


@wire
class Branch:
    """Where a forked session came from: its source session, turn (null: all) and fence."""

    source_session_id: SessionId
    source_turn_id: TurnId | None
    source_revision: int = count(maximum=MAX_SAFE_INTEGER)


@wire
class SessionInfo:
    """A session as clients see it; ``revision`` is its newest event sequence."""

    id: SessionId
    agent: AgentName
    title: str | None = text(max_len=MAX_NAME_CHARS)
    workspace: str = text(min_len=1, max_len=4096)
    branch: Branch | None
    state: SessionState
    revision: int = count(maximum=MAX_SAFE_INTEGER)
    created_at_ms: int = count(maximum=MAX_SAFE_INTEGER)


@wire
class CreateSessionRequest:
    """Start a session of a named agent on a workspace directory of the Host."""

    agent: AgentName
    workspace: str = text(min_len=1, max_len=4096)
    title: str | None = text(max_len=MAX_NAME_CHARS)
    operation: OperationRef


@wire
class CreateSessionReceipt:
    """The created session and the operation receipt."""

    session: SessionInfo
    receipt: OperationReceipt
