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
    Position,
    SearchCursor,
    SearchHit,
    SearchPage,
    find_matches,
)
from emelex.service._rows import wire_position
from emelex.store import CandidatePage, CandidateRow

_hit = positional_builder(SearchHit)
_page = positional_builder(SearchPage)


def search_page(
    page: CandidatePage,
    query: str,
    *,
    case_sensitive: bool,
    whole_word: bool,
    skip: tuple[int, int, int] | None = None,
) -> SearchPage:
    """The page of hits in the store's candidate ``page``: it ends where the candidates
    end, or where ``MAX_SEARCH_HITS`` hits are reached (then inside a row when that row
    holds more than the page has room for). ``skip`` is ``(source_sequence, item_index,
    hits)``: that row's first ``hits`` hits were returned by the page before."""
    hits: list[SearchHit] = []
    cut = None
    if page.rows:
        hits, cut = match_rows(
            page.rows, query, case_sensitive=case_sensitive, whole_word=whole_word, skip=skip
        )
    if cut is None and page.next_after is not None:
        cut = SearchCursor.after_row(wire_position(page.next_after))
    return _page(page.through, tuple(hits), cut)


def match_rows(
    rows: Sequence[CandidateRow | SearchHit],
    query: str,
    *,
    case_sensitive: bool,
    whole_word: bool,
    skip: tuple[int, int, int] | None = None,
) -> tuple[list[SearchHit], SearchCursor | None]:
    """Every hit of ``query`` in ``rows``, in history order, each row's fields in the
    order the store gives them (body, thinking, each tool call's ``arguments_text``). A
    ``SearchHit`` among the rows is a match that the store's scan found itself (only a
    scan of this same query with these options, asked for spans, gives them; a row's
    hits come one after the other): it is taken as it is.

    A page holds at most ``MAX_SEARCH_HITS`` hits: when they are reached, the page ends
    and the second value is its cursor, inside the row whose hits did not all fit (so a
    row of any number of hits is returned over as many pages as it needs).
    """
    hits: list[SearchHit] = []
    index = 0
    count = len(rows)
    while index < count:
        row = rows[index]
        if type(row) is SearchHit:
            if skip is None:
                # The store's own hits, often thousands of rows of them: one slice for
                # the whole run when it fits (the common case), row by row only at the
                # page's end.
                end = index
                while end < count and type(rows[end]) is SearchHit:
                    end += 1
                if end - index <= MAX_SEARCH_HITS - len(hits):
                    hits += cast("Sequence[SearchHit]", rows[index:end])
                    index = end
                    continue
            key = _row_of(row)
            found, index = _store_hits_of_row(rows, index, key)
        else:
            # A candidate row: the matcher decides (inline: this loop runs once per
            # candidate row, thousands of times per page).
            index += 1
            assert isinstance(row, CandidateRow)
            found = []
            position = None
            # Fields come as body, thinking, then each call's arguments in order.
            for number, (name, value) in enumerate(row.fields):
                if not value:
                    continue  # an empty field (most rows' thinking) holds no match
                matched = find_matches(
                    value, query, case_sensitive=case_sensitive, whole_word=whole_word
                )
                if matched:
                    if position is None:
                        position = wire_position(row.position)
                    call = number - 2 if number >= 2 else None
                    found += [_hit(position, name, start, stop, call) for start, stop in matched]
            if not found:
                continue
            key = (row.position.source_sequence, row.position.item_index)
        # Only the scan's first row can be the cursor's (the store scans from it).
        taken = skip[2] if skip is not None and key == skip[:2] else 0
        skip = None
        if taken:
            found = found[taken:]
        room = MAX_SEARCH_HITS - len(hits)
        if len(found) > room:
            hits += found[:room]
            return hits, _cursor(key, taken + room)
        hits += found
    return hits, None


def _store_hits_of_row(
    rows: Sequence[CandidateRow | SearchHit], index: int, key: tuple[int, int]
) -> tuple[list[SearchHit], int]:
    """The run of the store's own hits of the row ``key`` from ``rows[index]``, and the
    index after it."""
    end = index + 1
    while end < len(rows) and type(rows[end]) is SearchHit and _row_of(rows[end]) == key:
        end += 1
    return list(cast("Sequence[SearchHit]", rows[index:end])), end


def search_cursor(after: SearchCursor | Position | None) -> SearchCursor | None:
    """A search's ``after`` as a cursor (a row position is the cursor past that row)."""
    if after is None or isinstance(after, SearchCursor):
        return after
    return SearchCursor.after_row(after)


def _cursor(key: tuple[int, int], within: int) -> SearchCursor:
    return SearchCursor(source_sequence=key[0], item_index=key[1], within=within)


def _row_of(row: CandidateRow | SearchHit) -> tuple[int, int]:
    position = row.position
    return (position.source_sequence, position.item_index)
