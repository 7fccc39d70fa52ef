"""The turn workflow: the pure turn core, driven deterministically by Temporal.

Workflow code here only decides: the turn core (no I/O, no clock, no randomness, no
Trio) plans every step, and each model round and each tool call is an activity whose
result Temporal records. Replaying the history feeds the core the same results, so it
makes the same decisions; ids come from the workflow's seeded random and clock.

Approvals wait in the workflow for the ``respond`` Update; ``pending_approvals`` is a
query. Cancelling the workflow is the turn's AgentCancellation.
"""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

if TYPE_CHECKING:
    from emelex.agent._turn_core import PlannedCall

with workflow.unsafe.imports_passed_through():
    import uuid

    import attrs

    from emelex.agent import (
        AgentAuthoritySnapshot,
        AgentError,
        AgentTurn,
        Approve,
        Deny,
        ToolTable,
        TurnCancelled,
        TurnCore,
        TurnPhase,
        measure_messages,
        referenced_tools,
    )
    from emelex.model import Completed, Message, ReasoningDelta, TextDelta, ToolDefinition
    from emelex.temporal._errors import AuthorityDrift, TemporalError, TokenLimitExceeded
    from emelex.temporal._spec import (
        AgentDescription,
        ApprovalAnswer,
        CallVerdict,
        ModelRoundInput,
        ModelRoundResult,
        PendingApproval,
        ToolCallInput,
        TurnInput,
        TurnResult,
        decode_message,
        decode_messages,
        decode_options,
        decode_output,
        decode_response,
        encode_call,
        encode_messages,
        encode_request,
        encode_turn,
        from_data,
        to_data,
    )
    from emelex.tools import ToolCancellationPolicy, ToolOutput

WORKFLOW = "emelex.turn"
DESCRIBE = "emelex.describe"
MODEL_ROUND = "emelex.model_round"
TOOL_CALL = "emelex.tool_call"
RESPOND = "respond"
PENDING = "pending_approvals"

#: Error types a worker reports for refusals that no retry can fix.
DRIFT = "AuthorityDrift"

LOST = (
    "lost: the worker running this call stopped before it returned ({cause}); "
    "its effects are unknown"
)
DEFAULT_DENIAL = "no approver is configured (the default denies every call)"


@attrs.frozen
class DeclaredTool:
    """A tool as the authority snapshot declares it: all the turn core needs to plan and
    validate calls. The workflow never invokes it (its worker runs the real tool)."""

    definition: ToolDefinition
    cancellation_policy: ToolCancellationPolicy
    max_retries: int
    authority_identity: dict[str, str]

    def approval_reason(self, arguments: Any) -> str | None:
        return None

    async def invoke(self, invocation: Any) -> ToolOutput:
        raise RuntimeError("a declared tool runs on a worker, never in the workflow")


def tool_table(agent: AgentDescription) -> ToolTable:
    """The worker's tool table rebuilt from the pinned snapshot, in declaration order
    (the order the model sees), with the same clamped schemas."""
    snapshot = AgentAuthoritySnapshot.from_json(agent.authority)
    retries = dict(agent.tool_retries)
    declared = {tool.name: tool for tool in snapshot.tools}
    tools = [
        DeclaredTool(
            ToolDefinition(name, declared[name].description, json.loads(declared[name].parameters)),
            ToolCancellationPolicy(declared[name].cancellation_policy),
            retries[name],
            dict(declared[name].identity),
        )
        for name in agent.tool_order
    ]
    return ToolTable(tools, max_argument_bytes=snapshot.ceilings.max_tool_argument_bytes)


def _id_maker() -> Any:
    """UUIDv7 strings from workflow time and the workflow's seeded random: the same ids
    on every replay."""
    random = workflow.random()
    millis = int(workflow.now().timestamp() * 1000) & ((1 << 48) - 1)

    def make() -> str:
        bits = random.getrandbits(74)
        value = (
            (millis << 80)
            | (0x7 << 76)
            | ((bits >> 62) << 64)
            | (0b10 << 62)
            | (bits & ((1 << 62) - 1))
        )
        return str(uuid.UUID(int=value))

    return make


def build_core(spec: TurnInput, agent: AgentDescription) -> TurnCore:
    history = decode_messages(agent.history) + decode_messages(spec.history)
    return TurnCore(
        turn_id=spec.turn_id,
        user_message=decode_message(spec.user_message),
        history=history,
        history_size=measure_messages(history),
        tools=tool_table(agent),
        enabled=frozenset(agent.enabled),
        history_tools=frozenset(referenced_tools(history)),
        strip_reasoning=agent.strip_reasoning,
        options=_options(spec, agent),
        ceilings=AgentAuthoritySnapshot.from_json(agent.authority).ceilings,
        max_rounds=agent.max_rounds,
        max_retries=agent.max_retries,
        make_id=_id_maker(),
    )


