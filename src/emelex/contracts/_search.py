"""Search requests, hits and pages (the matcher itself lives in ``emelex.service``)."""

from __future__ import annotations

from typing import Literal

from emelex.contracts._errors import ContractError
from emelex.contracts._history import Position, RowAddress, check_call
from emelex.contracts._ids import SessionId
from emelex.contracts._limits import (
    MAX_PAGE_SIZE,
    MAX_QUERY_CHARS,
    MAX_SAFE_INTEGER,
    MAX_SEARCH_HITS,
)
from emelex.contracts._wire import count, items, text, wire

#: The original field a hit lies in: a row's body, its thinking, or one tool call's
#: arguments (``arguments_text``); a source read of the same field returns its text.
SearchField = Literal["body", "thinking", "toolArguments"]


@wire
class SearchCursor:
    """Where a search page ended. ``within`` null: every row up to and including the one
    at ``(sourceSequence, itemIndex)`` was scanned. ``within`` a number: the rows before
    that one were, and its first ``within`` hits were returned (a row with more hits than
    a page holds is returned over several pages). The JSON of a :class:`Position` is a
    cursor too (``within`` null), so a page's ``nextAfter`` of either kind goes back as
    the next request's ``after`` unchanged."""

    source_sequence: int = count(maximum=MAX_SAFE_INTEGER)
    item_index: int = count(maximum=MAX_SAFE_INTEGER)
    within: int | None = count(maximum=MAX_SAFE_INTEGER, default=None)

    @property
    def position(self) -> Position:
        return Position(source_sequence=self.source_sequence, item_index=self.item_index)

    @classmethod
    def after_row(cls, position: Position) -> SearchCursor:
        """The cursor past the whole row at ``position``."""
        return cls(source_sequence=position.source_sequence, item_index=position.item_index)


@wire
class SearchRequest:
    """A literal query; keep it, its options and ``through`` fixed while paging."""

    session_id: SessionId
    query: str = text(min_len=1, max_len=MAX_QUERY_CHARS, limit="search query")
    case_sensitive: bool
    whole_word: bool
    through: int | None = count(maximum=MAX_SAFE_INTEGER)
    after: SearchCursor | None
    limit: int = count(minimum=1, maximum=MAX_PAGE_SIZE)


@wire
class SearchHit:
    """One match: the exact row field and code-point offsets ``[start, end)`` in it. A
    hit in ``toolArguments`` names its ``call`` (the index in the row's ``toolCalls``)
    and counts offsets in that call's :func:`arguments_text`; open it with
    ``RowAddress(position, field, call)`` to get that text back."""

    position: Position
    field: SearchField
    start: int = count(maximum=MAX_SAFE_INTEGER)
    end: int = count(maximum=MAX_SAFE_INTEGER)
    call: int | None = count(maximum=MAX_PAGE_SIZE - 1, default=None)

    def __attrs_post_init__(self) -> None:
        if self.end < self.start:
            raise ContractError(f"SearchHit: end {self.end} precedes start {self.start}")
        check_call(self.field, self.call, "SearchHit")

    @property
    def target(self) -> RowAddress:
        """The source read that opens the field this hit lies in."""
        return RowAddress(position=self.position, field=self.field, call=self.call)


@wire
class SearchPage:
    """Hits of the rows scanned; may be empty while ``nextAfter`` is not null."""

    through: int = count(maximum=MAX_SAFE_INTEGER)
    hits: tuple[SearchHit, ...] = items(max_items=MAX_SEARCH_HITS, limit="search hits")
    next_after: SearchCursor | None
