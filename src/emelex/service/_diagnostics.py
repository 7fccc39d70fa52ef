"""Diagnostics as values: which failure a session records, and its newest-first pages.

Pure (no I/O). A diagnostic carries a typed cause and a short message written by emelex,
never text from a provider: an error's own message may quote a response body.
"""

from __future__ import annotations

from typing import Any, Final

from emelex._errors import EmelexError, LimitExceeded
from emelex.agent import ModelFailed, RetryBudgetExhausted
from emelex.contracts import Diagnostic, DiagnosticsPage, from_wire

#: Event kind of a recorded diagnostic (its payload is the wire Diagnostic).
DIAGNOSTIC_RECORDED: Final = "diagnostic.recorded"


def classify(error: BaseException) -> tuple[str, str, str]:
    """``(kind, cause code, safe message)`` for a failed invocation's error."""
    name = type(error).__name__
    if isinstance(error, ModelFailed):
        return "modelStep", "modelError", f"a model round failed ({name})"
    if isinstance(error, RetryBudgetExhausted):
        return "execution", "toolFailed", f"the model's corrections ran out ({name})"
    if isinstance(error, LimitExceeded):
        return "execution", "limitExceeded", f"a limit was exceeded ({name})"
    if isinstance(error, EmelexError):
        return "execution", "internal", f"the turn failed ({name})"
    return "execution", "internal", f"the turn failed unexpectedly ({name})"


class DiagnosticLog:
    """A session's diagnostics in revision order; revisions count from 1."""

    def __init__(self) -> None:
        self._items: list[Diagnostic] = []

    @property
    def revision(self) -> int:
        return len(self._items)

    @property
    def items(self) -> tuple[Diagnostic, ...]:
        return tuple(self._items)

    def add(self, diagnostic: Diagnostic) -> None:
        if diagnostic.revision != self.revision + 1:
            raise ValueError(
                f"diagnostic revision {diagnostic.revision} does not follow {self.revision}"
            )
        self._items.append(diagnostic)

    def page(
        self, session_id: str, *, through: int | None, before: int | None, limit: int
    ) -> DiagnosticsPage:
        """Newest first, revisions at most ``through`` (None: the newest) and below
        ``before`` (None: no bound); ``next_before`` continues the listing."""
        fence = self.revision if through is None else min(through, self.revision)
        top = fence if before is None else min(fence, before - 1)
        start = max(0, top - limit)
        chosen = tuple(reversed(self._items[start:top]))
        return DiagnosticsPage(
            session_id=session_id,  # type: ignore[arg-type]
            through=fence,
            diagnostics=chosen,
            next_before=start + 1 if start > 0 else None,
        )


def diagnostic(
    *,
    revision: int,
    diagnostic_id: str,
    kind: str,
    code: str,
    message: str,
    invocation_id: str | None,
    turn_id: str | None,
    event_sequence: int | None,
    recorded_at_ms: int,
) -> Diagnostic:
    wire: dict[str, Any] = {
        "id": diagnostic_id,
        "revision": revision,
        "kind": kind,
        "invocationId": invocation_id,
        "turnId": turn_id,
        "eventSequence": event_sequence,
        "cause": {"code": code, "message": message[:4096]},
        "recordedAtMs": recorded_at_ms,
    }
    return from_wire(Diagnostic, wire)
