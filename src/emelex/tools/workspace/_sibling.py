"""Names of the temporary and recovery siblings a mutation creates next to its target.

``.<name>.emelex-tmp-<12 hex>`` holds content while a write is in flight;
``.<name>.emelex-recovered-<12 hex>`` keeps another writer's inode that could not be put
back. A crash can leave either behind, so every other part of the workspace layer must
recognize them: they are as secret as the name they stand for, recursive tools skip them,
and stale temporary ones are cleaned up (see ``_leftovers``).
"""

from __future__ import annotations

import os
import re

import attrs

MAX_NAME_BYTES = 255
"""Longest accepted single component, in bytes once encoded (Linux ``NAME_MAX``)."""

TEMP_MARKER = ".emelex-tmp-"
RECOVERY_MARKER = ".emelex-recovered-"
_SUFFIX_HEX = 12
# Lower case only: the random part is written by ``os.urandom(...).hex()``; secret
# classification compares lower-cased names, and that still matches.
_PATTERN = re.compile(r"\.(.*)(\.emelex-tmp-|\.emelex-recovered-)[0-9a-f]{12}", re.DOTALL)


def sibling_name(name: str, marker: str) -> str:
    """``.<name><marker><random>``, shortened to stay within ``NAME_MAX`` bytes."""
    suffix = marker + os.urandom(_SUFFIX_HEX // 2).hex()
    room = MAX_NAME_BYTES - 1 - len(suffix)
    encoded = os.fsencode(name)
    if len(encoded) > room:
        name = os.fsdecode(encoded[:room].decode("utf-8", "ignore").encode("utf-8"))
    return "." + name + suffix


@attrs.frozen
class SiblingName:
    """A parsed sibling name: what it stands for and which kind it is.

    ``shortened`` is true when the original name was too long to fit and ``stands_for``
    is only its beginning (so its secrecy cannot be decided from it).
    """

    stands_for: str
    kind: str  # "temporary" or "recovery"
    shortened: bool


def parse_sibling(name: str) -> SiblingName | None:
    """The sibling a name is, or ``None`` for an ordinary name."""
    if ".emelex-" not in name:  # fast path: nearly every name
        return None
    found = _PATTERN.fullmatch(name)
    if found is None or not found.group(1):
        return None
    kind = "temporary" if found.group(2) == TEMP_MARKER else "recovery"
    # sibling_name only shortens names that would not fit, and then fills NAME_MAX to
    # within one partial UTF-8 sequence: a name that long may have lost its ending.
    shortened = len(os.fsencode(name)) >= MAX_NAME_BYTES - 3
    return SiblingName(found.group(1), kind, shortened)


def is_sibling(name: str) -> bool:
    """Whether ``name`` is a temporary or recovery sibling name."""
    return parse_sibling(name) is not None
