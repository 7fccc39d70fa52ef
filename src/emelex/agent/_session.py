"""AgentSession: committed history, tool authority, and the turn actors that drive the
pure turn core."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

import attrs
import trio

from emelex._ids import new_id
from emelex._text import shorten
from emelex.agent import _tracing as tracing
from emelex.agent._approval import ApprovalContext, ApprovalDecision, ApprovalPolicy, Approve, Deny
from emelex.agent._authority import AgentAuthoritySnapshot
from emelex.agent._builder import check_options_capabilities
from emelex.agent._ceilings import (
    RequestSize,
    ResourceCeilings,
    measure_message,
    measure_messages,
)
from emelex.agent._errors import (
    AgentError,
    ApprovalFailed,
    EventConsumerError,
    ModelFailed,
    SessionClosed,
    ToolUnavailable,
    TurnCancelled,
    TurnInProgress,
    UnsupportedContent,
)
from emelex.agent._events import (
    AgentEvent,
    ApprovalRequested,
    ApprovalResolved,
    ToolProgress,
    TurnFailed,
)
from emelex.agent._history import referenced_tools
from emelex.agent._tool_table import RegisteredTool
from emelex.agent._turn_core import (
    DEFAULT_MAX_ROUNDS,
    AgentTurn,
    PlannedCall,
    TurnCore,
    check_max_rounds,
)
from emelex.model import (
    AudioPart,
    Client,
    Completed,
    GenerationOptions,
    GenerationRequest,
    ImagePart,
    Message,
    Part,
    TextPart,
    VideoPart,
)
from emelex.runtime import (
    CURRENT,
    ActorCall,
    ActorContext,
    ActorKind,
    ActorNursery,
    ActorState,
    AgentCancellation,
    CancellationPolicy,
    Supervisor,
)
from emelex.tools import ToolCancellationPolicy, ToolInvocation, ToolOutput

if TYPE_CHECKING:
    from emelex.agent._builder import AgentSessionBuilder, Resolved
    from emelex.tools.workspace import Workspace

EventConsumer = Callable[[AgentEvent], object]

#: Longest error text reported to the model for a failing tool.
MAX_TOOL_ERROR_CHARS = 2_000

_RUNTIME_POLICY = {
    ToolCancellationPolicy.FINISH_ONCE_STARTED: CancellationPolicy.FINISH_ONCE_STARTED,
    ToolCancellationPolicy.INTERRUPTIBLE: CancellationPolicy.DROP,
}


class _EventSink:
    """Delivers events in order; the first consumer failure cancels the turn."""

    __slots__ = ("_consumer", "failure", "scope")

    def __init__(self, consumer: EventConsumer | None) -> None:
        self._consumer = consumer
        self.failure: Exception | None = None
        self.scope: trio.CancelScope | None = None

    def emit_all(self, events: Iterable[AgentEvent]) -> None:
        consumer = self._consumer
        if consumer is None or self.failure is not None:
            return
        for event in events:
            try:
                consumer(event)
            except Exception as exc:
                self.failure = exc
                if self.scope is not None:
                    self.scope.cancel()
                return


class _CancelRoute:
    """Where a turn's AgentCancellation goes.

    While a FINISH_ONCE_STARTED tool is past its start point the turn must wait for its
    one terminal result anyway, so the signal goes straight to the tool (one Event set)
    and the turn's scope is cancelled only once that result is recorded. Cancelling the
    scope at once would cost a ``trio.Cancelled`` delivery to the waiting owner and make
    the tool wait for the owner to be scheduled before it hears of the cancellation.
    Otherwise (model job, approval, a tool not yet started) the turn's scope is
    cancelled at once.
    """

    __slots__ = ("cancelled", "running", "scope")

    def __init__(self, scope: trio.CancelScope) -> None:
        self.scope = scope
        self.running: ActorCall[Any] | None = None
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True
        running = self.running
        if (
            running is not None
            and running.policy is CancellationPolicy.FINISH_ONCE_STARTED
            and running.past_start_point
            and not running.finished
        ):
            running.cancel()
        else:
            self.scope.cancel()


def _bounded(text: str) -> str:
    return shorten(text, MAX_TOOL_ERROR_CHARS)


def _user_message(content: str | Sequence[Part | str]) -> Message:
    parts: list[Part] = []
    for part in [content] if isinstance(content, str) else content:
        if isinstance(part, str):
            parts.append(TextPart(part))
        elif isinstance(part, VideoPart):
            raise UnsupportedContent(
                "video input is refused: emelex has no bundled video decoder yet"
            )
        elif isinstance(part, TextPart | ImagePart | AudioPart):
            parts.append(part)
        else:
            raise UnsupportedContent(f"unsupported content part {type(part).__name__}")
    return Message("user", parts)


class AgentSession:
    """One conversation with committed history, bounded authority and one turn at a time.

    Build it with :meth:`AgentSession.builder`. ``run_*`` methods are Trio-native: they
    checkpoint, run the turn as actors of :meth:`Supervisor.current`, deliver events in
    order to ``on_event`` (a plain callable) and return the committed :class:`AgentTurn`.

    Cancellation: firing ``cancellation`` raises :class:`TurnCancelled`; cancelling the
    caller's Trio scope has the same effect on the turn and then propagates
    ``trio.Cancelled``. Either way tools follow their cancellation policy and history
    is rolled back (no tool may have run) or checkpointed (one may have), before the
    call returns. Close the session (``with session:`` or :meth:`close`) to release
    its workspace descriptor.
    """

    def __init__(
        self,
        *,
        session_id: str,
        client: Client,
        resolved: Resolved,
        approval: ApprovalPolicy,
        options: GenerationOptions,
        ceilings: ResourceCeilings,
        max_rounds: int = DEFAULT_MAX_ROUNDS,
        default_max_tokens: int | None = None,
    ) -> None:
        self.session_id = session_id
        self._client = client
        self._workspace = resolved.workspace
        self._table = resolved.table
        self._history = resolved.history
        self._history_size = measure_messages(self._history)
        self._history_costs: list[RequestSize] | None = None  # measured when first needed
        self._history_tools = frozenset(referenced_tools(self._history))
        self._strip = resolved.strip_reasoning
        self._snapshot = resolved.snapshot
        self._enabled = frozenset(self._table.names)
        self._approval = approval
        self._options = options
        self._ceilings = ceilings
        check_max_rounds(max_rounds)
        self._max_rounds = max_rounds
        self.default_max_tokens = default_max_tokens
        self._busy = False
        self._closed = False
        self.turns_committed = 0

    @staticmethod
    def builder(client: Client | Any, workspace: Any) -> AgentSessionBuilder:
        from emelex.agent._builder import AgentSessionBuilder

        return AgentSessionBuilder(client, workspace)

    # -- state ----------------------------------------------------------------------------
    @property
    def authority_snapshot(self) -> AgentAuthoritySnapshot:
        return self._snapshot

    @property
    def history(self) -> tuple[Message, ...]:
        """Every committed message, in order (reasoning stripped when the model's
        template is proven not to keep it)."""
        return self._history

    @property
    def available_tools(self) -> tuple[str, ...]:
        """The immutable tool-authority ceiling, in declaration order."""
        return self._table.names

    @property
    def enabled_tools(self) -> tuple[str, ...]:
        return tuple(name for name in self._table.names if name in self._enabled)

    @property
    def max_rounds(self) -> int:
        """Most model rounds per turn; settable between turns (a positive int)."""
        return self._max_rounds

    @max_rounds.setter
    def max_rounds(self, value: int) -> None:
        check_max_rounds(value)
        self._max_rounds = value

    @property
    def workspace(self) -> Workspace:
        return self._workspace

    def set_enabled_tools(self, names: Iterable[str]) -> None:
        """Replace the enabled subset atomically. Raises :class:`ToolUnavailable` (and
        changes nothing) if a name is outside :attr:`available_tools`."""
        wanted = frozenset(names)
        unknown = sorted(wanted.difference(self._table.names))
        if unknown:
            raise ToolUnavailable(f"not in this session's tool authority: {', '.join(unknown)}")
        self._enabled = wanted

    def close(self) -> None:
        """Release the workspace descriptor; later turns raise SessionClosed."""
        if self._busy:
            raise TurnInProgress("cannot close a session while a turn runs")
        self._closed = True
        self._workspace.close()

    def __enter__(self) -> AgentSession:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- public turn API ------------------------------------------------------------------
    async def run_turn(
        self,
        text: str,
        cancellation: AgentCancellation | None = None,
        on_event: EventConsumer | None = None,
    ) -> AgentTurn:
        return await self._run(_user_message(text), None, cancellation, on_event, False)

    async def run_message(
        self,
        parts: Sequence[Part | str],
        cancellation: AgentCancellation | None = None,
        on_event: EventConsumer | None = None,
    ) -> AgentTurn:
        return await self._run(_user_message(parts), None, cancellation, on_event, False)

    async def run_turn_with_options(
        self,
        text: str,
        options: GenerationOptions,
        cancellation: AgentCancellation | None = None,
        on_event: EventConsumer | None = None,
    ) -> AgentTurn:
        return await self._run(_user_message(text), options, cancellation, on_event, False)

    async def run_message_with_options(
        self,
        parts: Sequence[Part | str],
        options: GenerationOptions,
        cancellation: AgentCancellation | None = None,
        on_event: EventConsumer | None = None,
    ) -> AgentTurn:
        return await self._run(_user_message(parts), options, cancellation, on_event, False)

    async def try_run_turn(
        self,
        text: str,
        cancellation: AgentCancellation | None = None,
        on_event: EventConsumer | None = None,
    ) -> AgentTurn:
        """Like :meth:`run_turn`, for a consumer that may fail: its failure cancels the
        model job, resolves the turn and raises :class:`EventConsumerError`."""
        return await self._run(_user_message(text), None, cancellation, on_event, True)

    async def try_run_message(
        self,
        parts: Sequence[Part | str],
        cancellation: AgentCancellation | None = None,
        on_event: EventConsumer | None = None,
    ) -> AgentTurn:
        return await self._run(_user_message(parts), None, cancellation, on_event, True)

    async def try_run_turn_with_options(
        self,
        text: str,
        options: GenerationOptions,
        cancellation: AgentCancellation | None = None,
        on_event: EventConsumer | None = None,
    ) -> AgentTurn:
        return await self._run(_user_message(text), options, cancellation, on_event, True)

    async def try_run_message_with_options(
        self,
        parts: Sequence[Part | str],
        options: GenerationOptions,
        cancellation: AgentCancellation | None = None,
        on_event: EventConsumer | None = None,
    ) -> AgentTurn:
        return await self._run(_user_message(parts), options, cancellation, on_event, True)

    def next_request(
        self, text: str | None = None, options: GenerationOptions | None = None
    ) -> GenerationRequest:
        """The request the next turn's first model round would send for ``text``: the same
        code path as execution (history, advertised tools, stripping, merged options,
        ceilings), without running anything. Raises CeilingExceeded/CapabilityMissing."""
        core = TurnCore(
            turn_id=new_id(),
            user_message=_user_message(text if text is not None else ""),
            history=self._history,
            history_size=self._history_size,
            tools=self._table,
            enabled=self._enabled,
            history_tools=self._history_tools,
            strip_reasoning=self._strip,
            options=self._merged_options(options),
            ceilings=self._ceilings,
            max_rounds=self.max_rounds,
            history_costs=self._costs,
        )
        request, _events = core.begin_round()
        return request

    # -- the turn -------------------------------------------------------------------------
    def _costs(self) -> list[RequestSize]:
        """Each committed message's size, measured once (only a history over a ceiling
        needs them, to fit requests)."""
        if self._history_costs is None:
            self._history_costs = [measure_message(message) for message in self._history]
        return self._history_costs

    def _merged_options(self, options: GenerationOptions | None) -> GenerationOptions:
        merged = self._options if options is None else self._options.overlay(options)
        if merged.max_tokens is None and self.default_max_tokens is not None:
            # An unbounded call on a model that never stops would run to the context end.
            merged = attrs.evolve(merged, max_tokens=self.default_max_tokens)
        check_options_capabilities(merged, self._client.capabilities)
        return merged

    async def _run(
        self,
        user_message: Message,
        options: GenerationOptions | None,
        cancellation: AgentCancellation | None,
        on_event: EventConsumer | None,
        fallible: bool,
    ) -> AgentTurn:
        if self._closed:
            raise SessionClosed("the session is closed")
        if self._busy:
            raise TurnInProgress("a turn is already running in this session")
        merged = self._merged_options(options)
        cancellation = cancellation if cancellation is not None else AgentCancellation()
        core = TurnCore(
            turn_id=new_id(),
            user_message=user_message,
            history=self._history,
            history_size=self._history_size,
            tools=self._table,
            enabled=self._enabled,
            history_tools=self._history_tools,
            strip_reasoning=self._strip,
            options=merged,
            ceilings=self._ceilings,
            max_rounds=self.max_rounds,
            history_costs=self._costs,
        )
        sink = _EventSink(on_event)
        supervisor = Supervisor.current()
        self._busy = True
        session_node = supervisor.register(ActorKind.SESSION, f"session {self.session_id}", CURRENT)
        session_node.state = ActorState.RUNNING
        tracing.session_started(session_node, self.session_id)
        result: AgentTurn | None = None
        error: BaseException | None = None
        try:
            async with supervisor.open_actor(
                ActorKind.TURN, f"turn {core.turn_id}", parent=session_node
            ) as turn:
                # The turn's own scope is the one AgentCancellation and a failing consumer
                # cancel: the caller's scopes are left alone, so TurnCancelled can be told
                # apart from the caller's own cancellation.
                sink.scope = turn.cancel_scope
                route = _CancelRoute(turn.cancel_scope)
                remove = cancellation.add_callback(route.cancel)
                tracing.turn_started(turn.actor, self.session_id, core, self._client.model)
                try:
                    result = await self._drive(core, turn, sink, route)
                finally:
                    remove()
                    tracing.turn_ended(
                        turn.actor, core, result, sink.failure is not None, cancellation.cancelled
                    )
        except BaseException as exc:
            error = exc
        finally:
            supervisor.close_actor(session_node)
            self._busy = False
        if result is not None and sink.failure is None and error is None:
            self._commit(result.messages, core.size)
            return result
        raise self._failure(core, sink, cancellation, error, fallible)

    async def _drive(
        self,
        core: TurnCore,
        turn: ActorNursery,
        sink: _EventSink,
        route: _CancelRoute,
    ) -> AgentTurn:
        sink.emit_all(core.start())
        while True:
            await trio.lowlevel.checkpoint_if_cancelled()
            request, events = core.begin_round()
            sink.emit_all(events)
            await turn.run(
                self._model_job,
                request,
                core,
                sink,
                kind=ActorKind.MODEL_JOB,
                name=f"round {core.round}",
            )
            plan, events = core.end_round()
            sink.emit_all(events)
            if not plan:
                break
            for item in plan:
                await self._resolve_call(core, turn, sink, item, route)
            core.finish_batch()
        result, events = core.commit()
        sink.emit_all(events)
        return result

    async def _model_job(
        self, ctx: ActorContext, request: GenerationRequest, core: TurnCore, sink: _EventSink
    ) -> None:
        tracing.model_round_started(ctx.actor, self._client.model, request)
        async with self._client.generate(request) as stream:
            async for event in stream:
                sink.emit_all(core.on_model_event(event))
                if isinstance(event, Completed):
                    tracing.model_round_completed(ctx.actor, event.response)

    async def _resolve_call(
        self,
        core: TurnCore,
        turn: ActorNursery,
        sink: _EventSink,
        item: PlannedCall,
        route: _CancelRoute,
    ) -> None:
        call = item.call
        if item.immediate is not None or item.tool is None:
            output = item.immediate or ToolOutput.error(f"unknown tool {call.name!r}")
            sink.emit_all(core.record_result(call.id, output, executed=False))
            return
        entry = item.tool
        try:
            reason = entry.tool.approval_reason(call.arguments)
        except Exception as exc:
            message = _bounded(f"tool {call.name!r} could not describe its action: {exc}")
            sink.emit_all(core.record_result(call.id, ToolOutput.error(message), False))
            return
        approved = False
        if reason is not None:
            # Never ask anyone to approve work for a turn that is already being torn down.
            await trio.lowlevel.checkpoint_if_cancelled()
            sink.emit_all([ApprovalRequested(core.turn_id, call.id, reason)])
            context = ApprovalContext(
                self.session_id,
                core.turn_id,
                call,
                entry.definition,
                reason,
                workspace_root=self._workspace.root,
            )
            decision = await turn.run(
                self._approval_job, context, kind=ActorKind.APPROVAL, name=call.name
            )
            sink.emit_all([ApprovalResolved(core.turn_id, call.id, decision)])
            if isinstance(decision, Deny):
                output = ToolOutput.error(_bounded(f"denied: {decision.reason}"))
                sink.emit_all(core.record_result(call.id, output, executed=False))
                return
            approved = True
        invocation = ToolInvocation(
            call,
            AgentCancellation(),
            core.turn_id,
            self.session_id,
            approved=approved,
            progress_sink=lambda message, done, total: sink.emit_all(
                [ToolProgress(core.turn_id, call.id, message, done, total)]
            ),
        )
        running = turn.call(
            self._tool_job,
            entry,
            invocation,
            core,
            sink,
            kind=ActorKind.TOOL,
            name=call.name,
            policy=_RUNTIME_POLICY[entry.policy],
        )
        route.running = running
        try:
            output = await running.result()
        except trio.Cancelled:
            if running.finished:
                # FINISH_ONCE_STARTED: the one terminal result belongs in the checkpoint.
                finished = running.value if running.error is None else None
                output = _as_output(call.name, finished, running.error)
                sink.emit_all(core.record_result(call.id, output, executed=True))
            raise
        except Exception as exc:
            output = _as_output(call.name, None, exc)
        finally:
            route.running = None
        sink.emit_all(core.record_result(call.id, output, executed=True))
        if route.cancelled:
            # AgentCancellation arrived while the tool ran and was routed to the tool
            # alone; with its one result recorded, the turn now ends as cancelled.
            route.scope.cancel()
            await trio.lowlevel.checkpoint_if_cancelled()

    async def _approval_job(self, ctx: ActorContext, context: ApprovalContext) -> ApprovalDecision:
        try:
            decision = await self._approval.decide(context)
        except Exception as exc:
            raise ApprovalFailed(f"approval policy raised {type(exc).__name__}: {exc}") from exc
        if not isinstance(decision, Approve | Deny):
            raise ApprovalFailed(f"approval policy returned {decision!r}, not Approve or Deny")
        tracing.approval_decided(ctx.actor, context.call, decision)
        return decision

    @staticmethod
    async def _tool_job(
        ctx: ActorContext,
        entry: RegisteredTool,
        invocation: ToolInvocation,
        core: TurnCore,
        sink: _EventSink,
    ) -> ToolOutput:
        tracing.tool_started(ctx.actor, entry.definition, invocation.call)
        await ctx.start_point()
        sink.emit_all(core.tool_started(invocation.call.id))
        ctx.on_cancel_requested(invocation.cancellation.cancel)
        output = _as_output(entry.definition.name, await entry.tool.invoke(invocation), None)
        tracing.tool_returned(ctx.actor, output)
        return output

    # -- endings --------------------------------------------------------------------------
    def _commit(self, messages: Sequence[Message], size: RequestSize | None = None) -> None:
        """Append a committed batch; ``size`` is the history's new total when the turn core
        already measured it (a whole committed turn), so nothing is measured twice."""
        if not messages:
            return
        self._history = self._history + tuple(messages)
        if self._history_costs is not None:
            self._history_costs = self._history_costs + [measure_message(m) for m in messages]
        self._history_size = (
            size if size is not None else self._history_size + measure_messages(messages)
        )
        self._history_tools = self._history_tools | referenced_tools(messages)
        self.turns_committed += 1

    def _failure(
        self,
        core: TurnCore,
        sink: _EventSink,
        cancellation: AgentCancellation,
        error: BaseException | None,
        fallible: bool,
    ) -> BaseException:
        """Resolve the failed turn's history and return the exception to raise."""
        resolution = core.abort()
        self._commit(resolution.messages, core.size)
        if sink.failure is not None:
            if fallible:
                failure: BaseException = EventConsumerError(
                    f"the event consumer raised {type(sink.failure).__name__}: {sink.failure}"
                )
                failure.__cause__ = sink.failure
            else:
                failure = sink.failure
        elif error is None or (isinstance(error, trio.Cancelled) and cancellation.cancelled):
            failure = TurnCancelled("the turn was cancelled")
        elif isinstance(error, trio.Cancelled) or not isinstance(error, Exception):
            # The caller's own scope was cancelled (or the process is exiting).
            sink.emit_all([TurnFailed(core.turn_id, type(error).__name__, resolution.rolled_back)])
            return error
        elif isinstance(error, AgentError):
            failure = error
        else:
            failure = ModelFailed(f"the model failed: {type(error).__name__}: {error}")
            failure.__cause__ = error
        if isinstance(failure, AgentError):
            failure.rolled_back = resolution.rolled_back
            failure.checkpoint = resolution.messages
        sink.emit_all([TurnFailed(core.turn_id, str(failure), resolution.rolled_back)])
        return failure


def _as_output(name: str, value: object, error: BaseException | None) -> ToolOutput:
    if error is not None:
        return ToolOutput.error(_bounded(f"tool {name!r} failed: {type(error).__name__}: {error}"))
    if isinstance(value, ToolOutput):
        return value
    if isinstance(value, str):
        return ToolOutput(value)
    return ToolOutput.error(f"tool {name!r} returned {type(value).__name__}, not a ToolOutput")
