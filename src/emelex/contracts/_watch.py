"""Watch: the updates a session subscription publishes, resumable from a cursor."""

from __future__ import annotations

from typing import Literal

from emelex.contracts._history import HistoryRow, Position
from emelex.contracts._ids import InvocationId, SessionId
from emelex.contracts._interactions import Interaction
from emelex.contracts._limits import MAX_DRAFT_CHUNK_CHARS, MAX_PAGE_SIZE, MAX_SAFE_INTEGER
from emelex.contracts._operations import QueueSnapshot
from emelex.contracts._wire import count, items, wire, wire_union
from emelex.contracts._wire import text as bounded_text


@wire
class WatchRequest:
    """Subscribe after ``after`` (exclusive; a history page's ``nextAfter``)."""

    session_id: SessionId
    after: Position | None


@wire
class RowsPublished:
    """New rows up to the fence ``through``; resume a later watch from ``nextAfter``."""

    kind: Literal["rows"] = "rows"
    through: int = count(maximum=MAX_SAFE_INTEGER)
    rows: tuple[HistoryRow, ...] = items(max_items=MAX_PAGE_SIZE)
    next_after: Position | None


@wire
class QueueChanged:
    """The queue after a change."""

    kind: Literal["queue"] = "queue"
    queue: QueueSnapshot


@wire
class InteractionsChanged:
    """The pending interactions after a change."""

    kind: Literal["interactions"] = "interactions"
    pending: tuple[Interaction, ...] = items(max_items=MAX_PAGE_SIZE)


#: ``lagged``: the watcher fell behind its bounded buffer and was dropped; resume from
#: ``resumeAfter`` with a new watch (no gap, no duplicate).
WatchEndReason = Literal["lagged", "closed", "sessionDeleted"]


@wire
class WatchEnded:
    """The last update of a subscription."""

    kind: Literal["end"] = "end"
    reason: WatchEndReason
    resume_after: Position | None


@wire
class DraftUpdated:
    """Not durable (live watches only): text a model step is streaming for the running
    invocation. ``text`` continues the step's answer at code point ``textOffset`` and
    ``thinking`` its reasoning at ``thinkingOffset``; either may be empty. Drafts carry
    no cursor, are never stored and never appear in history: the committed rows
    supersede them (see :class:`DraftCleared`)."""

    kind: Literal["draft"] = "draft"
    invocation_id: InvocationId
    step: int = count(maximum=MAX_SAFE_INTEGER)
    text_offset: int = count(maximum=MAX_SAFE_INTEGER)
    text: str = bounded_text(max_len=MAX_DRAFT_CHUNK_CHARS)
    thinking_offset: int = count(maximum=MAX_SAFE_INTEGER)
    thinking: str = bounded_text(max_len=MAX_DRAFT_CHUNK_CHARS)


#: Why drafts were dropped: the invocation ended with this outcome (its rows, if any,
#: were published just before), or one model step ``failed`` (the turn goes on).
DraftClearReason = Literal["completed", "failed", "stopped", "interrupted"]


@wire
class DraftCleared:
    """Not durable (live watches only): discard the drafts of ``invocationId`` (only
    step ``step``, or every step when null)."""

    kind: Literal["draftCleared"] = "draftCleared"
    invocation_id: InvocationId
    step: int | None = count(maximum=MAX_SAFE_INTEGER)
    reason: DraftClearReason


WatchUpdate = (
    RowsPublished | QueueChanged | InteractionsChanged | WatchEnded | DraftUpdated | DraftCleared
)
wire_union("WatchUpdate", WatchUpdate)
