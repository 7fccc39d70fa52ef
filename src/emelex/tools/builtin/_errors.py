"""Errors of emelex.tools.builtin."""

from __future__ import annotations

from emelex.tools._errors import ToolsError


class FetchRefused(ToolsError):
    """A fetch refused before or instead of being sent; the message is for the model."""


class InvalidSearchResult(ToolsError, ValueError):
    """A provider tried to build a :class:`WebSearchResult` that cannot be shown."""


__all__ = ["InvalidSearchResult", "FetchRefused"]
