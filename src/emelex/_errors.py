"""The root of emelex's error tree and the errors shared by every layer.

Each layer defines its own subtree below :class:`EmelexError`; foreign errors are
mapped at the boundary with ``raise ... from``. The whole tree is documented in
``docs/errors.md``. This module imports nothing from emelex so every layer may use it.
"""

from __future__ import annotations


class EmelexError(Exception):
    """Base class of every error emelex raises on purpose."""


class LimitExceeded(EmelexError):
    """A documented bound (buffer, queue, read, output, size) was reached.

    ``limit`` names the bound, ``maximum`` is its configured value and ``actual`` the
    size that was refused (when known).
    """

    def __init__(self, limit: str, maximum: int, actual: int | None = None) -> None:
        self.limit = limit
        self.maximum = maximum
        self.actual = actual
        detail = f"{limit} exceeded: maximum {maximum}"
        if actual is not None:
            detail += f", got {actual}"
        super().__init__(detail)


class SerializationError(EmelexError):
    """A value could not be encoded to, or decoded from, emelex's JSON form."""
