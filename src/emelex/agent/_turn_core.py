"""The pure turn state machine: no Trio, no I/O.

The turn actor feeds it model events and tool results and delivers the agent events it
returns. It owns the rules that decide what a turn may commit:

* the prefix contract: answer and reasoning deltas must concatenate to a prefix of the
  terminal response; the missing suffix is emitted before ``ModelCompleted``;
* tool calls are untrusted proposals: looked up, checked against the enabled set,
  validated against their schema (once: tools receive ``validated`` invocations), and
  re-identified with a fresh UUIDv7;
* corrections: a call the model can fix (unknown tool, unparsable or invalid
  arguments, a tool's ``RetryWithFeedback``) gets an error result that says what to
  change. Each round with corrections spends one retry of the turn's budget and one of
  each corrected tool's; past a budget the turn fails with RetryBudgetExhausted;
* rounds are checked whole before any call is approved or run: arguments must be JSON
  values and the round must fit the resource ceilings together with what every request
  keeps (system prompt and current user message). A round that does not is *refused*:
  it enters the turn as a ceiling-safe stand-in whose calls all get a synthetic
  "refused" result, and the model gets its next round to try again;
* every name a request calls is declared: a disabled tool history references by its
  own declaration, a name the table lacks by a retired placeholder (:mod:`._retired`);
* requests are fitted under the ceilings (earlier turns, then earlier rounds of this
  turn, are left out of the request, never out of history), so a history committed
  past a ceiling never blocks later turns;
* batches: an assistant message and its tool results enter the turn only as a whole;
  on failure, nothing is committed if no tool may have run (rollback), otherwise a
  structurally complete checkpoint is (calls that did not run get a synthetic result).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence

import attrs

from emelex._ids import new_id
from emelex.agent._arguments import json_problem
from emelex.agent._ceilings import (
    RequestSize,
    ResourceCeilings,
    argument_bytes,
    first_excess,
    fit_to_ceilings,
    measure_message,
    utf8_len,
)
from emelex.agent._errors import (
    CeilingExceeded,
    ProtocolViolation,
    RetryBudgetExhausted,
    RoundLimitExceeded,
)
from emelex.agent._events import (
    AgentEvent,
    AnswerDelta,
    HookApplied,
    ModelCompleted,
    ModelProgress,
    ModelStarted,
    ReasoningDelta,
    ToolCompleted,
    ToolProposed,
    ToolStarted,
    TurnCompleted,
    TurnStarted,
)
from emelex.agent._history import referenced_tools
from emelex.agent._hook_core import (
    checked_arguments,
    checked_output,
    checked_request,
    result_digest,
)
from emelex.agent._hooks import HookPoint, HookRecord
from emelex.agent._retired import with_retired
from emelex.agent._tool_table import RegisteredTool, ToolTable
from emelex.agent._turn_rules import (
    DEFAULT_MAX_RETRIES,
    DEFAULT_MAX_ROUNDS,
    INTERRUPTED,
    NOT_EXECUTED,
    REFUSED_CALLS_KEPT,
    _name,
    check_max_retries,
    check_max_rounds,
    refused_text,
)
from emelex.agent._video import refuse_video
from emelex.model import (
    Completed,
    GenerationEvent,
    GenerationOptions,
    GenerationRequest,
    Message,
    Progress,
    Response,
    TextDelta,
    ToolCall,
    ToolDefinition,
    Usage,
)
from emelex.model import ReasoningDelta as ModelReasoningDelta
from emelex.tools import ToolOutput


class TurnPhase(enum.Enum):
    READY = "ready"  # between rounds: a model request may be built
    GENERATING = "generating"  # a model round is streaming
    TOOLS = "tools"  # a tool batch is being resolved
    FINAL = "final"  # the last round answered without tool calls
    COMMITTED = "committed"
    ABORTED = "aborted"


@attrs.frozen
class AgentTurn:
    """A committed turn: its final response, exactly the messages it committed, and the
    usage summed over its model rounds (terminal usage is the authority)."""

    turn_id: str
    response: Response
    messages: tuple[Message, ...]
    usage: Usage
    rounds: int
    #: What lifecycle hooks changed, in order (see :class:`HookRecord`).
    hooks: tuple[HookRecord, ...] = attrs.field(default=(), kw_only=True)


@attrs.frozen
class PlannedCall:
    """One re-identified call of a batch. ``immediate`` is its synthetic result when it
    must not reach approval or invocation (unknown, unavailable or invalid)."""

    call: ToolCall
    provider_id: str
    tool: RegisteredTool | None
    immediate: ToolOutput | None


@attrs.frozen
class TurnResolution:
    """What a failed turn commits: nothing (rolled back) or a complete checkpoint."""

    rolled_back: bool
    messages: tuple[Message, ...]


class TurnCore:
    """State of one turn. Methods raise :class:`ProtocolViolation` on model contract
    breaches and ``RuntimeError`` when the driver calls them out of order."""

    def __init__(
        self,
        *,
        turn_id: str,
        user_message: Message,
        history: Sequence[Message],
        history_size: RequestSize,
        tools: ToolTable,
        enabled: frozenset[str],
        history_tools: frozenset[str],
        strip_reasoning: bool,
        options: GenerationOptions,
        ceilings: ResourceCeilings,
        max_rounds: int = DEFAULT_MAX_ROUNDS,
        make_id: Callable[[], str] = new_id,
        history_costs: Callable[[], Sequence[RequestSize]] | None = None,
        max_retries: int = DEFAULT_MAX_RETRIES,
    ) -> None:
        """``history_costs`` gives each history message's size (the session keeps
        them, so fitting a long history does not measure it again every round).
        ``max_retries`` is the turn's retry budget (each tool's own budget is its
        ``max_retries`` attribute, :data:`DEFAULT_TOOL_RETRIES` when it has none)."""
        check_max_rounds(max_rounds)
        check_max_retries(max_retries)
        self.max_retries = max_retries
        self.retries = 0
        self._tool_retries: dict[str, int] = {}
        self._argument_errors: list[str | None] = []
        self.turn_id = turn_id
        self._history = tuple(history)
        self._video_checked = 0
        self._history_size = history_size
        self._tools = tools
        self._enabled = enabled
        self._referenced = set(history_tools)
        self._schemas: dict[str, int] = {}  # what the current request declares, by size
        self._strip = strip_reasoning
        self._options = options
        self._ceilings = ceilings
        self.max_rounds = max_rounds
        self._make_id = make_id
        self._messages: list[Message] = [user_message]
        self._costs = [measure_message(user_message)]
        self._size = history_size + self._costs[0]
        self._history_costs = history_costs
        # What every request of this turn keeps, whatever fitting leaves out.
        self._protected = self._costs[0]
        if self._history and self._history[0].role == "system":
            self._protected = self._protected + measure_message(self._history[0])
        self._refusal: str | None = None
        self.phase = TurnPhase.READY
        self.round = 0
        self.usage = Usage()
        self.tools_may_have_run = False
        self._answer: list[str] = []
        self._reasoning: list[str] = []
        self._response: Response | None = None
        # The round check's assistant message and its size, for the response it was
        # built from: the batch (or a cancelled turn's checkpoint) reuses both.
        self._measured: tuple[Response, Message, RequestSize] | None = None
        self._batch: list[PlannedCall] = []
        self._results: dict[str, tuple[ToolOutput, bool]] = {}
        self._started: set[str] = set()
        self.hook_records: list[HookRecord] = []

    # -- rounds ---------------------------------------------------------------------------
    def start(self) -> list[AgentEvent]:
        return [TurnStarted(self.turn_id)]

    def _advertised(self) -> tuple[ToolDefinition, ...]:
        # Disabled tools stay declared while history references them, so replay stays valid.
        return tuple(
            self._tools[name].definition
            for name in self._tools.names
            if name in self._enabled or name in self._referenced
        )

    def begin_round(self) -> tuple[GenerationRequest, list[AgentEvent]]:
        """Build and check the next request. Raises CeilingExceeded if it is too large and
        RoundLimitExceeded when the turn already used ``max_rounds`` rounds."""
        self._expect(TurnPhase.READY)
        if self.round >= self.max_rounds:
            raise RoundLimitExceeded(self.max_rounds)
        tools = self._advertised()
        schemas = {tool.name: self._tools[tool.name].schema_bytes for tool in tools}
        everything = self._history + tuple(self._messages)
        messages = fit_to_ceilings(
            everything, self._size, sum(schemas.values()), self._ceilings, self._all_costs
        )
        # Every name the request calls is declared, the ones the table lacks by a retired
        # placeholder; when fitting left turns out, only their names are looked up again.
        called = self._referenced if messages is everything else referenced_tools(messages)
        tools, self._schemas = with_retired(tools, schemas, called, self._tools, self._ceilings)
        # The last line: no model sees encoded video. The session's history came in
        # video-free (refused at build, and every earlier turn passed this check), so
        # only this turn's messages need a look, each once (history-independent cost).
        refuse_video(self._messages[self._video_checked :], "request")
        self._video_checked = len(self._messages)
        request = GenerationRequest._checked(messages, tools=tools, options=self._options)
        self.round += 1
        self.phase = TurnPhase.GENERATING
        self._answer.clear()
        self._reasoning.clear()
        self._response = None
        self._refusal = None
        return request, [ModelStarted(self.turn_id, self.round)]

    def on_model_event(self, event: GenerationEvent) -> list[AgentEvent]:
        self._expect(TurnPhase.GENERATING)
        if self._response is not None:
            raise ProtocolViolation(f"model sent {type(event).__name__} after Completed")
        if isinstance(event, TextDelta):
            self._answer.append(event.text)
            return [AnswerDelta(self.turn_id, self.round, event.text)]
        if isinstance(event, ModelReasoningDelta):
            self._reasoning.append(event.text)
            return [ReasoningDelta(self.turn_id, self.round, event.text)]
        if isinstance(event, Progress):
            return [ModelProgress(self.turn_id, self.round, event)]
        if isinstance(event, Completed):
            return self._complete(event.response)
        raise ProtocolViolation(f"unknown generation event {type(event).__name__}")

    def _complete(self, response: Response) -> list[AgentEvent]:
        events: list[AgentEvent] = []
        streamed_reasoning = "".join(self._reasoning)
        final_reasoning = response.reasoning or ""
        if not final_reasoning.startswith(streamed_reasoning):
            raise ProtocolViolation("reasoning deltas are not a prefix of the final reasoning")
        if len(final_reasoning) > len(streamed_reasoning):
            suffix = final_reasoning[len(streamed_reasoning) :]
            events.append(ReasoningDelta(self.turn_id, self.round, suffix))
        streamed_answer = "".join(self._answer)
        if not response.text.startswith(streamed_answer):
            raise ProtocolViolation("answer deltas are not a prefix of the final answer")
        if len(response.text) > len(streamed_answer):
            suffix = response.text[len(streamed_answer) :]
            events.append(AnswerDelta(self.turn_id, self.round, suffix))
        provider_ids = [call.id for call in response.tool_calls]
        self._argument_errors = [call.arguments_error for call in response.tool_calls]
        calls = tuple(
            ToolCall(self._make_id(), call.name, call.arguments) for call in response.tool_calls
        )
        response = attrs.evolve(response, tool_calls=calls)
        reason = self._round_refusal(response)
        if reason is not None:
            kept, self._refusal = self._stand_in(response, reason)
            provider_ids = provider_ids[: len(kept)]
            response = attrs.evolve(response, tool_calls=kept)
        self._provider_ids = provider_ids
        self._response = response
        self.usage = self.usage + response.usage
        events.append(ModelCompleted(self.turn_id, self.round, response))
        return events

    # -- the round check ------------------------------------------------------------------
    def _round_refusal(self, response: Response) -> str | None:
        """Why this round must not run (None: it may), checked before any approval."""
        calls = response.tool_calls
        if not calls:
            return None
        ceilings = self._ceilings
        budget = ceilings.max_tool_argument_bytes // 2
        for index, call in enumerate(calls, 1):
            problem = json_problem(call.arguments, max_values=budget)
            if problem is not None:
                return f"call {index} ({_name(call.name)}) has non-JSON arguments: {problem}"
        limit = ceilings.max_tool_argument_bytes
        sizes = [argument_bytes(call.arguments) for call in calls]
        for index, (call, size) in enumerate(zip(calls, sizes, strict=True), 1):
            if size > limit:
                return (
                    f"call {index} ({_name(call.name)}) has {size:,} bytes of arguments, over "
                    f"the {limit:,}-byte ceiling on a round's tool arguments "
                    "(max_tool_argument_bytes); split large content over several smaller calls"
                )
        allowed = ceilings.max_messages - self._protected.messages - 1
        if len(calls) > allowed:
            return (
                f"the round proposed {len(calls):,} tool calls and at most {max(allowed, 0):,} "
                f"fit in one round (max_messages {ceilings.max_messages:,} counts the system "
                "prompt, the user message, this assistant message and one result per call); "
                "propose fewer calls per round"
            )
        results = RequestSize(
            len(calls), 0, 0, sum(len("tool") + utf8_len(call.id) for call in calls), 0
        )
        assistant = self._assistant_message(response)
        cost = measure_message(assistant)
        self._measured = (response, assistant, cost)
        total = self._protected + cost + results
        excess = first_excess(total, 0, ceilings)
        if excess is not None:
            name, maximum, actual = excess
            return (
                f"the round would need {actual:,} for {name} together with the user message, "
                f"over the ceiling of {maximum:,}; propose fewer or smaller calls"
            )
        return None

    def _stand_in(self, response: Response, reason: str) -> tuple[tuple[ToolCall, ...], str]:
        """The calls a refused round keeps and their synthetic result: the first few
        calls, with their arguments while those are JSON and fit (else ``{}``), as many
        as the ceilings allow. Raises CeilingExceeded when not even one call fits."""
        calls = response.tool_calls
        # Measured with the longest text the result can have (it names how many stay).
        longest = refused_text(reason, REFUSED_CALLS_KEPT, len(calls) + 1)
        ceilings = self._ceilings
        total = self._protected + measure_message(
            self._assistant_message(attrs.evolve(response, tool_calls=()))
        )
        kept: list[ToolCall] = []
        for call in calls[:REFUSED_CALLS_KEPT]:
            result = measure_message(ToolOutput.error(longest).to_message(call.id))
            problem = json_problem(call.arguments, max_values=ceilings.max_tool_argument_bytes // 2)
            options = [{}] if problem else [call.arguments, {}]
            for arguments in options:
                add = result + RequestSize(
                    0, 0, 0, utf8_len(call.id) + utf8_len(call.name), argument_bytes(arguments)
                )
                if first_excess(total + add, 0, ceilings) is None:
                    kept.append(ToolCall(call.id, call.name, arguments))
                    total = total + add
                    break
            else:
                break
        if not kept:
            # Not even one refused call fits: the round cannot be represented at all.
            excess = first_excess(total + RequestSize(2, 0, 0, 0, 0), 0, ceilings)
            raise CeilingExceeded(*(excess or ("max_messages", ceilings.max_messages, 0)))
        return tuple(kept), refused_text(reason, len(kept), len(calls))

    def end_round(self) -> tuple[list[PlannedCall], list[AgentEvent]]:
        """Close the model round: an empty plan means the turn has its final answer."""
        self._expect(TurnPhase.GENERATING)
        response = self._response
        if response is None:
            raise ProtocolViolation("the model stream ended without a Completed event")
        if not response.tool_calls:
            self.phase = TurnPhase.FINAL
            return [], []
        plan: list[PlannedCall] = []
        # A refused round keeps a prefix of the calls (and of their provider ids).
        unparsed = self._argument_errors[: len(response.tool_calls)]
        for call, provider_id, problem in zip(
            response.tool_calls, self._provider_ids, unparsed, strict=True
        ):
            self._referenced.add(call.name)
            plan.append(self._plan(call, provider_id, problem))
        self._batch = plan
        self._results = {}
        self.phase = TurnPhase.TOOLS
        return plan, [ToolProposed(self.turn_id, self.round, item.call) for item in plan]

    def _plan(self, call: ToolCall, provider_id: str, unparsed: str | None) -> PlannedCall:
        entry = self._tools.get(call.name)
        if self._refusal is not None:
            return PlannedCall(call, provider_id, entry, ToolOutput.error(self._refusal))
        if entry is None:
            known = ", ".join(self._tools.names) or "none"
            message = f"unknown tool {call.name!r} (available: {known})"
            return PlannedCall(call, provider_id, None, ToolOutput.feedback(message))
        if call.name not in self._enabled:
            message = f"tool {call.name!r} is unavailable in this session right now"
            return PlannedCall(call, provider_id, entry, ToolOutput.error(message))
        if unparsed is not None:
            return PlannedCall(call, provider_id, entry, ToolOutput.feedback(unparsed))
        problem = entry.validation_error(call.arguments)
        if problem is not None:
            return PlannedCall(call, provider_id, entry, ToolOutput.feedback(problem))
        return PlannedCall(call, provider_id, entry, None)

    # -- tool batch -----------------------------------------------------------------------
    def tool_started(self, call_id: str) -> list[AgentEvent]:
        """From here on, host effects may exist: failure checkpoints instead of rolling
        back."""
        self._expect(TurnPhase.TOOLS)
        item = self._find(call_id)
        self.tools_may_have_run = True
        self._started.add(call_id)
        return [ToolStarted(self.turn_id, call_id, item.call.name)]

    def record_result(self, call_id: str, output: ToolOutput, executed: bool) -> list[AgentEvent]:
        self._expect(TurnPhase.TOOLS)
        self._find(call_id)
        if call_id in self._results:
            raise RuntimeError(f"call {call_id} already has a result")
        self._results[call_id] = (output, executed)
        return [ToolCompleted(self.turn_id, call_id, output, executed)]

    def finish_batch(self) -> None:
        """Commit the batch into the turn once every call has exactly one result."""
        self._expect(TurnPhase.TOOLS)
        missing = [item.call.id for item in self._batch if item.call.id not in self._results]
        if missing:
            raise RuntimeError(f"calls without a result: {missing}")
        corrected = [
            (item, self._results[item.call.id][0])
            for item in self._batch
            if self._results[item.call.id][0].retry
        ]
        self._append_batch({cid: output for cid, (output, _) in self._results.items()})
        self.phase = TurnPhase.READY
        if corrected:
            self._spend_retries(corrected)

    def _spend_retries(self, corrected: list[tuple[PlannedCall, ToolOutput]]) -> None:
        """One retry of the turn and of each corrected tool for this round; raise
        RetryBudgetExhausted past a budget (the batch is already in the turn, so the
        checkpoint shows the model's last correction)."""
        self.retries += 1
        seen: set[str] = set()
        for item, output in corrected:
            if item.tool is None or item.call.name in seen:
                continue  # an unknown tool has no budget of its own
            seen.add(item.call.name)
            spent = self._tool_retries.get(item.call.name, 0) + 1
            self._tool_retries[item.call.name] = spent
            if spent > item.tool.max_retries:
                raise RetryBudgetExhausted(
                    item.tool.max_retries, tool=item.call.name, feedback=output.text
                )
        if self.retries > self.max_retries:
            raise RetryBudgetExhausted(self.max_retries, tool=None, feedback=corrected[-1][1].text)

    def _batch_messages(self, results: dict[str, ToolOutput]) -> list[Message]:
        assert self._response is not None
        return [
            self._assistant()[0],
            *(results[item.call.id].to_message(item.call.id) for item in self._batch),
        ]

    def _append_batch(self, results: dict[str, ToolOutput]) -> None:
        self._append(*self._assistant())
        for item in self._batch:
            self._append(results[item.call.id].to_message(item.call.id))
        self._batch = []
        self._results = {}

    def _assistant_message(self, response: Response) -> Message:
        reasoning = None if self._strip else response.reasoning
        return Message(
            "assistant", response.text, tool_calls=response.tool_calls, reasoning=reasoning
        )

    def _assistant(self) -> tuple[Message, RequestSize]:
        """The current response as an assistant message, and its size (measured once:
        the round check already built and measured it for a round with tool calls)."""
        response = self._response
        assert response is not None
        measured = self._measured
        if measured is not None and measured[0] is response:
            return measured[1], measured[2]
        message = self._assistant_message(response)
        return message, measure_message(message)

    def _append(self, message: Message, cost: RequestSize | None = None) -> None:
        if cost is None:
            cost = measure_message(message)
        self._messages.append(message)
        self._costs.append(cost)
        self._size = self._size + cost

    def _all_costs(self) -> list[RequestSize]:
        history = (
            self._history_costs()
            if self._history_costs is not None
            else [measure_message(message) for message in self._history]
        )
        return [*history, *self._costs]

    def _find(self, call_id: str) -> PlannedCall:
        for item in self._batch:
            if item.call.id == call_id:
                return item
        raise RuntimeError(f"call {call_id} is not part of the current batch")

    # -- hook decisions (validated here; the driver only awaits the hooks) ---------------
    def _record(
        self, point: HookPoint, hook: str, call_id: str | None, before: object, after: object
    ) -> list[AgentEvent]:
        record = HookRecord(point, hook, self.round, call_id, before, after)
        self.hook_records.append(record)
        return [HookApplied(self.turn_id, record)]

    def replace_request(
        self, request: GenerationRequest, hook: str, new: object
    ) -> tuple[GenerationRequest, list[AgentEvent]]:
        """``new`` in place of ``request``, once it passes the ceilings and offers only
        tools this turn advertises. Raises HookFailed otherwise."""
        self._expect(TurnPhase.GENERATING)
        checked = checked_request(hook, new, self._schemas, self._ceilings)
        return checked, self._record("before_model_request", hook, None, request, checked)

    def replace_arguments(
        self, call_id: str, hook: str, arguments: dict[str, object]
    ) -> tuple[PlannedCall, list[AgentEvent]]:
        """The planned call with ``arguments``, validated again against its tool's
        schema and the round's argument ceiling; the assistant message then carries
        them (history shows what ran). Raises HookFailed when they do not pass."""
        self._expect(TurnPhase.TOOLS)
        item = self._find(call_id)
        assert item.tool is not None
        assert self._response is not None
        others = sum(argument_bytes(p.call.arguments) for p in self._batch if p.call.id != call_id)
        limit = self._ceilings.max_tool_argument_bytes - others
        final = checked_arguments(hook, item.tool, arguments, limit)
        call = ToolCall(call_id, item.call.name, final)
        new_item = attrs.evolve(item, call=call)
        self._batch = [new_item if p.call.id == call_id else p for p in self._batch]
        calls = tuple(call if c.id == call_id else c for c in self._response.tool_calls)
        self._response = attrs.evolve(self._response, tool_calls=calls)
        self._measured = None
        events = self._record("before_tool_call", hook, call_id, item.call.arguments, final)
        return new_item, events

    def replace_result(
        self, call_id: str, hook: str, output: ToolOutput, new: object
    ) -> tuple[ToolOutput, list[AgentEvent]]:
        """``new`` in place of ``output`` (a ToolOutput; raises HookFailed otherwise).
        The record keeps only a digest of ``output``: a result a hook replaced (a
        redacted secret) must not live on where the model's history goes."""
        self._expect(TurnPhase.TOOLS)
        self._find(call_id)
        checked = checked_output(hook, new)
        before = result_digest(output)
        return checked, self._record("after_tool_result", hook, call_id, before, checked)

    def refuse_call(self, call_id: str, hook: str, reason: str) -> list[AgentEvent]:
        """Answer the call with an error result naming ``reason``; it never runs."""
        output = ToolOutput.error(f"refused by hook {hook!r}: {reason}")
        events = self._record("before_tool_call", hook, call_id, None, output)
        return events + self.record_result(call_id, output, executed=False)

    # -- endings --------------------------------------------------------------------------
    def commit(self) -> tuple[AgentTurn, list[AgentEvent]]:
        self._expect(TurnPhase.FINAL)
        assert self._response is not None
        self._append(self._assistant_message(self._response))
        self.phase = TurnPhase.COMMITTED
        turn = AgentTurn(
            self.turn_id,
            self._response,
            tuple(self._messages),
            self.usage,
            self.round,
            hooks=tuple(self.hook_records),
        )
        return turn, [TurnCompleted(self.turn_id, self.usage)]

    def abort(self) -> TurnResolution:
        """Resolve a failed turn: roll back iff no tool may have run; otherwise keep the
        complete batches and complete the batch in progress with synthetic results.

        A committed turn can still be aborted (its consumer failed on the very last
        event): the same rule applies, keeping the whole turn if a tool may have run."""
        if self.phase is TurnPhase.ABORTED:
            raise RuntimeError("turn already aborted")
        in_batch = self.phase is TurnPhase.TOOLS
        self.phase = TurnPhase.ABORTED
        if not self.tools_may_have_run:
            return TurnResolution(True, ())
        if in_batch:
            self._append_batch(self._settled_results(None))
        return TurnResolution(False, tuple(self._messages))

    def _settled_results(self, starting: str | None) -> dict[str, ToolOutput]:
        """The batch's results if it ended now: the recorded ones, ``INTERRUPTED`` for
        calls that started (and ``starting``), ``NOT_EXECUTED`` for the rest."""
        results: dict[str, ToolOutput] = {}
        for item in self._batch:
            recorded = self._results.get(item.call.id)
            if recorded is not None:
                results[item.call.id] = recorded[0]
            elif item.call.id in self._started or item.call.id == starting:
                results[item.call.id] = ToolOutput.error(INTERRUPTED)
            else:
                results[item.call.id] = ToolOutput.error(NOT_EXECUTED)
        return results

    def checkpoint_if_lost(self, starting: str | None) -> tuple[Message, ...]:
        """What :meth:`abort` would keep if the process were lost right now, with the
        call ``starting`` about to start: the complete batches and the batch in progress
        completed with its recorded results, ``INTERRUPTED`` for calls that started (and
        ``starting``) and ``NOT_EXECUTED`` for the rest. Changes nothing.

        A host that writes this down before each tool starts can settle a turn of a
        crashed process by the same rule as a cancelled one (checkpoint, because a tool
        may have run)."""
        self._expect(TurnPhase.TOOLS)
        return (*self._messages, *self._batch_messages(self._settled_results(starting)))

    def unstarted(self, starting: str | None) -> frozenset[str]:
        """Calls of the batch with no result that never started (``starting`` aside):
        the ones whose ``NOT_EXECUTED`` placeholder a resumed turn may replace."""
        return frozenset(
            item.call.id
            for item in self._batch
            if item.call.id not in self._results
            and item.call.id not in self._started
            and item.call.id != starting
        )

    def restore(
        self,
        done: Sequence[Message],
        rounds: int,
        may_have_run: bool,
        batch: tuple[Response, dict[str, ToolOutput]] | None,
    ) -> list[PlannedCall]:
        """Continue a turn written down elsewhere (``_progress``): ``done`` follows the
        user's message; ``batch`` is re-planned, its results kept. Returns open calls."""
        self._expect(TurnPhase.READY)
        if self.round or len(self._messages) != 1:
            raise RuntimeError("only a new turn can be restored")
        for message in done:
            self._append(message)
        self._referenced |= referenced_tools(done)
        self.round = rounds
        self.tools_may_have_run = may_have_run
        if batch is None:
            return []
        response, results = batch
        self._response = response
        self._provider_ids = [call.id for call in response.tool_calls]
        self._argument_errors = [None] * len(response.tool_calls)
        self.phase = TurnPhase.GENERATING
        plan, _ = self.end_round()
        for call_id, output in results.items():
            self._results[call_id] = (output, True)
        return [item for item in plan if item.call.id not in results]

    @property
    def messages(self) -> tuple[Message, ...]:
        return tuple(self._messages)

    @property
    def response(self) -> Response | None:
        """The current round's terminal response (harness ids), once it completed."""
        return self._response

    @property
    def size(self) -> RequestSize:
        return self._size

    def _expect(self, phase: TurnPhase) -> None:
        if self.phase is not phase:
            raise RuntimeError(f"turn is {self.phase.value}, expected {phase.value}")
