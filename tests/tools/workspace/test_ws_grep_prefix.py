"""grep's literal prefilter: the prefix is required by every match, and searching with it
finds exactly what RE2 alone finds."""

from __future__ import annotations

import re2
from hypothesis import given, settings
from hypothesis import strategies as st

from emelex.tools.workspace._search import Re2Program, _GrepState, _re2_options, required_prefix


def test_required_prefix_cases() -> None:
    assert required_prefix(r"def \w+_handler\(") == b"def "
    assert required_prefix("abc*") == b"ab"  # the quantifier takes its character back
    assert required_prefix(r"a\.b?") == b"a."
    assert required_prefix(r"x\(y") == b"x(y"
    assert required_prefix("ab|cd") == b""  # another alternative may start otherwise
    assert required_prefix("^def") == b""
    assert required_prefix(r"\bdef") == b""
    assert required_prefix("(?i)def") == b""
    assert required_prefix("[ab]c") == b""
    assert required_prefix("é") == b""
    assert required_prefix("a{2}") == b""
    assert required_prefix("\\") == b""


def _starts(pattern: str, data: bytes, *, prefix: bytes) -> list[int]:
    program = Re2Program("(?m)" + pattern, _re2_options(), prefix=prefix)
    state = _GrepState(
        program, 0, 1000, 1 << 20, 1000, 1 << 20
    )  # regex, context, max_matches, max_bytes, max_line_chars, max_file_bytes
    found: list[int] = []
    position = state._find(data, 0)
    while position is not None and len(found) < 200:
        found.append(position)
        position = state._find(data, position + 1) if position + 1 <= len(data) else None
    return found


PATTERN_ALPHABET = ["a", "b", "ab", " ", "_", "-", "\\.", "\\(", ".", "*", "+", "?", "|", "^", "$"]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.sampled_from(PATTERN_ALPHABET), min_size=1, max_size=6).map("".join),
    st.lists(st.sampled_from(["a", "b", "ab", " ", "_", "-", ".", "(", "\n", "x"]), max_size=60)
    .map("".join)
    .map(str.encode),
)
def test_the_prefilter_finds_what_re2_alone_finds(pattern: str, data: bytes) -> None:
    try:
        re2.compile(pattern)
    except re2.error:
        return
    prefix = required_prefix(pattern)
    assert _starts(pattern, data, prefix=prefix) == _starts(pattern, data, prefix=b"")
    for start in _starts(pattern, data, prefix=b""):
        assert data.startswith(prefix, start)
