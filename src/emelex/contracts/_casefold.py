"""Unicode *simple* case folding (UCD CaseFolding.txt statuses C and S), no normalization.

Python's ``str.casefold`` is *full* folding (C and F): ``"ß".casefold() == "ss"`` changes
the length of the text, so offsets in the folded text would no longer be offsets in the
original. Simple folding maps each code point to exactly one code point.

The UCD file itself is not shipped with Python, so the table is derived from Python's
own Unicode database (the version ``unicodedata.unidata_version`` names):

* When ``c.casefold()`` is one code point, that is the C mapping (or ``c`` itself): full
  folding only differs from simple folding for the code points with an F entry.
* Otherwise ``c`` has an F entry. CaseFolding.txt gives such a code point an S entry
  exactly when its lowercase mapping is one different code point (U+1E9E ẞ -> ß,
  U+1F88 ᾈ -> ᾀ, U+1FBC ᾼ -> ᾳ ...), and that S entry is the lowercase mapping. When
  ``c.lower()`` is ``c`` (ß, the ligatures ﬀ..ﬆ) or several code points (U+0130 İ,
  whose only other entry is the Turkic T status), simple folding leaves ``c`` unchanged.

``tests/contracts/test_casefold.py`` checks the derivation against an independent copy
of the UCD table for every code point.
"""

from __future__ import annotations

import re
import sys
import unicodedata
from functools import cache, lru_cache
from typing import Final

UNICODE_VERSION: Final = unicodedata.unidata_version


@cache
def simple_fold_table() -> dict[int, int]:
    """Code point -> its simple case folding, for every code point that changes."""
    table: dict[int, int] = {}
    for code in _cased_code_points():
        char = chr(code)
        full = char.casefold()
        if full == char:
            continue
        if len(full) == 1:
            table[code] = ord(full)
            continue
        lower = char.lower()
        if len(lower) == 1 and lower != char:
            table[code] = ord(lower)
    return table


@cache
def _cased_code_points() -> tuple[int, ...]:
    """Every code point that lowercasing or full case folding changes (a superset of
    those the tables need), found a chunk at a time: neither mapping shortens a text
    and both map it code point by code point, so a chunk they leave equal holds no
    such code point. About 1% of the code space; scanning it all cost ~0.5 s."""
    found: list[int] = []
    for low in range(0, sys.maxunicode + 1, _CHUNK):
        codes = range(low, min(low + _CHUNK, sys.maxunicode + 1))
        chunk = "".join(map(chr, codes))
        if chunk.lower() != chunk or chunk.casefold() != chunk:
            found += (c for c in codes if chr(c).lower() != chr(c) or chr(c).casefold() != chr(c))
    return tuple(found)


_CHUNK: Final = 256


@cache
def _after_lower() -> tuple[dict[str, str], re.Pattern[str]]:
    # Folding a code point is a function of its lowercase (U+0130 aside, whose lowercase
    # is two code points and whose folding is itself): fold = fix(lower). The fix-ups
    # are the ~100 code points where the two differ (long s, final sigma, micro, Cherokee).
    table = simple_fold_table()
    fixes: dict[str, str] = {}
    for code in _cased_code_points():
        char = chr(code)
        lower = char.lower()
        if len(lower) == 1 and lower != chr(table.get(code, code)):
            fixes[lower] = chr(table.get(code, code))
    # A character class of constants: scanning it is linear, whatever the text.
    pattern = re.compile("[" + "".join(re.escape(char) for char in sorted(fixes)) + "]")
    return fixes, pattern


def simple_casefold(text: str) -> str:
    """``text`` with every code point replaced by its simple case folding (same length)."""
    if text.isascii():
        return text.lower()
    if _DOTTED_CAPITAL_I in text:
        return _DOTTED_CAPITAL_I.join(simple_casefold(part) for part in text.split("\u0130"))
    # `str.lower` runs in C; the table-driven `str.translate` is ~100x slower on
    # non-ASCII text. Python's lower() also applies the final-sigma rule; the fix-ups
    # fold every sigma to the same letter anyway.
    return fold_lowered(text.lower())


def fold_lowered(lowered: str) -> str:
    """Finish folding ``lowered`` (a ``str.lower()`` result of text without U+0130)."""
    fixes, pattern = _after_lower()
    found = pattern.search(lowered)
    while found is not None:
        # One C-speed replace per distinct fix-up character present (at most ~100).
        char = found.group()
        lowered = lowered.replace(char, fixes[char])
        found = pattern.search(lowered, found.start())
    return lowered


def fix_up_sources(folded: str) -> tuple[str, ...] | None:
    """The lowercase characters that fold onto a character of ``folded`` (a folded text).

    None when ``folded`` holds a character that lowercases to something else (Cherokee
    folds to its uppercase): such a text cannot be looked up in merely lowered text.
    """
    if any(char.lower() != char for char in folded):
        return None
    fixes, _pattern = _after_lower()
    targets = set(folded)
    return tuple(source for source, target in fixes.items() if target in targets)


def fold_for(text: str, folded_query: str) -> str:
    """``text`` folded, or merely lowered when that finds exactly the same matches of
    ``folded_query`` (a folded text), at the same offsets.

    Lowering runs in C; folding then fixes ~100 characters (long s, final sigma ...).
    Those fixes only matter to a query containing what they fold to, so when none of
    the relevant characters occurs in the text, the lowered text is as good.
    """
    if text.isascii() or _DOTTED_CAPITAL_I in text:
        return simple_casefold(text)
    lowered = text.lower()
    sources = _sources(folded_query)
    if sources is None or any(source in lowered for source in sources):
        return fold_lowered(lowered)
    return lowered


@lru_cache(maxsize=64)
def _sources(folded_query: str) -> tuple[str, ...] | None:
    return fix_up_sources(folded_query)


_DOTTED_CAPITAL_I: Final = "\u0130"
