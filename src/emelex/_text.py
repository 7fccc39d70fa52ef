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
