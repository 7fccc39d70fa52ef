"""The model wrapper that turns a running invocation's streamed deltas into live drafts.

Each request the session's model is asked for while an invocation runs becomes one draft
step; every text and reasoning delta is appended to it as it passes (no copy, no wait).
A step that fails drops its draft; the Host drops the rest when the invocation ends.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from emelex.model import (
    AgentModel,
    Capabilities,
    Completed,
    GenerationEvent,
    GenerationRequest,
    GenerationStream,
    ReasoningDelta,
    TextDelta,
)
from emelex.service._drafts import Draft, LiveDrafts


class DraftingModel:
    """An AgentModel that publishes the deltas of ``inner`` to ``drafts`` while
    ``running()`` names an invocation (requests outside one, a title say, pass through)."""

    def __init__(
        self, inner: AgentModel, drafts: LiveDrafts, running: Callable[[], str | None]
    ) -> None:
        self._inner = inner
        self._drafts = drafts
        self._running = running

    @property
    def wrapped(self) -> AgentModel:
        return self._inner

    @property
    def capabilities(self) -> Capabilities:
        return self._inner.capabilities

    @asynccontextmanager
    async def generate(self, request: GenerationRequest) -> AsyncIterator[GenerationStream]:
        invocation_id = self._running()
        if invocation_id is None:
            async with self._inner.generate(request) as stream:
                yield stream
            return
        draft = self._drafts.begin(invocation_id)
        drafted: _Drafted | None = None
        try:
            async with self._inner.generate(request) as stream:
                drafted = _Drafted(stream, draft, self._drafts)
                yield drafted
        except Exception:
            self._drafts.step_failed(draft)
            raise
        # Cancellation (a stop, the Host closing) is not a failed step: the turn's end
        # clears every draft with its outcome.
        if drafted is None or not drafted.completed:
            self._drafts.step_failed(draft)


class _Drafted:
    """The inner stream, appending each delta to the step's draft."""

    def __init__(self, inner: GenerationStream, draft: Draft, drafts: LiveDrafts) -> None:
        self._inner = inner
        self._draft = draft
        self._drafts = drafts
        self.completed = False

    def __aiter__(self) -> _Drafted:
        return self

    async def __anext__(self) -> GenerationEvent:
        event = await self._inner.__anext__()
        if isinstance(event, TextDelta):
            self._drafts.append(self._draft, event.text, "")
        elif isinstance(event, ReasoningDelta):
            self._drafts.append(self._draft, "", event.text)
        elif isinstance(event, Completed):
            self.completed = True
            # The step's last deltas go out now, not at the interval's end (its tool
            # calls may run for a while before the turn commits).
            self._drafts.flush(self._draft)
        return event
