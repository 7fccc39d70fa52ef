"""Shortening text for people: at a sentence or word boundary, with a marker."""

from __future__ import annotations

from emelex._text import clip


def test_clip_keeps_short_text_and_cuts_long_text_between_words() -> None:
    assert clip("short  text\nhere", 40) == "short text here"
    text = "The quick brown fox jumps over the lazy dog and keeps running far away"
    clipped = clip(text, 30)
    head, marker = clipped.split(" […")
    assert text.startswith(head) and text[len(head)] == " "  # cut between two words
    assert marker == f"{len(text) - len(head)} more characters]"


def test_clip_prefers_a_sentence_end() -> None:
    text = "First sentence is here. Second sentence goes on and on for a while."
    assert clip(text, 40) == "First sentence is here. […44 more characters]"


def test_clip_of_one_long_word_still_bounds_it() -> None:
    clipped = clip("x" * 500, 100)
    assert clipped == "x" * 100 + " […400 more characters]"


def test_shorten_holds_its_bound_exactly_and_keeps_lines() -> None:
    from hypothesis import given
    from hypothesis import strategies as st

    from emelex._text import shorten

    assert shorten("two\nlines", 40) == "two\nlines"
    text = "word " * 100
    short = shorten(text, 60)
    assert len(short) <= 60 and short.endswith(
        f"[…{len(text) - short.index(' […')} more characters]"
    )
    assert "wor […" not in short  # between words

    @given(st.text(max_size=3000), st.integers(min_value=40, max_value=2000))
    def bounded(value: str, limit: int) -> None:
        result = shorten(value, limit)
        assert len(result) <= limit
        if len(value) <= limit:
            assert result == value
        else:
            head = result[: result.rindex(" […")]
            assert value.startswith(head)
            assert result.endswith(f"[…{len(value) - len(head)} more characters]")

    bounded()
    assert shorten("x" * 50, 10) == "x" * 9 + "…"  # no room for the marker
    assert shorten("abcd", 0) == ""
