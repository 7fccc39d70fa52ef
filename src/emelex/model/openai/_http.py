"""Reading a server's error response: its message and the delay a 429 asks for."""

from __future__ import annotations

import email.utils
import json
import math
import time
from typing import Final

import httpx

#: Longest excerpt of an error body (or a stream's error event) kept in an error.
ERROR_EXCERPT: Final = 2000


def retry_after_seconds(headers: httpx.Headers, now: float | None = None) -> float | None:
    """The delay a 429 response asks for: ``retry-after-ms``, else ``Retry-After`` as
    seconds or as an HTTP date (relative to ``now``, a Unix time; default the clock).
    ``None`` when absent or unreadable; never negative."""
    millis = headers.get("retry-after-ms")
    if millis is not None:
        try:
            value = float(millis)
        except ValueError:
            value = math.nan
        if math.isfinite(value) and value >= 0:
            return value / 1000.0
    text = headers.get("retry-after")
    if text is None:
        return None
    text = text.strip()
    try:
        seconds = float(text)
    except ValueError:
        try:
            moment = email.utils.parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            return None
        if moment.tzinfo is None:
            return None
        current = time.time() if now is None else now
        return max(0.0, moment.timestamp() - current)
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


def server_message(body: str) -> str | None:
    try:
        data = json.loads(body)
    except (json.JSONDecodeError, RecursionError):
        return None
    if not isinstance(data, dict):
        return None
    error = data.get("error")
    if isinstance(error, dict):
        error = error.get("message")
    for candidate in (error, data.get("message"), data.get("detail")):
        if isinstance(candidate, str) and candidate:
            return candidate[:ERROR_EXCERPT]
    return None
