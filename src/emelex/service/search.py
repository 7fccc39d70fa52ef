"""The Host's search matcher (pure, no I/O, no Trio): re-exported from the wire package.

The matcher lives in :mod:`emelex.contracts` because it *defines* the wire meaning of
``caseSensitive`` and ``wholeWord``: a client highlights exactly what the Host found.
"""

from emelex.contracts import (
    MAX_FIELD_CHARS,
    MAX_QUERY_CHARS,
    UNICODE_VERSION,
    find_matches,
    is_word_char,
    simple_casefold,
)

__all__ = [
    "MAX_FIELD_CHARS",
    "MAX_QUERY_CHARS",
    "UNICODE_VERSION",
    "find_matches",
    "is_word_char",
    "simple_casefold",
]
