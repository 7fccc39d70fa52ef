"""The activities of a turn: emelex's work, run in the worker's Trio world.

Each activity is an asyncio coroutine only as far as Temporal needs one: it checks the
drift digest, heartbeats (how Temporal notices a lost worker and delivers
cancellation) and hands the work to the worker's Trio loop through the portal. Models
and tools never run on the asyncio loop.

Streaming: deltas and tool progress go to the worker's ``on_event`` side channel, in
Trio, as they happen; never into workflow history. Heartbeat details carry only a
progress count (Temporal keeps the last one, so they cannot carry a stream).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
from temporalio import activity
from temporalio.exceptions import ApplicationError

from emelex._text import shorten
from emelex.agent import (
    AgentEvent,
    AgentSession,
    AnswerDelta,
    ProtocolViolation,
    ReasoningDelta,
    ToolProgress,
)
from emelex.model import Completed, GenerationRequest, Response, TextDelta, VideoPart
from emelex.model import ReasoningDelta as ModelReasoningDelta
from emelex.model.openai import RateLimited, TransportFailure
from emelex.runtime import AgentCancellation
from emelex.temporal._bridge import TrioPortal
from emelex.temporal._spec import (
    AgentDescription,
    CallVerdict,
    ModelRoundInput,
    ModelRoundResult,
    ToolCallInput,
    authority_digest,
    decode_call,
    decode_request,
    encode_messages,
    encode_options,
    encode_output,
    encode_response,
    from_data,
    to_data,
)
from emelex.temporal._workflow import DESCRIBE, DRIFT, MODEL_ROUND, TOOL_CALL
from emelex.tools import (
    ArgumentConversionError,
    RetryWithFeedback,
    ToolCancellationPolicy,
    ToolInvocation,
    ToolOutput,
)

#: Model failures Temporal may retry: the request never reached the model or its answer
#: never came back. Anything else (a refused request, a broken stream) fails the round.
TRANSPORT_ERRORS: tuple[type[BaseException], ...] = (
    TransportFailure,
    RateLimited,
    httpx.TransportError,
    ConnectionError,
)

_log = logging.getLogger("emelex.temporal")

VIDEO_REFUSED = "video is refused: emelex has no bundled video decoder yet"

#: Longest error text reported to the model for a failing tool (as in process).
MAX_TOOL_ERROR_CHARS = 2_000

#: Called in the worker's Trio thread with (session id, event) for streamed deltas and
#: tool progress.
EventSideChannel = Callable[[str, AgentEvent], object]


def _bounded(text: str) -> str:
    return shorten(text, MAX_TOOL_ERROR_CHARS)


@contextlib.asynccontextmanager
async def _heartbeating(interval: float, details: Callable[[], Any]) -> AsyncIterator[None]:
    async def beat() -> None:
        while True:
            activity.heartbeat(details())
            await asyncio.sleep(interval)

    task = asyncio.create_task(beat())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def describe_session(session: AgentSession) -> AgentDescription:
    """What a worker's session is, as a turn workflow pins it."""
    table = session.tool_table
    return AgentDescription(
        authority=session.authority_snapshot.to_json(),
        history=encode_messages(session.history),
        options=encode_options(session.turn_options()),
        tool_order=table.names,
        enabled=session.enabled_tools,
        tool_retries=tuple((name, table[name].max_retries) for name in table.names),
        idempotent=tuple(
            name for name in table.names if getattr(table[name].tool, "idempotent", False) is True
        ),
        max_rounds=session.max_rounds,
        max_retries=session.max_retries,
        strip_reasoning=session.strip_reasoning,
    )


