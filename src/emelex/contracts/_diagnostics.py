"""Diagnostics: session-scoped operational failures, with their own revision."""

from __future__ import annotations

from typing import Literal

from emelex.contracts._ids import DiagnosticId, InvocationId, SessionId, TurnId
from emelex.contracts._limits import MAX_MESSAGE_CHARS, MAX_PAGE_SIZE, MAX_SAFE_INTEGER
from emelex.contracts._wire import count, items, text, wire

DiagnosticKind = Literal["execution", "modelStep", "title"]
#: Safe, typed causes: never a provider's response body.
CauseCode = Literal[
    "modelUnavailable",
    "modelError",
    "modelTimeout",
    "limitExceeded",
    "toolFailed",
    "interrupted",
    #: Not a failure: a restarted Host continued the invocation's turn (the invocation
    #: then ends as it ends; this says it was taken up again).
    "resumed",
    "internal",
]


@wire
class DiagnosticCause:
    """A typed cause and a short, safe message written by emelex."""

    code: CauseCode
    message: str = text(max_len=MAX_MESSAGE_CHARS)


@wire
class Diagnostic:
    """One failure, with the original identities it belongs to (null where none)."""

    id: DiagnosticId
    revision: int = count(minimum=1, maximum=MAX_SAFE_INTEGER)
    kind: DiagnosticKind
    invocation_id: InvocationId | None
    turn_id: TurnId | None
    event_sequence: int | None = count(maximum=MAX_SAFE_INTEGER)
    cause: DiagnosticCause
    recorded_at_ms: int = count(maximum=MAX_SAFE_INTEGER)


@wire
class DiagnosticsRequest:
    """Newest-first page under ``through`` (a diagnostic revision), before ``before``."""

    session_id: SessionId
    through: int | None = count(maximum=MAX_SAFE_INTEGER)
    before: int | None = count(maximum=MAX_SAFE_INTEGER)
    limit: int = count(minimum=1, maximum=MAX_PAGE_SIZE)


@wire
class DiagnosticsPage:
    """Diagnostics newest first; ``nextBefore`` null ends the listing."""

    session_id: SessionId
    through: int = count(maximum=MAX_SAFE_INTEGER)
    diagnostics: tuple[Diagnostic, ...] = items(max_items=MAX_PAGE_SIZE)
    next_before: int | None = count(maximum=MAX_SAFE_INTEGER)


@wire
class DiagnosticsRevision:
    """What ``watchDiagnostics`` emits: on subscription, then after each change."""

    session_id: SessionId
    revision: int = count(maximum=MAX_SAFE_INTEGER)


@wire
class WatchDiagnosticsRequest:
    """Subscribe to a session's diagnostic revision (emitted at once, then on change)."""

    session_id: SessionId
