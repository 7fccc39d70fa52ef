"""Requests of Host operations that take no other declaration's shape over the wire.

The in-process Host takes these operations' arguments directly; a transport needs one
request object per operation, so these complete the set (``emelex serve`` and
``HostClient`` speak them).
"""

from __future__ import annotations

from emelex.contracts._history import Position
from emelex.contracts._ids import InvocationId, SessionId
from emelex.contracts._limits import MAX_SAFE_INTEGER
from emelex.contracts._sessions import SessionInfo
from emelex.contracts._wire import count, items, wire

#: Sessions one ``listSessions`` answer carries.
MAX_SESSIONS = 10_000


@wire
class ListSessionsRequest:
    """List the Host's sessions (the body is the empty object)."""


@wire
class SessionList:
    """Every session of the Host, in creation order."""

    sessions: tuple[SessionInfo, ...] = items(max_items=MAX_SESSIONS, limit="sessions")


@wire
class QueueRequest:
    """Read one session's work queue."""

    session_id: SessionId


@wire
class ReadRowRequest:
    """Read one row by position under the fence ``through`` (null: the newest)."""

    session_id: SessionId
    position: Position
    through: int | None = count(maximum=MAX_SAFE_INTEGER)


@wire
class ExecuteResultRequest:
    """How an Executor task ended (null while it is queued or running)."""

    session_id: SessionId
    invocation_id: InvocationId