class TurnActivities:
    """The activities of one worker, bound to its session (model, tools, workspace)."""

    def __init__(
        self,
        session: AgentSession,
        portal: TrioPortal,
        *,
        on_event: EventSideChannel | None = None,
        heartbeat_interval: float = 1.0,
    ) -> None:
        self._session = session
        self._portal = portal
        self._on_event = on_event
        self._interval = heartbeat_interval
        self._description = describe_session(session)
        self._digest = authority_digest(self._description.authority)

    @property
    def digest(self) -> str:
        return self._digest

    def activities(self) -> list[Callable[..., Any]]:
        return [self.describe, self.model_round, self.tool_call]

    def _check_drift(self, digest: str) -> None:
        if digest != self._digest:
            raise ApplicationError(
                "this worker's authority snapshot differs from the one the session pinned "
                f"(worker {self._digest[:12]}, session {digest[:12]}): it refuses the task",
                type=DRIFT,
                non_retryable=True,
            )

    def _emit(self, session_id: str, event: AgentEvent) -> None:
        if self._on_event is None:
            return
        try:
            self._on_event(session_id, event)
        except Exception:
            # The side channel is the application's fan-out, not the turn: its failure
            # must not fail (or retry) a model round whose result history records.
            _log.exception("the on_event side channel raised; the event is dropped")

    # -- describe --------------------------------------------------------------------------
    @activity.defn(name=DESCRIBE)
    async def describe(self) -> Any:
        return to_data(self._description)

    # -- a model round ---------------------------------------------------------------------
    @activity.defn(name=MODEL_ROUND)
    async def model_round(self, data: Any) -> Any:
        spec = from_data(data, ModelRoundInput)
        self._check_drift(spec.digest)
        request = decode_request(spec.request)
        streamed = [0]
        async with _heartbeating(self._interval, lambda: {"streamed": streamed[0]}):
            try:
                result = await self._portal.run(self._generate, spec, request, streamed)
            except TRANSPORT_ERRORS as exc:
                raise ApplicationError(
                    f"{type(exc).__name__}: {exc}", type="ModelTransport"
                ) from exc
            except Exception as exc:
                kind = type(exc).__name__ if isinstance(exc, ProtocolViolation) else "ModelFailed"
                raise ApplicationError(
                    f"the model failed: {type(exc).__name__}: {exc}", type=kind, non_retryable=True
                ) from exc
        return to_data(result)

    async def _generate(
        self, spec: ModelRoundInput, request: GenerationRequest, streamed: list[int]
    ) -> ModelRoundResult:
        answer: list[str] = []
        reasoning: list[str] = []
        response: Response | None = None
        async with self._session.client.generate(request) as stream:
            async for event in stream:
                if isinstance(event, TextDelta):
                    answer.append(event.text)
                    self._emit(spec.session_id, AnswerDelta(spec.turn_id, spec.round, event.text))
                elif isinstance(event, ModelReasoningDelta):
                    reasoning.append(event.text)
                    self._emit(
                        spec.session_id, ReasoningDelta(spec.turn_id, spec.round, event.text)
                    )
                elif isinstance(event, Completed):
                    response = event.response
                streamed[0] += 1
        if response is None:
            raise ProtocolViolation("the model stream ended without a Completed event")
        return ModelRoundResult(
            "".join(answer), "".join(reasoning), encode_response(response), self._verdicts(response)
        )

    def _verdicts(self, response: Response) -> tuple[CallVerdict, ...]:
        """Each proposed call's approval question, asked of the tool where it lives."""
        table = self._session.tool_table
        verdicts: list[CallVerdict] = []
        for call in response.tool_calls:
            entry = table.get(call.name)
            if entry is None or call.arguments_error or entry.validation_error(call.arguments):
                verdicts.append(CallVerdict("run"))  # the turn core answers it itself
                continue
            try:
                reason = entry.tool.approval_reason(call.arguments)
            except (ArgumentConversionError, RetryWithFeedback) as exc:
                verdicts.append(CallVerdict("feedback", _bounded(f"{call.name}: {exc}")))
                continue
            except Exception as exc:
                message = f"tool {call.name!r} could not describe its action: {exc}"
                verdicts.append(CallVerdict("error", _bounded(message)))
                continue
            verdicts.append(CallVerdict("run") if reason is None else CallVerdict("ask", reason))
        return tuple(verdicts)

    # -- a tool call -----------------------------------------------------------------------
    @activity.defn(name=TOOL_CALL)
    async def tool_call(self, data: Any) -> Any:
        spec = from_data(data, ToolCallInput)
        self._check_drift(spec.digest)
        call = decode_call(spec.call)
        entry = self._session.tool_table.get(call.name)
        if entry is None:  # the digest matched, so this cannot happen short of a bug
            raise ApplicationError(f"no tool {call.name!r}", type=DRIFT, non_retryable=True)
        cancellation = AgentCancellation()
        invocation = ToolInvocation(
            call,
            cancellation,
            spec.turn_id,
            spec.session_id,
            approved=spec.approved,
            validated=True,  # by the turn core in the workflow, against the same schema
            progress_sink=lambda message, done, total: self._emit(
                spec.session_id, ToolProgress(spec.turn_id, call.id, message, done, total)
            ),
        )
        finish = entry.policy is ToolCancellationPolicy.FINISH_ONCE_STARTED
        async with _heartbeating(self._interval, lambda: None):
            output = await self._portal.run(
                _invoke,
                entry.tool,
                invocation,
                finish_on_cancel=finish,
                on_cancel=cancellation.cancel,
            )
        return encode_output(output)


async def _invoke(tool: Any, invocation: ToolInvocation) -> ToolOutput:
    """The tool's one terminal result; a failing tool is a result, as in process."""
    name = invocation.call.name
    try:
        value = await tool.invoke(invocation)
    except RetryWithFeedback as exc:
        return ToolOutput.feedback(_bounded(str(exc)))
    except Exception as exc:
        return ToolOutput.error(_bounded(f"tool {name!r} failed: {type(exc).__name__}: {exc}"))
    if isinstance(value, ToolOutput):
        if any(isinstance(part, VideoPart) for part in value.content):
            # As in process: no decoder, so encoded video never enters history.
            return ToolOutput.error(f"tool {name!r} returned a video part; {VIDEO_REFUSED}")
        return value
    if isinstance(value, str):
        return ToolOutput(value)
    return ToolOutput.error(f"tool {name!r} returned {type(value).__name__}, not a ToolOutput")
