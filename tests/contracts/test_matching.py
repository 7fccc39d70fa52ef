"""The search matcher against a slow oracle, plus hand cases from the spec's hard corners."""
# ruff: noqa: RUF001, RUF003 - the look-alike letters are the point of these cases

from __future__ import annotations

import time
import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import emelex
from emelex.contracts import (
    MAX_FIELD_CHARS,
    MAX_QUERY_CHARS,
    ContractError,
    ContractLimitExceeded,
    find_matches,
    is_word_char,
)
from emelex.contracts._casefold import simple_fold_table

# Characters that stress folding and word boundaries: sharp s in both cases, long s,
# Kelvin, Turkish i's, sigmas, a ligature, a combining accent, join controls,
# connector punctuation, digits of two scripts, spaces, punctuation, micro sign and mu,
# and a Cherokee letter in both cases (it folds to its uppercase).
_ALPHABET = "sSßẞſkK\u212aiIıİσςΣﬁfeé\u0301\u200c\u200d_-. 1٣aµμΜ\u13a0\uab70"


def _oracle_word(char: str) -> bool:
    category = unicodedata.category(char)
    return category[0] in "LM" or category in ("Nd", "Pc") or char in "\u200c\u200d"


def _oracle(text: str, query: str, case_sensitive: bool, whole_word: bool) -> list[tuple[int, int]]:
    table = simple_fold_table()

    def same(a: str, b: str) -> bool:
        if case_sensitive:
            return a == b
        return table.get(ord(a), ord(a)) == table.get(ord(b), ord(b))

    found = []
    index = 0
    while index + len(query) <= len(text):
        end = index + len(query)
        matched = all(same(text[index + k], query[k]) for k in range(len(query)))
        alone = not whole_word or (
            (index == 0 or not _oracle_word(text[index - 1]))
            and (end == len(text) or not _oracle_word(text[end]))
        )
        if matched and alone:
            found.append((index, end))
            index = end
        else:
            index += 1
    return found


texts = st.text(alphabet=_ALPHABET, max_size=40)


@settings(max_examples=400, deadline=None)
@given(texts, st.text(alphabet=_ALPHABET, min_size=1, max_size=4), st.booleans(), st.booleans())
def test_matches_equal_the_oracle(
    text: str, query: str, case_sensitive: bool, whole_word: bool
) -> None:
    expected = _oracle(text, query, case_sensitive, whole_word)
    assert find_matches(text, query, case_sensitive=case_sensitive, whole_word=whole_word) == (
        expected
    )


@settings(max_examples=300, deadline=None)
@given(texts, st.data(), st.booleans(), st.booleans())
def test_a_substring_of_the_text_is_found_where_the_oracle_finds_it(
    text: str, data: st.DataObject, case_sensitive: bool, whole_word: bool
) -> None:
    if not text:
        text = "s"
    start = data.draw(st.integers(0, len(text) - 1))
    end = data.draw(st.integers(start + 1, len(text)))
    query = text[start:end]
    if not case_sensitive:
        query = data.draw(st.sampled_from([query, query.upper(), query.lower()]))
    found = find_matches(text, query, case_sensitive=case_sensitive, whole_word=whole_word)
    assert found == _oracle(text, query, case_sensitive, whole_word)
    for first, last in found:
        # Offsets index the original text: its slice has the query's length.
        assert len(text[first:last]) == len(query)
    if case_sensitive and not whole_word:
        assert found  # the drawn occurrence (or an earlier overlapping one) is found


