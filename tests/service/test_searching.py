"""A search page's hits: what the matcher finds in each field of each candidate row; a
page ends at the page's limit, inside a row when that row's hits do not all fit, and
pages followed from cursor to cursor give every hit once."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from hypothesis import given, settings
from hypothesis import strategies as st

import emelex.service.ops._searching as searching
from emelex import contracts
from emelex.contracts import find_matches
from emelex.service.ops._searching import match_rows
from emelex.store import CandidateRow, Position
from emelex.store._search import MAX_ROW_HITS

# Word and non-word characters, case partners, the separators themselves.
ALPHABET = "aAbß\u1e9e\u03c3\u03c2\u03a3\u0130i_1 .\x00\x01\u200d"

Hit = tuple[int, int, str, int, int]


def row(number: int, *fields: str) -> CandidateRow:
    names = ["body", "thinking"] + ["toolArguments"] * (len(fields) - 2)
    return CandidateRow(Position(number, 0), tuple(zip(names, fields, strict=False)))


Cut = tuple[int, int, int] | None


def per_field(
    rows: list[CandidateRow], query: str, limit: int, **options: bool
) -> tuple[list[Hit], Cut]:
    """The oracle: one matcher call per field, and the first ``limit`` hits; the cursor
    names the row of the first hit left out and how many of its hits the page holds."""
    every: list[Hit] = [
        (candidate.position.source_sequence, 0, name, start, end)
        for candidate in rows
        for name, value in candidate.fields
        for start, end in find_matches(value, query, **options)
    ]
    if len(every) <= limit:
        return every, None
    page = every[:limit]
    left = every[limit]
    within = sum(1 for hit in page if hit[:2] == left[:2])
    return page, (left[0], left[1], within)


def batched(
    rows: list[CandidateRow] | list[CandidateRow | contracts.SearchHit],
    query: str,
    options: dict[str, bool],
    skip: tuple[int, int, int] | None = None,
) -> tuple[list[Hit], Cut]:
    hits, cut = match_rows(
        rows,
        query,
        case_sensitive=options["case_sensitive"],
        whole_word=options["whole_word"],
        skip=skip,
    )
    flat: list[Hit] = [
        (h.position.source_sequence, h.position.item_index, h.field, h.start, h.end) for h in hits
    ]
    if cut is None:
        return flat, None
    assert cut.within is not None  # the matcher's own cut is always inside a row
    return flat, (cut.source_sequence, cut.item_index, cut.within)


def followed(
    rows: list[CandidateRow] | list[CandidateRow | contracts.SearchHit],
    query: str,
    options: dict[str, bool],
) -> list[Hit]:
    """Every page from the first to the end, as the Host follows cursors: each scan
    starts at the cursor's row and skips the hits the page before returned."""
    hits: list[Hit] = []
    start, skip = 0, None
    for _ in range(10_000):
        page, cut = batched(rows[start:], query, options, skip)
        hits += page
        if cut is None:
            return hits
        start = next(i for i, r in enumerate(rows) if (r.position.source_sequence, 0) == cut[:2])
        skip = cut
    raise AssertionError("the pages never reached the end")


@contextmanager
def limits(hits: int) -> Iterator[None]:
    saved = getattr(searching, "MAX_SEARCH_HITS")  # noqa: B009 (not re-exported)
    setattr(searching, "MAX_SEARCH_HITS", hits)  # noqa: B010
    try:
        yield
    finally:
        setattr(searching, "MAX_SEARCH_HITS", saved)  # noqa: B010


@settings(max_examples=300, deadline=None)
@given(
    fields=st.lists(st.lists(st.text(ALPHABET, max_size=12), min_size=2, max_size=4), max_size=10),
    query=st.text(ALPHABET, min_size=1, max_size=3),
    case_sensitive=st.booleans(),
    whole_word=st.booleans(),
    limit=st.sampled_from([1, 3, 10_000]),
)
def test_the_hits_are_the_matches_of_every_field_up_to_the_page_limit(
    fields: list[list[str]],
    query: str,
    case_sensitive: bool,
    whole_word: bool,
    limit: int,
) -> None:
    rows = [row(number, *values) for number, values in enumerate(fields)]
    options = {"case_sensitive": case_sensitive, "whole_word": whole_word}
    with limits(limit):
        assert batched(rows, query, options) == per_field(rows, query, limit, **options)
        assert followed(rows, query, options) == per_field(rows, query, 10**9, **options)[0]


