"""The search matcher: a literal query, explicit case and whole-word options, no I/O.

It defines what a ``caseSensitive``/``wholeWord`` search matches, so a client can
highlight exactly what the Host found. Offsets are code points of the original text.
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache
from typing import Final

from emelex.contracts._casefold import fold_for, simple_casefold
from emelex.contracts._errors import ContractError, ContractLimitExceeded
from emelex.contracts._limits import MAX_FIELD_CHARS, MAX_QUERY_CHARS

#: Letters, marks, decimal digits and connector punctuation (general categories).
_WORD_CATEGORIES: Final = frozenset({"Lu", "Ll", "Lt", "Lm", "Lo", "Mn", "Mc", "Me", "Nd", "Pc"})
#: ZERO WIDTH NON-JOINER and ZERO WIDTH JOINER, the join controls.
_JOIN_CONTROLS: Final = frozenset({"\u200c", "\u200d"})


def is_word_char(char: str) -> bool:
    """Whether ``char`` (one code point) is a Unicode word character."""
    return char in _JOIN_CONTROLS or unicodedata.category(char) in _WORD_CATEGORIES


def find_matches(
    text: str, query: str, *, case_sensitive: bool, whole_word: bool
) -> list[tuple[int, int]]:
    """Every ``(start, end)`` of ``query`` in ``text``: leftmost first, not overlapping.

    Case-insensitive matching compares simple case foldings (no normalization: a
    precomposed "é" does not match "e" plus a combining accent). A whole-word match has
    no word character right before or right after it. Candidates that fail the word
    test do not hide later overlapping ones. Scanning is linear: ``str.find`` (CPython
    falls back to the two-way algorithm on hard inputs) or, without whole words, an
    escaped literal whose only regular-expression feature is the literal itself.
    """
    if not query:
        raise ContractError("the search query is empty")
    if len(query) > MAX_QUERY_CHARS:
        raise ContractLimitExceeded("search query", MAX_QUERY_CHARS, len(query))
    if len(text) > MAX_FIELD_CHARS:
        raise ContractLimitExceeded("searched text", MAX_FIELD_CHARS, len(text))
    if not case_sensitive:
        # Simple folding keeps every code point in place, so offsets stay original.
        query = simple_casefold(query)
        text = fold_for(text, query)
    if not whole_word:
        # An escaped literal compiles to a pure literal prefix, which the `re` engine
        # scans with a KMP overlap table (linear, no backtracking); it costs far less
        # per hit than a Python loop around `str.find`.
        first = text.find(query)  # most rows hold no hit: one fast C scan says so
        if first < 0:
            return []
        end = first + len(query)
        if text.find(query, end) < 0:  # and most others one
            return [(first, end)]
        return [found.span() for found in _literal(query).finditer(text, first)]
    found: list[tuple[int, int]] = []
    size = len(query)
    start = text.find(query)
    while start >= 0:
        end = start + size
        if _stands_alone(text, start, end):
            found.append((start, end))
            start = text.find(query, end)
        else:
            start = text.find(query, start + 1)
    return found


@lru_cache(maxsize=64)
def _literal(query: str) -> re.Pattern[str]:
    return re.compile(re.escape(query))


def _stands_alone(text: str, start: int, end: int) -> bool:
    if start > 0 and is_word_char(text[start - 1]):
        return False
    return not (end < len(text) and is_word_char(text[end]))
