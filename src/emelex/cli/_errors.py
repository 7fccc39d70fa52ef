"""Errors of emelex.cli."""

from __future__ import annotations

from emelex._errors import EmelexError


class ModelSpecError(EmelexError):
    """A --model value could not be understood or loaded."""


class Unreachable(EmelexError):
    pass


class HostSpecError(EmelexError):
    """A ``--host`` value or its token cannot be used (exit code 3)."""


__all__ = ["HostSpecError", "Unreachable", "ModelSpecError"]
