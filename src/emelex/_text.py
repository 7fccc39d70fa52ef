"""Shortening text for people to read. Imports nothing from emelex: every layer may use it."""

from __future__ import annotations


def clip(text: str, limit: int) -> str:
    """``text`` on one line, at most about ``limit`` characters: cut after a sentence or
    between words (never inside a word when a boundary is in the second half) and ending
    with a marker that says how much was left out, ``[…N more characters]``."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    head = text[:limit]
    sentence = max(head.rfind(mark) for mark in (". ", "! ", "? ", "; "))
    if sentence >= limit // 2:
        head = head[: sentence + 1]
    elif (space := head.rfind(" ")) >= limit // 2:
        head = head[:space]
    head = head.rstrip()
    return f"{head} […{len(text) - len(head)} more characters]"


def shorten(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters in all, the marker included: lines are
    kept, the cut falls between words when a boundary is in the second half, and
    ``[…N more characters]`` says how much was left out (below 40 characters there is no
    room for it: a bare ``…`` ends the text). For text that a bound must hold exactly (a
    model-readable error, a tool description)."""
    if len(text) <= limit:
        return text
    if limit < 40:
        return text[: max(limit - 1, 0)] + "…" if limit > 0 else ""
    # The marker's width depends on the count it shows; the count only shrinks as the
    # head grows, so the width for the largest count is always enough.
    width = len(f" […{len(text)} more characters]")
    head = text[: limit - width]
    space = max(head.rfind(" "), head.rfind("\n"))
    if space >= len(head) // 2:
        head = head[:space]
    head = head.rstrip()
    return f"{head} […{len(text) - len(head)} more characters]"
