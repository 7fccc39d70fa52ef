"""A ScriptedModel whose stream the test paces: it pauses after a chosen number of text
and reasoning deltas until the test releases it (deterministic, no sleeps)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio

from emelex.model import (
    Capabilities,
    GenerationEvent,
    GenerationRequest,
    GenerationStream,
    ReasoningDelta,
    TextDelta,
)
from emelex.testing import ScriptedModel


class PacedModel:
    """``inner``'s rounds; the stream holds once, after ``hold_after`` deltas in all,
    setting ``holding`` and waiting for ``release``."""

    def __init__(self, inner: ScriptedModel, hold_after: int) -> None:
        self.inner = inner
        self.hold_after = hold_after
        self.deltas = 0
        self.holding = trio.Event()
        self.release = trio.Event()

    @property
    def capabilities(self) -> Capabilities:
        return self.inner.capabilities

    @asynccontextmanager
    async def generate(self, request: GenerationRequest) -> AsyncIterator[GenerationStream]:
        async with self.inner.generate(request) as stream:
            yield _Paced(stream, self)


class _Paced:
    def __init__(self, inner: GenerationStream, model: PacedModel) -> None:
        self._inner = inner
        self._model = model

    def __aiter__(self) -> _Paced:
        return self

    async def __anext__(self) -> GenerationEvent:
        model = self._model
        if model.deltas == model.hold_after and not model.release.is_set():
            model.holding.set()
            await model.release.wait()
        event = await self._inner.__anext__()
        if isinstance(event, TextDelta | ReasoningDelta):
            model.deltas += 1
        return event
