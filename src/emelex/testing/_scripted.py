"""A deterministic model for tests: every call replays the next scripted round."""

from __future__ import annotations

import types
from collections.abc import Iterable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, Final, TypeAlias

import attrs
import trio

from emelex.model import (
    UNSET,
    Capabilities,
    Completed,
    FinishReason,
    GenerationEvent,
    GenerationRequest,
    InvalidRequest,
    ModelError,
    ReasoningDelta,
    Response,
    TextDelta,
    ToolCall,
    Unset,
    Usage,
)
from emelex.model import Progress as ProgressEvent
from emelex.testing._errors import InvalidScript, ScriptExhausted


def _check_text(_instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if not isinstance(value, str):
        raise InvalidScript(f"{attribute.name} must be a string, got {value!r}")


@attrs.frozen
class Say:
    """Stream ``text`` as a :class:`~emelex.model.TextDelta`; it joins the answer."""

    text: str = attrs.field(validator=_check_text)


@attrs.frozen
class Think:
    """Stream ``text`` as a :class:`~emelex.model.ReasoningDelta`; it joins the reasoning."""

    text: str = attrs.field(validator=_check_text)


def _check_arguments(_instance: Any, _attribute: Any, value: Any) -> None:
    if not isinstance(value, dict):
        raise InvalidScript(f"Call arguments must be a dict, got {value!r}")


def _check_call_id(_instance: Any, _attribute: Any, value: Any) -> None:
    if value is not None and (not isinstance(value, str) or not value):
        raise InvalidScript(f"a Call id must be a non-empty string or None, got {value!r}")


@attrs.frozen
class Call:
    """Propose a call of tool ``name`` with ``arguments`` in the terminal response.

    Calls produce no stream event: like real backends they appear only in
    :class:`~emelex.model.Completed`. ``id`` is the provider-local id; by default the
    k-th ``Call`` of the whole script (counting from 0, across rounds) gets ``"call_k"``.
    Those ids are deliberately not UUIDs, so tests can see the harness replace them.
    """

    name: str = attrs.field(validator=_check_text)
    arguments: dict[str, Any] = attrs.field(factory=dict, validator=_check_arguments)
    id: str | None = attrs.field(default=None, validator=_check_call_id)


def _check_seconds(_instance: Any, _attribute: Any, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
        raise InvalidScript(f"Wait needs a non-negative number of seconds, got {value!r}")


@attrs.frozen
class Wait:
    """Sleep ``seconds`` with :func:`trio.sleep` (so a ``MockClock`` can skip it)."""

    seconds: float = attrs.field(validator=_check_seconds)


def _check_error(_instance: Any, _attribute: Any, value: Any) -> None:
    is_instance = isinstance(value, BaseException)
    is_class = isinstance(value, type) and issubclass(value, BaseException)
    if not (is_instance or is_class):
        raise InvalidScript(f"Fail needs an exception instance or class, got {value!r}")


@attrs.frozen
class Fail:
    """Raise ``error`` (an exception instance or class) from the stream at this point.

    No :class:`~emelex.model.Completed` follows; the round counts as failed.
    """

    error: BaseException | type[BaseException] = attrs.field(validator=_check_error)


@attrs.frozen
class Progress:
    """Stream a :class:`emelex.model.Progress` event (``stage`` defaults to ``"prompt"``).

    Not to be confused with the event class of the same name in :mod:`emelex.model`;
    this is a script step that produces one.
    """

    completed: int
    total: int | None = None
    stage: str = "prompt"
    message: str | None = None

    def __attrs_post_init__(self) -> None:
        try:
            ProgressEvent(self.stage, self.completed, self.total, self.message)
        except ModelError as exc:
            raise InvalidScript(f"invalid Progress step: {exc}") from exc

    def to_event(self) -> ProgressEvent:
        """The event this step streams."""
        return ProgressEvent(self.stage, self.completed, self.total, self.message)


def _to_optional_calls(value: Sequence[ToolCall] | Unset) -> tuple[ToolCall, ...] | Unset:
    if isinstance(value, Unset):
        return value
    candidate: object = value
    if isinstance(candidate, str) or not isinstance(candidate, Sequence):
        raise InvalidScript(f"Finish tool_calls must be a sequence of ToolCall, got {value!r}")
    return tuple(value)


@attrs.frozen(kw_only=True)
class Finish:
    """Override fields of the round's terminal :class:`~emelex.model.Response`.

    Fields left :data:`~emelex.model.UNSET` keep their scripted default; any other value
    replaces it (``reasoning=None`` removes reasoning that ``Think`` steps streamed).
    Use it to make the terminal answer disagree with the streamed deltas, to deliver
    reasoning only in the terminal response, or to set usage and the finish reason.
    ``Finish`` must be the last step of its round.
    """

    text: str | Unset = UNSET
    reasoning: str | Unset | None = UNSET
    tool_calls: tuple[ToolCall, ...] | Unset = attrs.field(
        default=UNSET, converter=_to_optional_calls
    )
    usage: Usage | Unset = UNSET
    finish_reason: FinishReason | Unset = UNSET

    def __attrs_post_init__(self) -> None:
        # Check the overrides now, by building a response from them, rather than when
        # the round is replayed in the middle of a test.
        try:
            Response(
                "" if isinstance(self.text, Unset) else self.text,
                None if isinstance(self.reasoning, Unset) else self.reasoning,
                () if isinstance(self.tool_calls, Unset) else self.tool_calls,
                Usage() if isinstance(self.usage, Unset) else self.usage,
                "stop" if isinstance(self.finish_reason, Unset) else self.finish_reason,
            )
        except ModelError as exc:
            raise InvalidScript(f"invalid Finish override: {exc}") from exc


Step: TypeAlias = Say | Think | Call | Wait | Fail | Progress | Finish
"""One scripted action of a :class:`ScriptedModel` round."""

_STEP_TYPES: Final = (Say, Think, Call, Wait, Fail, Progress, Finish)
_UNKNOWN: Final = Capabilities.unknown()


@attrs.frozen
class _Round:
    index: int
    steps: tuple[Step, ...]
    tool_calls: tuple[ToolCall, ...]  # with their final provider-local ids
    output_tokens: int
    finish: Finish | None

    def response(self, request: GenerationRequest) -> Response:
        """The terminal response (every override was validated when Finish was built)."""
        text = "".join(step.text for step in self.steps if isinstance(step, Say))
        thoughts = [step.text for step in self.steps if isinstance(step, Think)]
        tool_calls: Sequence[ToolCall] = self.tool_calls
        reasoning = "".join(thoughts) if thoughts else None
        usage = Usage(input_tokens=len(request.messages), output_tokens=self.output_tokens)
        finish_reason: FinishReason = "tool_calls" if self.tool_calls else "stop"
        finish = self.finish
        if finish is not None:
            text = text if isinstance(finish.text, Unset) else finish.text
            reasoning = reasoning if isinstance(finish.reasoning, Unset) else finish.reasoning
            tool_calls = tool_calls if isinstance(finish.tool_calls, Unset) else finish.tool_calls
            usage = usage if isinstance(finish.usage, Unset) else finish.usage
            if not isinstance(finish.finish_reason, Unset):
                finish_reason = finish.finish_reason
        return Response(text, reasoning, tool_calls, usage, finish_reason)


def _compile(rounds: Iterable[Sequence[Step]]) -> list[_Round]:
    compiled: list[_Round] = []
    call_number = 0
    for index, raw_round in enumerate(rounds):
        candidate: object = raw_round
        if isinstance(candidate, str) or not isinstance(candidate, Sequence):
            raise InvalidScript(f"round {index} must be a sequence of steps, got {raw_round!r}")
        steps = tuple(raw_round)
        tool_calls: list[ToolCall] = []
        finish: Finish | None = None
        for position, step in enumerate(steps):
            if not isinstance(step, _STEP_TYPES):
                raise InvalidScript(f"round {index}, step {position} is not a step: {step!r}")
            if isinstance(step, Finish):
                if position != len(steps) - 1:
                    raise InvalidScript(f"round {index}: Finish must be the last step")
                finish = step
            elif isinstance(step, Call):
                call_id = step.id if step.id is not None else f"call_{call_number}"
                call_number += 1
                try:
                    tool_calls.append(ToolCall(call_id, step.name, step.arguments))
                except ModelError as exc:
                    raise InvalidScript(f"round {index}, step {position}: {exc}") from exc
        output_tokens = sum(isinstance(step, Say | Think | Call) for step in steps)
        compiled.append(_Round(index, steps, tuple(tool_calls), output_tokens, finish))
    return compiled


class ScriptedModel:
    """A deterministic :class:`~emelex.model.AgentModel` that replays scripted rounds.

    Each call of :meth:`generate` (when its context is entered) takes the next round, a
    list of steps replayed in order::

        model = ScriptedModel([
            [Think("need the file"), Call("read_file", {"path": "notes.txt"})],
            [Say("The notes say "), Say("hello.")],
        ])

    ``Say``, ``Think`` and ``Progress`` stream one event each, ``Wait`` sleeps, ``Fail``
    raises, ``Call`` adds a tool call to the terminal response and ``Finish`` overrides
    it. Unless overridden, a round ends with ``Completed(Response(...))`` where:

    * ``text`` is the concatenated ``Say`` texts and ``reasoning`` the concatenated
      ``Think`` texts (``None`` when the round has no ``Think``);
    * ``tool_calls`` are the round's ``Call`` steps (ids ``"call_0"``, ``"call_1"``, ...
      numbered across the whole script unless a ``Call`` sets its own);
    * ``usage`` is ``Usage(input_tokens=len(request.messages), output_tokens=number of
      Say, Think and Call steps in the round)``;
    * ``finish_reason`` is ``"tool_calls"`` if the round has a ``Call``, else ``"stop"``.

    The model records every request it receives (:attr:`requests`) and how each round
    ended (:attr:`completed_rounds`, :attr:`failed_rounds`, :attr:`abandoned_rounds`).
    It uses no threads. Malformed scripts raise :class:`InvalidScript` here; a call
    beyond the last round raises :class:`ScriptExhausted` when its context is entered.
    """

    def __init__(
        self, rounds: Iterable[Sequence[Step]], *, capabilities: Capabilities = _UNKNOWN
    ) -> None:
        if not isinstance(capabilities, Capabilities):
            raise InvalidScript(f"capabilities must be Capabilities, got {capabilities!r}")
        self._rounds = _compile(rounds)
        self._capabilities = capabilities
        self._next_round = 0
        self._requests: list[GenerationRequest] = []
        self._completed: list[int] = []
        self._failed: list[int] = []
        self._abandoned: list[int] = []

    @property
    def capabilities(self) -> Capabilities:
        """The capabilities given at construction (unknown by default)."""
        return self._capabilities

    @property
    def requests(self) -> tuple[GenerationRequest, ...]:
        """Every request received, in order (including one that found no round left)."""
        return tuple(self._requests)

    @property
    def calls_made(self) -> int:
        """How many generations were started (``len(requests)``)."""
        return len(self._requests)

    @property
    def remaining_rounds(self) -> int:
        """How many rounds have not been started yet."""
        return len(self._rounds) - self._next_round

    @property
    def completed_rounds(self) -> tuple[int, ...]:
        """Indices of rounds whose ``Completed`` event was delivered."""
        return tuple(self._completed)

    @property
    def failed_rounds(self) -> tuple[int, ...]:
        """Indices of rounds that raised their ``Fail`` error."""
        return tuple(self._failed)

    @property
    def abandoned_rounds(self) -> tuple[int, ...]:
        """Indices of rounds whose context was left before they completed or failed."""
        return tuple(self._abandoned)

    def generate(self, request: GenerationRequest) -> _ScriptedGeneration:
        """Prepare the next round for ``request``; enter the result to replay it.

        Calling this does nothing but check ``request`` (raising
        :class:`~emelex.model.InvalidRequest` if it is not a ``GenerationRequest``).
        Entering the context records the request and claims the next round without
        checkpointing; it raises :class:`ScriptExhausted` when no round is left.

        Every ``__anext__`` of the stream checkpoints once (so cancellation is
        delivered between any two events) plus once per ``Wait`` it passes; a
        cancelled ``Wait`` is replayed in full if iteration resumes. Leaving the
        context early is always safe: there is no background work, and the round is
        recorded as abandoned. Iterating after the context is exited raises
        :class:`trio.ClosedResourceError`; iterating from two tasks at once raises
        :class:`trio.BusyResourceError`.
        """
        if not isinstance(request, GenerationRequest):
            raise InvalidRequest(f"expected a GenerationRequest, got {type(request).__name__}")
        return _ScriptedGeneration(self, request)

    def _claim(self, request: GenerationRequest) -> _Round:
        self._requests.append(request)
        if self._next_round >= len(self._rounds):
            raise ScriptExhausted(
                f"request #{len(self._requests)} arrived but the script has only "
                f"{len(self._rounds)} round(s)"
            )
        scripted = self._rounds[self._next_round]
        self._next_round += 1
        return scripted

    def _record(self, stream: _ScriptedStream) -> None:
        if stream.outcome == "completed":
            self._completed.append(stream.round_index)
        elif stream.outcome == "failed":
            self._failed.append(stream.round_index)
        else:
            self._abandoned.append(stream.round_index)

    def __repr__(self) -> str:
        return (
            f"<ScriptedModel rounds={len(self._rounds)} remaining={self.remaining_rounds} "
            f"calls_made={self.calls_made}>"
        )


class _ScriptedStream:
    """The event iterator of one replayed round."""

    def __init__(self, scripted: _Round, request: GenerationRequest) -> None:
        self.round_index = scripted.index
        self.outcome: str | None = None  # "completed" | "failed" once the round ended
        self._steps = scripted.steps
        self._position = 0
        self._response = scripted.response(request)
        self._closed = False
        self._busy = False

    def __aiter__(self) -> _ScriptedStream:
        return self

    async def __anext__(self) -> GenerationEvent:
        if self._closed:
            raise trio.ClosedResourceError("the generation context has been exited")
        if self._busy:
            raise trio.BusyResourceError("another task is already iterating this stream")
        if self.outcome is not None:
            raise StopAsyncIteration
        self._busy = True
        try:
            await trio.lowlevel.checkpoint()
            return await self._advance()
        finally:
            self._busy = False

    async def _advance(self) -> GenerationEvent:
        steps = self._steps
        while self._position < len(steps):
            step = steps[self._position]
            if isinstance(step, Wait):
                # Advance only after the sleep, so a cancelled Wait is not skipped.
                await trio.sleep(step.seconds)
                self._position += 1
                continue
            self._position += 1
            if isinstance(step, Say):
                return TextDelta(step.text)
            if isinstance(step, Think):
                return ReasoningDelta(step.text)
            if isinstance(step, Progress):
                return step.to_event()
            if isinstance(step, Fail):
                self.outcome = "failed"
                raise step.error
            # Call and Finish shape the terminal response and stream nothing.
        self.outcome = "completed"
        return Completed(self._response)

    def close(self) -> None:
        self._closed = True


class _ScriptedGeneration(AbstractAsyncContextManager[_ScriptedStream]):
    """The context manager returned by :meth:`ScriptedModel.generate`."""

    def __init__(self, model: ScriptedModel, request: GenerationRequest) -> None:
        self._model = model
        self._request = request
        self._stream: _ScriptedStream | None = None
        self._entered = False

    async def __aenter__(self) -> _ScriptedStream:
        if self._entered:
            raise RuntimeError("a ScriptedModel generation can be entered only once")
        self._entered = True
        self._stream = _ScriptedStream(self._model._claim(self._request), self._request)
        return self._stream

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: types.TracebackType | None,
    ) -> None:
        stream = self._stream
        if stream is not None:
            stream.close()
            self._model._record(stream)