def _options(spec: TurnInput, agent: AgentDescription) -> Any:
    """The worker session's options, overlaid with the turn's own (as in process)."""
    options = decode_options(agent.options)
    return options if spec.options is None else options.overlay(decode_options(spec.options))


@workflow.defn(name=WORKFLOW)
class TurnWorkflow:
    """One turn of a session; its result is a :class:`TurnResult` (as data)."""

    def __init__(self) -> None:
        self._pending: dict[str, PendingApproval] = {}
        self._answers: dict[str, ApprovalAnswer] = {}

    @workflow.run
    async def run(self, data: Any) -> Any:
        spec = from_data(data, TurnInput)
        agent = spec.agent if spec.agent is not None else await self._describe(spec)
        core: TurnCore | None = None
        try:
            core = build_core(spec, agent)
            turn = await self._drive(spec, agent, core)
        except asyncio.CancelledError:
            return _ended(agent, core, "cancelled", TurnCancelled("the turn was cancelled"))
        except (AgentError, TemporalError) as exc:
            return _ended(agent, core, "failed", exc)
        except ActivityError as exc:
            return _ended(agent, core, "failed", _activity_failure(exc))
        return to_data(TurnResult("committed", agent, turn=encode_turn(turn)))

    # -- approvals: an Update answers, a query lists ---------------------------------------
    @workflow.query(name=PENDING)
    def pending_approvals(self) -> list[Any]:
        return [to_data(item) for item in self._pending.values()]

    @workflow.update(name=RESPOND)
    def respond(self, data: dict[str, Any]) -> None:
        answer = from_data(data, ApprovalAnswer)
        self._answers[answer.call_id] = answer

    @respond.validator
    def _check_respond(self, data: dict[str, Any]) -> None:
        # Rejected here, an answer leaves no trace in history and the caller hears why.
        answer = from_data(data, ApprovalAnswer)
        if answer.call_id not in self._pending or answer.call_id in self._answers:
            raise ValueError(f"call {answer.call_id!r} is not waiting for approval")

    # -- the turn --------------------------------------------------------------------------
    async def _describe(self, spec: TurnInput) -> AgentDescription:
        data = await workflow.execute_activity(
            DESCRIBE,
            start_to_close_timeout=timedelta(seconds=spec.timeouts.model),
            retry_policy=RetryPolicy(maximum_attempts=spec.timeouts.model_attempts),
        )
        return from_data(data, AgentDescription)

    async def _drive(self, spec: TurnInput, agent: AgentDescription, core: TurnCore) -> AgentTurn:
        core.start()
        while True:
            used = core.usage.input_tokens + core.usage.output_tokens
            if spec.max_turn_tokens is not None and used >= spec.max_turn_tokens:
                raise TokenLimitExceeded("max_turn_tokens", spec.max_turn_tokens, used)
            request, _ = core.begin_round()  # ceilings and the round limit, before any work
            result = await self._model_round(spec, agent, core, request)
            if result.answer:
                core.on_model_event(TextDelta(result.answer))
            if result.reasoning:
                core.on_model_event(ReasoningDelta(result.reasoning))
            core.on_model_event(Completed(decode_response(result.response)))
            plan, _ = core.end_round()
            if not plan:
                break
            # One verdict per proposed call; a refused round plans a prefix of them.
            verdicts = result.verdicts
            for index, item in enumerate(plan):
                verdict = verdicts[index] if index < len(verdicts) else CallVerdict("run")
                await self._resolve(spec, agent, core, item, verdict)
            core.finish_batch()
        turn, _ = core.commit()
        return turn

    async def _model_round(
        self, spec: TurnInput, agent: AgentDescription, core: TurnCore, request: Any
    ) -> ModelRoundResult:
        timeouts = spec.timeouts
        data = await workflow.execute_activity(
            MODEL_ROUND,
            to_data(
                ModelRoundInput(
                    spec.session_id, spec.turn_id, core.round, agent.digest, encode_request(request)
                )
            ),
            start_to_close_timeout=timedelta(seconds=timeouts.model),
            heartbeat_timeout=timedelta(seconds=timeouts.heartbeat),
            # The worker marks every failure but a transport error non-retryable.
            retry_policy=RetryPolicy(maximum_attempts=timeouts.model_attempts),
        )
        return from_data(data, ModelRoundResult)

    async def _resolve(
        self,
        spec: TurnInput,
        agent: AgentDescription,
        core: TurnCore,
        item: PlannedCall,
        verdict: CallVerdict,
    ) -> None:
        call = item.call
        if item.immediate is not None or item.tool is None:
            output = item.immediate or ToolOutput.error(f"unknown tool {call.name!r}")
            core.record_result(call.id, output, executed=False)
            return
        if verdict.kind in ("feedback", "error"):
            made = ToolOutput.feedback if verdict.kind == "feedback" else ToolOutput.error
            core.record_result(call.id, made(verdict.reason), executed=False)
            return
        approved = False
        if verdict.kind == "ask":
            decision = await self._approval(spec, item, verdict.reason)
            if isinstance(decision, Deny):
                core.record_result(call.id, ToolOutput.error(f"denied: {decision.reason}"), False)
                return
            approved = True
        core.tool_started(call.id)  # from here on a host effect may exist
        output = await self._tool_call(spec, agent, core, item, approved)
        core.record_result(call.id, output, executed=True)

    async def _approval(self, spec: TurnInput, item: PlannedCall, reason: str) -> Approve | Deny:
        if spec.approvals == "deny":
            return Deny(DEFAULT_DENIAL)
        call = item.call
        self._pending[call.id] = PendingApproval(
            call.id, call.name, call.arguments, reason, workflow.now().isoformat()
        )
        timeout = spec.approval_timeout
        try:
            await workflow.wait_condition(
                lambda: call.id in self._answers,
                timeout=None if timeout is None else timedelta(seconds=timeout),
            )
        except TimeoutError:
            return Deny(f"no answer within {timeout:g} s")
        finally:
            self._pending.pop(call.id, None)
        answer = self._answers[call.id]
        return Approve() if answer.approve else Deny(answer.reason or "denied by approver")

    async def _tool_call(
        self,
        spec: TurnInput,
        agent: AgentDescription,
        core: TurnCore,
        item: PlannedCall,
        approved: bool,
    ) -> ToolOutput:
        """Run one call as an activity, by its cancellation policy (see docs/temporal.md)."""
        assert item.tool is not None
        call = item.call
        finish = item.tool.policy is ToolCancellationPolicy.FINISH_ONCE_STARTED
        timeouts = spec.timeouts
        # A host effect must never repeat: one attempt unless the tool says it may.
        attempts = timeouts.idempotent_tool_attempts if call.name in agent.idempotent else 1
        handle = workflow.start_activity(
            TOOL_CALL,
            to_data(
                ToolCallInput(
                    spec.session_id, spec.turn_id, agent.digest, encode_call(call), approved
                )
            ),
            start_to_close_timeout=timedelta(seconds=timeouts.tool),
            heartbeat_timeout=timedelta(seconds=timeouts.heartbeat),
            retry_policy=RetryPolicy(maximum_attempts=attempts),
            cancellation_type=(
                workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED
                if finish
                else workflow.ActivityCancellationType.TRY_CANCEL
            ),
        )
        try:
            return decode_output(await asyncio.shield(handle))
        except asyncio.CancelledError:
            handle.cancel()
            if not finish:
                raise  # interrupted: the checkpoint says its effects are unknown
            # Finish once started: the tool hears of the cancellation and its one
            # result belongs in the checkpoint.
            try:
                output = decode_output(await handle)
            except ActivityError as exc:
                output = _lost(exc)
            core.record_result(call.id, output, executed=True)
            raise
        except ActivityError as exc:
            return _lost(exc)