def as_hits(candidate: CandidateRow, query: str) -> list[CandidateRow] | list[contracts.SearchHit]:
    """What a spans scan gives for ``candidate``: the hits of a body alone holding up
    to ``MAX_ROW_HITS`` case-sensitive matches, else the candidate itself."""
    (_name, body), *others = candidate.fields
    spans = find_matches(body, query, case_sensitive=True, whole_word=False)
    if not spans or len(spans) > MAX_ROW_HITS or any(value for _name, value in others):
        return [candidate]
    at = contracts.Position(
        source_sequence=candidate.position.source_sequence,
        item_index=candidate.position.item_index,
    )
    return [contracts.SearchHit(position=at, field="body", start=s, end=e) for s, e in spans]


@settings(max_examples=300, deadline=None)
@given(
    fields=st.lists(st.lists(st.text(ALPHABET, max_size=12), min_size=2, max_size=3), max_size=12),
    query=st.text(ALPHABET, min_size=1, max_size=2),
    limit=st.sampled_from([1, 2, 3, 10_000]),
)
def test_body_hits_count_as_the_hits_the_matcher_would_find(
    fields: list[list[str]], query: str, limit: int
) -> None:
    rows = [row(number, *values) for number, values in enumerate(fields)]
    mixed: list[CandidateRow | contracts.SearchHit] = [
        item for candidate in rows for item in as_hits(candidate, query)
    ]
    options = {"case_sensitive": True, "whole_word": False}
    with limits(limit):
        assert batched(mixed, query, options) == batched(rows, query, options)
        assert followed(mixed, query, options) == followed(rows, query, options)


def test_matches_never_reach_across_fields() -> None:
    rows = [row(1, "a\x00\x01b", ""), row(2, "\x00\x01", "x\x00\x01")]
    hits, cut = match_rows(rows, "\x00\x01", case_sensitive=True, whole_word=False)
    assert [(h.position.source_sequence, h.field, h.start) for h in hits] == [
        (1, "body", 1),
        (2, "body", 0),
        (2, "thinking", 1),
    ]
    assert cut is None
    across = match_rows(
        [row(1, "xa", "bx"), row(2, "b", "")], "ab", case_sensitive=True, whole_word=False
    )
    assert across == ([], None)


def test_a_page_ends_inside_the_row_whose_hits_do_not_fit() -> None:
    rows = [row(1, "aa a", ""), row(2, "no", ""), row(3, "a a", "a")]
    with limits(4):
        hits, cut = match_rows(rows, "a", case_sensitive=True, whole_word=False)
        assert [h.position.source_sequence for h in hits] == [1, 1, 1, 3]
        assert cut == contracts.SearchCursor(source_sequence=3, item_index=0, within=1)
        rest, end = match_rows(rows[2:], "a", case_sensitive=True, whole_word=False, skip=(3, 0, 1))
        assert [(h.field, h.start) for h in rest] == [("body", 2), ("thinking", 0)]
        assert end is None


def test_a_row_with_more_hits_than_a_page_takes_several_pages() -> None:
    """The limit is the contract's (10,000): a row of 12,000 hits is two pages."""
    rows = [row(1, "a " * 12_000, "")]
    hits, cut = match_rows(rows, " ", case_sensitive=True, whole_word=False)
    assert len(hits) == contracts.MAX_SEARCH_HITS
    assert cut == contracts.SearchCursor(source_sequence=1, item_index=0, within=10_000)
    rest, end = match_rows(rows, " ", case_sensitive=True, whole_word=False, skip=(1, 0, 10_000))
    assert len(rest) == 2_000 and end is None
    assert rest[0].start == hits[-1].start + 2
