"""A search page's hits: the exact matcher over the rows the store could not rule out.

Runs on the store's reader thread right after its scan (``search_candidates_as``: a
page's rows may hold a few MiB of text between them), so a search never holds the
Host's event loop and costs one thread hop per page. Hits are built without
construction checks: positions come from the store's checked rows and offsets from the
matcher itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

from emelex._builders import positional_builder
from emelex.contracts import (
    MAX_SEARCH_HITS,
    ContractLimitExceeded,
    Position,
    SearchHit,
    SearchPage,
    find_matches,
)
from emelex.service._rows import wire_position
from emelex.store import CandidatePage, CandidateRow

_hit = positional_builder(SearchHit)
_page = positional_builder(SearchPage)


def search_page(
    page: CandidatePage, query: str, *, case_sensitive: bool, whole_word: bool
) -> SearchPage:
    """The page of hits in the store's candidate ``page``: it ends where the candidates
    end, or earlier when the hits would pass ``MAX_SEARCH_HITS``."""
    hits: list[SearchHit] = []
    cut = None
    if page.rows:
        hits, cut = match_rows(
            page.rows, query, case_sensitive=case_sensitive, whole_word=whole_word
        )
    if cut is None and page.next_after is not None:
        cut = wire_position(page.next_after)
    return _page(page.through, tuple(hits), cut)


def match_rows(
    rows: Sequence[CandidateRow | SearchHit],
    query: str,
    *,
    case_sensitive: bool,
    whole_word: bool,
) -> tuple[list[SearchHit], Position | None]:
    """Every hit of ``query`` in ``rows``, in history order, each row's fields in the
    order the store gives them (body, thinking, each tool call's arguments as JSON). A
    ``SearchHit`` among the rows is a match that the store's scan found itself (only a
    scan of this same query with these options, asked for spans, gives them; a row's
    hits come one after the other): it is taken as it is.

    A page holds at most ``MAX_SEARCH_HITS`` hits: when the next row's hits would pass
    that, the page ends before it and the second value is the last row included (the
    page's cursor). A single row with more hits than that raises
    ``ContractLimitExceeded``.
    """
    hits: list[SearchHit] = []
    taken = 0  # rows before this one are in ``hits``
    for number, row in enumerate(rows):
        if type(row) is SearchHit:
            continue  # taken with the run of hits it belongs to
        cut = _take_hits(hits, rows, taken, number)
        if cut is not None:
            return hits, cut
        assert isinstance(row, CandidateRow)
        found: list[SearchHit] = []
        position = None
        for name, value in row.fields:
            if not value:
                continue  # an empty field (most rows' thinking) holds no match
            matched = find_matches(
                value, query, case_sensitive=case_sensitive, whole_word=whole_word
            )
            if matched:
                if position is None:
                    position = wire_position(row.position)
                found += [_hit(position, name, start, end) for start, end in matched]
        if len(hits) + len(found) > MAX_SEARCH_HITS:
            if number == 0:
                raise ContractLimitExceeded("search hits", MAX_SEARCH_HITS, len(found))
            return hits, _position_of(rows[number - 1])
        hits += found
        taken = number + 1
    return hits, _take_hits(hits, rows, taken, len(rows))


def _take_hits(
    hits: list[SearchHit], rows: Sequence[CandidateRow | SearchHit], start: int, stop: int
) -> Position | None:
    """Add ``rows[start:stop]``, all hits, as far as the page has room, never parting
    a row's hits; the page's cursor when it ends among them, else None."""
    if start == stop:
        return None
    end = min(stop, start + MAX_SEARCH_HITS - len(hits))
    if end < stop:
        # The page ends before the row that does not fit (the store gives a row's hits
        # one after the other).
        while end > start and _row_of(rows[end - 1]) == _row_of(rows[end]):
            end -= 1
    hits += cast("Sequence[SearchHit]", rows[start:end])
    if end == stop:
        return None
    if end == 0:
        count = 1
        while count < stop and _row_of(rows[count]) == _row_of(rows[0]):
            count += 1
        raise ContractLimitExceeded("search hits", MAX_SEARCH_HITS, count)
    return _position_of(rows[end - 1])


def _row_of(row: CandidateRow | SearchHit) -> tuple[int, int]:
    position = row.position
    return (position.source_sequence, position.item_index)


def _position_of(row: CandidateRow | SearchHit) -> Position:
    if type(row) is SearchHit:
        return row.position
    assert isinstance(row, CandidateRow)
    return wire_position(row.position)
