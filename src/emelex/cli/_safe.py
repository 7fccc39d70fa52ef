"""Neutralizing untrusted text before a terminal sees it."""

from __future__ import annotations

import re
import unicodedata

# Everything printed that a model, a file or a server wrote goes through ``safe``: a
# terminal obeys escape sequences (set the title, clear the screen, write the clipboard
# with OSC 52) and bidi controls reorder what the user reads. Newlines and tabs stay.
_NOT_PLAIN = re.compile(r"[^\x20-\x7e\n\t]")
_JOINERS = frozenset("\u200c\u200d")  # format characters that emoji and scripts need


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    code = ord(char)
    if code < 0x80 or (
        char not in _JOINERS and unicodedata.category(char) in ("Cc", "Cf", "Cs", "Zl", "Zp")
    ):
        if code < 0x100:
            return f"\\x{code:02x}"
        return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"
    return char


def safe(text: str) -> str:
    """``text`` with every control character (C0 but newline and tab, DEL, C1), escape
    sequence introducer and bidi/format control shown as a visible escape (``\\x1b``,
    ``\\u202e``), so the terminal displays it instead of obeying it. Works on any
    fragment of a stream: each character is judged alone."""
    if not text.isascii() and text.replace("\n", "").replace("\t", "").isprintable():
        return text  # fast path: isprintable() is False for every class escaped here
    return _NOT_PLAIN.sub(_escape, text)
