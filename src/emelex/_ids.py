"""Time-ordered identifiers (RFC 9562 UUIDv7) for turns, tool calls and records.

:func:`new_id` returns canonical lowercase UUIDv7 strings that sort by creation time:
within one process every id is unique and compares greater (as a string, and so as a
UUID) than every id made before it, even many in one millisecond or after the system
clock steps back.
"""

from __future__ import annotations

import re
import threading
import uuid
from typing import Final

import uuid_utils

__all__ = ["is_uuid7", "new_id"]

_UUID7_RE: Final = re.compile(
    r"[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}"
)

# uuid_utils already counts up within a millisecond; the guard below keeps the order
# even if the wall clock steps back or ids are made from several threads. The lock is
# uncontended in the common case and costs far less than formatting the id.
_lock: Final = threading.Lock()
_last = ""

_RAND_BITS: Final = 74  # rand_a (12 bits) and rand_b (62 bits), used as one counter
_RAND_B_BITS: Final = 62
_RAND_B_MASK: Final = (1 << _RAND_B_BITS) - 1
_TIMESTAMP_SHIFT: Final = 80
_VERSION_BITS: Final = 0x7 << 76
_VARIANT_BITS: Final = 0b10 << 62


def _generate() -> str:
    return str(uuid_utils.uuid7())


def _successor(previous: str) -> str:
    """The smallest UUIDv7 that sorts after ``previous``.

    The 74 random bits are treated as a counter; when it wraps, the 48-bit millisecond
    timestamp moves one millisecond ahead.
    """
    value = uuid.UUID(previous).int
    timestamp = value >> _TIMESTAMP_SHIFT
    counter = (((value >> 64) & 0xFFF) << _RAND_B_BITS) | (value & _RAND_B_MASK)
    counter += 1
    if counter >> _RAND_BITS:
        counter = 0
        timestamp += 1
    bits = (
        (timestamp << _TIMESTAMP_SHIFT)
        | _VERSION_BITS
        | ((counter >> _RAND_B_BITS) << 64)
        | _VARIANT_BITS
        | (counter & _RAND_B_MASK)
    )
    return str(uuid.UUID(int=bits))


def new_id() -> str:
    """Return a new canonical UUIDv7 string, e.g. ``"01936d3a-7c1e-7b4c-9d2f-3a6e5b1c0d8f"``.

    Ids are unique within the process and strictly increasing in creation order
    (thread-safe). Never blocks on I/O and never checkpoints.
    """
    global _last
    candidate = _generate()
    # Explicit acquire/release: measurably cheaper than a with-block on this hot path.
    _lock.acquire()
    try:
        # Canonical UUID strings have a fixed layout, so string order is UUID order.
        if candidate <= _last:
            candidate = _successor(_last)
        _last = candidate
    finally:
        _lock.release()
    return candidate


def is_uuid7(value: str) -> bool:
    """Whether ``value`` is a UUIDv7 in canonical form (lowercase, hyphenated, RFC 9562).

    Uppercase or brace-wrapped spellings are rejected on purpose: every id emelex
    writes is canonical, so anything else did not come from :func:`new_id`.
    """
    return isinstance(value, str) and _UUID7_RE.fullmatch(value) is not None
