"""A search page's hits: what the matcher finds in each field of each candidate row, and
a page ends before the row whose hits would pass the page's limit."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import emelex.service.ops._searching as searching
from emelex import contracts
from emelex.contracts import ContractLimitExceeded, find_matches
from emelex.service.ops._searching import match_rows
from emelex.store import CandidateRow, Position
from emelex.store._search import MAX_ROW_HITS

# Word and non-word characters, case partners, the separators themselves.
ALPHABET = "aAbß\u1e9e\u03c3\u03c2\u03a3\u0130i_1 .\x00\x01\u200d"

Hit = tuple[int, int, str, int, int]


def row(number: int, *fields: str) -> CandidateRow:
    names = ["body", "thinking"] + ["toolArguments"] * (len(fields) - 2)
    return CandidateRow(Position(number, 0), tuple(zip(names, fields, strict=False)))


def per_field(
    rows: list[CandidateRow], query: str, limit: int, **options: bool
) -> tuple[list[Hit], tuple[int, int] | None]:
    """The oracle: one matcher call per field, and the page limit applied row by row."""
    hits: list[Hit] = []
    for number, candidate in enumerate(rows):
        found = [
            (candidate.position.source_sequence, 0, name, start, end)
            for name, value in candidate.fields
            for start, end in find_matches(value, query, **options)
        ]
        if len(hits) + len(found) > limit:
            if number == 0:
                raise ContractLimitExceeded("search hits", limit, len(found))
            return hits, (rows[number - 1].position.source_sequence, 0)
        hits += found
    return hits, None


def batched(
    rows: list[CandidateRow] | list[CandidateRow | contracts.SearchHit], query: str, **options: bool
) -> tuple[list[Hit], tuple[int, int] | None]:
    hits, cut = match_rows(rows, query, **options)
    flat: list[Hit] = [
        (h.position.source_sequence, h.position.item_index, h.field, h.start, h.end) for h in hits
    ]
    return flat, None if cut is None else (cut.source_sequence, cut.item_index)


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
    try:
        expected = per_field(rows, query, limit, **options)
    except ContractLimitExceeded:
        with limits(limit), pytest.raises(ContractLimitExceeded):
            batched(rows, query, **options)
        return
    with limits(limit):
        assert batched(rows, query, **options) == expected


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
        try:
            expected = batched(rows, query, **options)
        except ContractLimitExceeded:
            with pytest.raises(ContractLimitExceeded):
                batched(mixed, query, **options)
            return
        assert batched(mixed, query, **options) == expected


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


def test_a_page_ends_before_the_row_whose_hits_do_not_fit() -> None:
    rows = [row(1, "aa a", ""), row(2, "no", ""), row(3, "a a", "a")]
    with limits(4):
        hits, cut = match_rows(rows, "a", case_sensitive=True, whole_word=False)
        assert [h.position.source_sequence for h in hits] == [1, 1, 1]
        # The row before the one that does not fit:
        assert cut == contracts.Position(source_sequence=2, item_index=0)
        with pytest.raises(ContractLimitExceeded):
            match_rows([row(4, "a a a a a", "")], "a", case_sensitive=True, whole_word=False)
