"""The turn actor: drives one :class:`TurnCore` as a tree of runtime actors (model
job, approvals, tools) under the session's actor, and resolves how a turn ends.

The session owns committed history and hands each turn here; nothing in this module
keeps state between turns.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from contextvars import ContextVar
from typing import Any

import attrs
import trio

from emelex._text import shorten
from emelex.agent import _tracing as tracing
from emelex.agent._approval import ApprovalContext, ApprovalDecision, ApprovalPolicy, Approve, Deny
from emelex.agent._ceilings import RequestSize
from emelex.agent._errors import (
    AgentError,
    ApprovalFailed,
    EventConsumerError,
    ModelFailed,
    ToolJournalFailed,
    TurnCancelled,
)
from emelex.agent._events import (
    AgentEvent,
    ApprovalRequested,
    ApprovalResolved,
    ToolProgress,
    TurnFailed,
)
from emelex.agent._hook_runner import WITHHELD_CANCELLED, HookRunner, capped
from emelex.agent._hooks import Hook, HookFailed, HookModel
from emelex.agent._progress import ProgressJournal, TurnProgress
from emelex.agent._tool_table import RegisteredTool
from emelex.agent._turn_core import AgentTurn, PlannedCall, TurnCore, TurnPhase
from emelex.agent._video import without_video
from emelex.model import Client, Completed, GenerationRequest, Message, Response
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
from emelex.tools import (
    ArgumentConversionError,
    RetryWithFeedback,
    ToolCancellationPolicy,
    ToolInvocation,
    ToolOutput,
)

EventConsumer = Callable[[AgentEvent], object]

_CURRENT_TURN: ContextVar[tuple[str, str] | None] = ContextVar("emelex_turn", default=None)


def current_turn() -> tuple[str, str] | None:
    """``(session_id, turn_id)`` of the turn the calling task belongs to (its model job,
    approvals and tools), or None outside a turn. A model wrapper or tool can use it to
    say which turn a call belongs to."""
    return _CURRENT_TURN.get()


#: Awaited with (turn id, checkpoint) before each tool call may start; see
#: :meth:`emelex.agent.AgentSessionBuilder.tool_journal`.
ToolJournal = Callable[[str, tuple[Message, ...]], Awaitable[None]]

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


@attrs.frozen
class TurnOutcome:
    """How :meth:`TurnDriver.drive` ended: a result, or an error and/or a consumer
    failure (``sink.failure``) for :func:`turn_failure` to resolve."""

    result: AgentTurn | None
    sink: _EventSink
    error: BaseException | None

    @property
    def succeeded(self) -> bool:
        return self.result is not None and self.sink.failure is None and self.error is None


class TurnDriver:
    """Runs a session's turns: one turn actor per turn, below the session's actor."""

    __slots__ = (
        "_approval",
        "_client",
        "_hooks",
        "_journal",
        "_progress",
        "_session_id",
        "_workspace_root",
    )

    def __init__(
        self,
        *,
        session_id: str,
        client: Client,
        approval: ApprovalPolicy,
        workspace_root: str,
        journal: ToolJournal | None = None,
        hooks: Sequence[Hook] = (),
        progress: ProgressJournal | None = None,
    ) -> None:
        self._session_id = session_id
        self._hooks = HookRunner(hooks, session_id)
        self._client = client
        self._approval = approval
        self._workspace_root = workspace_root
        self._journal = journal
        self._progress = progress

    async def drive(
        self,
        supervisor: Supervisor,
        core: TurnCore,
        cancellation: AgentCancellation,
        on_event: EventConsumer | None,
        resumed: Sequence[PlannedCall] = (),
    ) -> TurnOutcome:
        """Run ``core`` to its end (a restored core first resolves ``resumed``, the open
        calls of its batch). Never raises: every error is in the outcome (the caller
        commits or resolves history first, then raises)."""
        sink = _EventSink(on_event)
        session_node = supervisor.register(
            ActorKind.SESSION, f"session {self._session_id}", CURRENT
        )
        session_node.state = ActorState.RUNNING
        tracing.session_started(session_node, self._session_id)
        result: AgentTurn | None = None
        error: BaseException | None = None
        # Tasks of this turn (model job, approvals, tools) inherit it at spawn.
        token = _CURRENT_TURN.set((self._session_id, core.turn_id))
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
                tracing.turn_started(turn.actor, self._session_id, core, self._client.model)
                try:
                    result = await self._drive(core, turn, sink, route, resumed)
                finally:
                    remove()
                    tracing.turn_ended(
                        turn.actor, core, result, sink.failure is not None, cancellation.cancelled
                    )
        except BaseException as exc:
            error = exc
        finally:
            _CURRENT_TURN.reset(token)
            supervisor.close_actor(session_node)
        return TurnOutcome(result, sink, error)

    async def _drive(
        self,
        core: TurnCore,
        turn: ActorNursery,
        sink: _EventSink,
        route: _CancelRoute,
        resumed: Sequence[PlannedCall],
    ) -> AgentTurn | None:
        """The committed turn, or ``None`` when an AgentCancellation routed to a running
        tool ended it (the caller resolves it as cancelled)."""
        sink.emit_all(core.start())
        hooks, model = self._hooks, self._hook_model(turn)
        if core.phase is TurnPhase.TOOLS:
            # A restored turn: its batch's open calls come before the next model round.
            for item in resumed:
                if await self._resolve_call(core, turn, sink, item, route, model):
                    return None
            core.finish_batch()
            await self._write_progress(core, None, "the next round")
        while True:
            await trio.lowlevel.checkpoint_if_cancelled()
            request, events = core.begin_round()
            sink.emit_all(events)
            if hooks.has("before_model_request"):
                request = await hooks.before_request(core, request, sink.emit_all, model)
            await turn.run(
                self._model_job,
                request,
                core,
                sink,
                kind=ActorKind.MODEL_JOB,
                name=f"round {core.round}",
            )
            if hooks.has("after_model_response"):
                await hooks.after_response(core, model)
            plan, events = core.end_round()
            sink.emit_all(events)
            if not plan:
                break
            for item in plan:
                if await self._resolve_call(core, turn, sink, item, route, model):
                    return None  # cancelled by AgentCancellation: no result
            core.finish_batch()
            # The batch's real results, so a lost process resumes with them (not with
            # "interrupted" for calls that returned) at the next round.
            await self._write_progress(core, None, "the next round")
        if hooks.has("before_commit"):
            await hooks.before_commit(core, model)
        result, events = core.commit()
        sink.emit_all(events)
        return result

    def _hook_model(self, turn: ActorNursery) -> HookModel:
        """A hook's separate model request, run as a model job of this turn."""

        async def generate(request: GenerationRequest) -> Response:
            return await turn.run(
                self._hook_job, capped(request), kind=ActorKind.MODEL_JOB, name="hook request"
            )

        return generate

    async def _hook_job(self, ctx: ActorContext, request: GenerationRequest) -> Response:
        async with self._client.generate(request) as stream:
            async for event in stream:
                if isinstance(event, Completed):
                    return event.response
        raise HookFailed("a hook's model request ended without a response")

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
        model: HookModel,
    ) -> bool:
        """Resolve one planned call; True when the turn must end as cancelled now."""
        if item.immediate is not None or item.tool is None:
            output = item.immediate or ToolOutput.error(f"unknown tool {item.call.name!r}")
            sink.emit_all(core.record_result(item.call.id, output, executed=False))
            return False
        if self._hooks.has("before_tool_call"):
            # Before approval: the policy decides on the arguments that will run.
            await trio.lowlevel.checkpoint_if_cancelled()
            rewritten = await self._hooks.before_call(core, item, sink.emit_all, model)
            if rewritten is None:
                return False
            item = rewritten
        approved = await self._approve(core, turn, sink, item)
        if approved is None:
            return False
        return await self._run_call(core, turn, sink, item, route, model, approved)

    async def _approve(
        self, core: TurnCore, turn: ActorNursery, sink: _EventSink, item: PlannedCall
    ) -> bool | None:
        """Whether the call was approved (False: it needs no approval), or None when it
        got its result here (a correction, a failing rule, a denial)."""
        call = item.call
        entry = item.tool
        assert entry is not None
        try:
            reason = entry.tool.approval_reason(call.arguments)
        except (ArgumentConversionError, RetryWithFeedback) as exc:
            # The model can fix this one: arguments that do not convert, or a rule's
            # explicit request for a correction.
            output = ToolOutput.feedback(_bounded(f"{call.name}: {exc}"))
            sink.emit_all(core.record_result(call.id, output, False))
            return None
        except Exception as exc:
            message = _bounded(f"tool {call.name!r} could not describe its action: {exc}")
            sink.emit_all(core.record_result(call.id, ToolOutput.error(message), False))
            return None
        if reason is not None:
            # Never ask anyone to approve work for a turn that is already being torn down.
            await trio.lowlevel.checkpoint_if_cancelled()
            await self._write_progress(core, None, call.name)
            sink.emit_all([ApprovalRequested(core.turn_id, call.id, reason)])
            context = ApprovalContext(
                self._session_id,
                core.turn_id,
                call,
                entry.definition,
                reason,
                workspace_root=self._workspace_root,
            )
            decision = await turn.run(
                self._approval_job, context, kind=ActorKind.APPROVAL, name=call.name
            )
            sink.emit_all([ApprovalResolved(core.turn_id, call.id, decision)])
            if isinstance(decision, Deny):
                output = ToolOutput.error(_bounded(f"denied: {decision.reason}"))
                sink.emit_all(core.record_result(call.id, output, executed=False))
                return None
            return True
        return False

    async def _run_call(
        self,
        core: TurnCore,
        turn: ActorNursery,
        sink: _EventSink,
        item: PlannedCall,
        route: _CancelRoute,
        model: HookModel,
        approved: bool,
    ) -> bool:
        """Run an approved (or ungated) call and record its one result; True when the
        turn must end as cancelled now."""
        call = item.call
        entry = item.tool
        assert entry is not None
        invocation = ToolInvocation(
            call,
            AgentCancellation(),
            core.turn_id,
            self._session_id,
            approved=approved,
            validated=True,  # by the turn core, against the tool table's schema
            progress_sink=lambda message, done, total: sink.emit_all(
                [ToolProgress(core.turn_id, call.id, message, done, total)]
            ),
        )
        await self._write_progress(core, call.id, call.name)
        if self._journal is not None:
            # Written down before the tool may run: a host that loses the process now
            # settles the turn as this checkpoint (a tool may have run), never rolls back.
            try:
                await self._journal(core.turn_id, core.checkpoint_if_lost(call.id))
            except Exception as exc:
                raise ToolJournalFailed(
                    f"the tool journal raised {type(exc).__name__} before {call.name!r}: {exc}"
                ) from exc
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
                if self._hooks.has("after_tool_result"):
                    output = ToolOutput.error(WITHHELD_CANCELLED)
                sink.emit_all(core.record_result(call.id, output, executed=True))
            raise
        except Exception as exc:
            output = _as_output(call.name, None, exc)
        finally:
            route.running = None
        if self._hooks.has("after_tool_result"):
            if route.cancelled:
                # The turn ends now: no hook may hold it up, and no unreviewed result
                # may enter the checkpoint.
                output = ToolOutput.error(WITHHELD_CANCELLED)
            else:
                output = await self._hooks.after_result(core, item, output, sink.emit_all, model)
        sink.emit_all(core.record_result(call.id, output, executed=True))
        # AgentCancellation arrived while the tool ran and was routed to the tool alone;
        # with its one result recorded, the turn now ends as cancelled. Nothing else of
        # the turn runs, so it returns rather than cancel its own scope: no Cancelled to
        # raise through every frame and no extra pass of the scheduler (about a third
        # of each turn's teardown when 100 turns are cancelled at once).
        return route.cancelled

    async def _write_progress(self, core: TurnCore, starting: str | None, name: str) -> None:
        """Hand the progress journal where the turn stands, before an approval is asked
        (``starting`` None), before the call ``starting`` may run, or after a batch: a
        host that loses the process now continues from exactly here."""
        if self._progress is None:
            return
        between_rounds = core.phase is not TurnPhase.TOOLS
        if not between_rounds:
            messages, unstarted = core.checkpoint_if_lost(starting), core.unstarted(starting)
        else:  # every batch so far is complete
            messages, unstarted = core.messages, frozenset()
        progress = TurnProgress(
            core.turn_id,
            messages,
            unstarted,
            core.round,
            core.tools_may_have_run or starting is not None,
            between_rounds,
        )
        try:
            await self._progress(progress)
        except Exception as exc:
            raise ToolJournalFailed(
                f"the progress journal raised {type(exc).__name__} before {name!r}: {exc}"
            ) from exc

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


def turn_failure(
    core: TurnCore,
    outcome: TurnOutcome,
    cancellation: AgentCancellation,
    commit: Callable[[Sequence[Message], RequestSize | None], None],
) -> BaseException:
    """Resolve the failed turn's history (``commit`` appends the rolled-back or
    checkpointed messages) and return the exception to raise."""
    sink, error = outcome.sink, outcome.error
    resolution = core.abort()
    commit(resolution.messages, core.size)
    failure: BaseException
    if sink.failure is not None:
        failure = EventConsumerError(
            f"the event consumer raised {type(sink.failure).__name__}: {sink.failure}"
        )
        failure.__cause__ = sink.failure
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
    if isinstance(error, RetryWithFeedback):
        return ToolOutput.feedback(_bounded(str(error)))
    if error is not None:
        return ToolOutput.error(_bounded(f"tool {name!r} failed: {type(error).__name__}: {error}"))
    if isinstance(value, ToolOutput):
        return without_video(name, value)
    if isinstance(value, str):
        return ToolOutput(value)
    return ToolOutput.error(f"tool {name!r} returned {type(value).__name__}, not a ToolOutput")
