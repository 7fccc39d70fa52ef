"""A search page's hits: the exact matcher over the rows the store could not rule out.

Runs on a worker thread (a page's rows may hold up to about 2 MiB of text between
them), so a search never holds the Host's event loop. Hits are built without
construction checks: positions come from the store's checked rows and offsets from the
matcher itself.
"""

from __future__ import annotations

from collections.abc import Sequence

from emelex._builders import positional_builder
from emelex.contracts import (
    MAX_SEARCH_HITS,
    ContractLimitExceeded,
    Position,
    SearchHit,
    find_matches,
)
from emelex.service._rows import wire_position
from emelex.store import CandidateRow

_hit = positional_builder(SearchHit)


def match_rows(
    rows: Sequence[CandidateRow], query: str, *, case_sensitive: bool, whole_word: bool
) -> tuple[list[SearchHit], Position | None]:
    """Every hit of ``query`` in ``rows``, in history order, each row's fields in the
    order the store gives them (body, thinking, each tool call's arguments as JSON).

    A page holds at most ``MAX_SEARCH_HITS`` hits: when the next row's hits would pass
    that, the page ends before it and the second value is the last row included (the
    page's cursor). A single row with more hits than that raises
    ``ContractLimitExceeded``.
    """
    hits: list[SearchHit] = []
    previous: Position | None = None
    for row in rows:
        position = wire_position(row.position)
        found = [
            _hit(position, name, start, end)
            for name, value in row.fields
            if value  # an empty field (most rows' thinking) holds no match
            for start, end in find_matches(
                value, query, case_sensitive=case_sensitive, whole_word=whole_word
            )
        ]
        if len(hits) + len(found) > MAX_SEARCH_HITS:
            if previous is None:
                raise ContractLimitExceeded("search hits", MAX_SEARCH_HITS, len(found))
            return hits, previous
        hits += found
        previous = position
    return hits, None