@pytest.mark.parametrize(
    ("text", "query", "case_sensitive", "whole_word", "expected"),
    [
        # Simple folding: ß never matches "ss", ẞ matches ß, ſ matches s.
        ("Straße STRASSE", "ss", False, False, [(11, 13)]),
        ("Straße", "STRAẞE", False, False, [(0, 6)]),
        ("ſtop Stop", "stop", False, True, [(0, 4), (5, 9)]),
        ("ſtop", "stop", True, False, []),
        # Turkish: İ folds only to itself (its full folding has two code points), ı to nothing.
        ("İstanbul istanbul ıstanbul", "istanbul", False, False, [(9, 17)]),
        ("İİ", "i̇", False, False, []),
        # Greek sigmas all fold together.
        ("ΟΔΟΣ οδος οδοσ", "οδοσ", False, True, [(0, 4), (5, 9), (10, 14)]),
        # Kelvin sign is a K.
        ("5 \u212a", "k", False, True, [(2, 3)]),
        # No normalization: precomposed é does not match e + combining acute.
        ("café cafe\u0301", "café", False, False, [(0, 4)]),
        # A combining mark is a word character: "cafe" is not a whole word in "cafe\u0301".
        ("cafe\u0301", "cafe", False, True, []),
        ("cafe\u0301", "cafe", False, False, [(0, 4)]),
        # Join controls are word characters; other format characters are not.
        ("a\u200dword", "word", True, True, []),
        ("a\u200cword", "word", True, True, []),
        ("a\u200bword", "word", True, True, [(2, 6)]),
        # Connector punctuation and digits (of any script) join words; hyphens do not.
        ("snake_case", "case", True, True, []),
        ("kebab-case", "case", True, True, [(6, 10)]),
        ("case٣", "case", True, True, []),
        # A failed whole-word candidate does not hide a later overlapping one.
        ("aa a", "a", True, True, [(3, 4)]),
        ("xaa aa", "aa", True, True, [(4, 6)]),
        # Matches do not overlap.
        ("aaaa", "aa", True, False, [(0, 2), (2, 4)]),
        # A query that begins with a non-word character still needs a non-word neighbour.
        ("x-y -y", "-y", True, True, [(4, 6)]),
        # Astral characters count as one code point.
        ("😀abc😀", "abc", True, True, [(1, 4)]),
    ],
)
def test_hand_cases(
    text: str, query: str, case_sensitive: bool, whole_word: bool, expected: list[tuple[int, int]]
) -> None:
    assert find_matches(text, query, case_sensitive=case_sensitive, whole_word=whole_word) == (
        expected
    )
    assert expected == _oracle(text, query, case_sensitive, whole_word)


def test_word_characters() -> None:
    for char in "aZé\u0301\u0903\u20dd7٣_\u203f\u200c\u200d":  # Mn, Mc, Me, Nd, Pc, join controls
        assert is_word_char(char), repr(char)
    for char in " -.\u200b\u00a0!²":  # ² is No, not a decimal digit
        assert not is_word_char(char), repr(char)


def test_bad_queries_and_oversized_inputs_are_typed_errors() -> None:
    with pytest.raises(ContractError, match="empty"):
        find_matches("text", "", case_sensitive=True, whole_word=False)
    with pytest.raises(ContractLimitExceeded) as caught:
        find_matches("text", "q" * (MAX_QUERY_CHARS + 1), case_sensitive=True, whole_word=False)
    assert caught.value.limit == "search query"
    assert isinstance(caught.value, emelex.LimitExceeded)
    with pytest.raises(ContractLimitExceeded) as caught:
        find_matches("x" * (MAX_FIELD_CHARS + 1), "x", case_sensitive=True, whole_word=False)
    assert caught.value.limit == "searched text"


def test_adversarial_input_scans_in_linear_time() -> None:
    # The classic worst case of naive scanning: n near-misses of an m-long query.
    text = "a" * 2_000_000
    query = "a" * 500 + "b"
    slow_start = time.perf_counter()
    assert find_matches(text, query, case_sensitive=False, whole_word=True) == []
    adversarial = time.perf_counter() - slow_start
    easy_start = time.perf_counter()
    assert find_matches("c" * 2_000_000, query, case_sensitive=False, whole_word=True) == []
    easy = time.perf_counter() - easy_start
    # Quadratic scanning would be ~500x slower than the easy text; allow a generous margin.
    assert adversarial < easy * 20 + 0.5
    # The same without whole words (another scanning path).
    start = time.perf_counter()
    assert find_matches(text, query, case_sensitive=True, whole_word=False) == []
    assert time.perf_counter() - start < easy * 20 + 0.5
    # Whole-word near-misses: every "a" matches but none stands alone.
    many = "a" * 1_000_000
    start = time.perf_counter()
    assert find_matches(many, "a", case_sensitive=True, whole_word=True) == []
    # A complexity-class guard, not a speed goal (benchmarks/search_matcher.py measures
    # speed): the quadratic scan would take hours; a loaded 2-core machine needs seconds.
    assert time.perf_counter() - start < 60
