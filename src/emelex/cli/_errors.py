"""Errors of emelex.cli."""

from __future__ import annotations

from emelex._errors import EmelexError


class ModelSpecError(EmelexError):
    """A --model value could not be understood or loaded."""


class Unreachable(EmelexError):
    pass


__all__ = ["Unreachable", "ModelSpecError"]
