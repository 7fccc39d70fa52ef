"""The interface every model implementation provides."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from typing import Protocol, TypeAlias, runtime_checkable

from emelex.model._capabilities import Capabilities
from emelex.model._events import GenerationEvent
from emelex.model._request import GenerationRequest

GenerationStream: TypeAlias = AsyncIterator[GenerationEvent]
"""What ``async with model.generate(request) as stream`` binds: an async iterator of events."""


@runtime_checkable
class AgentModel(Protocol):
    """A model that turns a :class:`GenerationRequest` into a stream of events.

    Implementations (the native llama.cpp backend, the OpenAI-compatible HTTP backend,
    :class:`emelex.testing.ScriptedModel`, or your own) must honour this contract::

        async with model.generate(request) as stream:
            async for event in stream:
                ...

    * Calling ``generate`` only prepares; no work starts and nothing checkpoints until
      the context is entered. Entering may checkpoint and may raise (a
      :class:`~emelex.model.ModelError` subclass for a refused request).
    * The stream yields :class:`TextDelta`, :class:`ReasoningDelta` and
      :class:`Progress` events in the order they were produced and then exactly one
      :class:`Completed`, after which iteration stops. Text and reasoning deltas should
      concatenate to the terminal response's ``text`` and ``reasoning``.
    * A failure during generation is raised from the iteration; no ``Completed``
      follows it. Cancellation surfaces as ``trio.Cancelled`` from the iteration.
    * Leaving the context early (``break``, an exception, cancellation) must stop the
      work, and exiting must not return before every worker, thread or subprocess the
      model used has finished with this job: nothing may outlive the ``async with``.
      An implementation that has to wait for a worker does so shielded from
      cancellation, and bounded.
    * A stream belongs to the task that entered the context; it is not shared.
    """

    @property
    def capabilities(self) -> Capabilities:
        """What this model's prompt format is known to preserve."""
        ...

    def generate(self, request: GenerationRequest) -> AbstractAsyncContextManager[GenerationStream]:
        """Prepare one generation for ``request``; enter the result to run it."""
        ...