def _lost(exc: ActivityError) -> ToolOutput:
    cause = exc.cause
    if isinstance(cause, ApplicationError) and cause.type == DRIFT:
        raise AuthorityDrift(cause.message)
    return ToolOutput.error(LOST.format(cause=type(cause).__name__ if cause else "unknown"))


def _activity_failure(exc: ActivityError) -> Exception:
    cause = exc.cause
    if isinstance(cause, ApplicationError):
        if cause.type == DRIFT:
            return AuthorityDrift(cause.message)
        return _Reported(cause.type or "ModelFailed", cause.message)
    return _Reported("ModelFailed", f"{type(cause).__name__}: {cause}" if cause else str(exc))


class _Reported(Exception):
    """A failure a worker reported, by its type name."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def _ended(agent: AgentDescription, core: TurnCore | None, status: Any, exc: Exception) -> Any:
    """A failed turn's result: the turn core's rule decides what history keeps."""
    rolled_back, messages = True, tuple[Message, ...]()
    if core is not None and core.phase is not TurnPhase.ABORTED:
        resolution = core.abort()
        rolled_back, messages = resolution.rolled_back, resolution.messages
    kind = exc.kind if isinstance(exc, _Reported) else type(exc).__name__
    return to_data(
        TurnResult(
            status,
            agent,
            error_type=kind,
            message=str(exc),
            rolled_back=rolled_back,
            messages=encode_messages(messages),
        )
    )
