"""Watch: the updates a session subscription publishes, resumable from a cursor."""

from __future__ import annotations

from typing import Literal

from emelex.contracts._history import HistoryRow, Position
from emelex.contracts._ids import SessionId
from emelex.contracts._interactions import Interaction
from emelex.contracts._limits import MAX_PAGE_SIZE, MAX_SAFE_INTEGER
from emelex.contracts._operations import QueueSnapshot
from emelex.contracts._wire import count, items, wire, wire_union


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


WatchUpdate = RowsPublished | QueueChanged | InteractionsChanged | WatchEnded
wire_union("WatchUpdate", WatchUpdate)
