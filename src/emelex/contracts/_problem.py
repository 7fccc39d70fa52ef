"""The error body a Host returns for a refused request."""

from __future__ import annotations

from typing import Literal

from emelex.contracts._limits import MAX_MESSAGE_CHARS
from emelex.contracts._wire import text, wire

ProblemCode = Literal[
    "invalidRequest",
    "limitExceeded",
    "notFound",
    "operationConflict",
    "revisionConflict",
    "unsettledWork",
    "permissionWidening",
    "unsupportedWireVersion",
    "lagged",
    "internal",
]


@wire
class Problem:
    """A typed refusal; ``message`` is safe to show and never carries provider bodies."""

    code: ProblemCode
    message: str = text(max_len=MAX_MESSAGE_CHARS)
