"""Lifecycle hooks: application code that observes a turn and may change or stop it.

A :class:`Hook` overrides any of five async methods. Each point has its own powers,
given by what it may return (``None`` always means "observe only"):

=========================  ==================================================
``before_model_request``   ``ReplaceRequest`` (re-checked against the ceilings), ``FailTurn``
``after_model_response``   ``FailTurn`` (its deltas were already delivered: no rewrite)
``before_tool_call``       ``ReplaceArguments`` (re-validated against the tool's schema,
                           then approved as rewritten), ``RefuseCall``, ``FailTurn``
``after_tool_result``      ``ReplaceResult``, ``FailTurn``
``before_commit``          ``FailTurn``
=========================  ==================================================

Hooks run in the turn's task, inside its cancel scope: cancelling the turn cancels a
hook at its next checkpoint, and a hook never runs for a turn already being torn down.
Deciding what a returned value means is the turn core's job (pure); awaiting the hook
is the driver's.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Literal, TypeAlias

import attrs

from emelex.agent._errors import GuardrailTripped, HookFailed, HookRefused
from emelex.model import GenerationRequest, Message, Response, ToolCall, ToolDefinition
from emelex.tools import ToolOutput

HookPoint: TypeAlias = Literal[
    "before_model_request",
    "after_model_response",
    "before_tool_call",
    "after_tool_result",
    "before_commit",
]


@attrs.frozen
class ReplaceRequest:
    """Send ``request`` to the model instead (``before_model_request``)."""

    request: GenerationRequest


def _copy(value: Mapping[str, Any]) -> dict[str, Any]:
    return dict(value)


@attrs.frozen
class ReplaceArguments:
    """Run the call with ``arguments`` instead (``before_tool_call``)."""

    arguments: Mapping[str, Any] = attrs.field(converter=_copy)


@attrs.frozen
class ReplaceResult:
    """Give the model ``output`` instead of the tool's result (``after_tool_result``)."""

    output: ToolOutput


@attrs.frozen
class RefuseCall:
    """Do not run the call: the model gets an error result saying ``reason``."""

    reason: str


@attrs.frozen
class FailTurn:
    """End the turn with :class:`HookRefused` (rolled back if no tool may have run,
    checkpointed otherwise)."""

    reason: str


RequestDecision: TypeAlias = ReplaceRequest | FailTurn | None
ResponseDecision: TypeAlias = FailTurn | None
CallDecision: TypeAlias = ReplaceArguments | RefuseCall | FailTurn | None
ResultDecision: TypeAlias = ReplaceResult | FailTurn | None
CommitDecision: TypeAlias = FailTurn | None

#: Runs one separate model request for a hook (see :meth:`HookContext.generate`).
HookModel = Callable[[GenerationRequest], Awaitable[Response]]


@attrs.frozen
class HookContext:
    """Where a hook runs: the session, the turn and its current round.

    :meth:`generate` sends a separate request (never part of the conversation) to the
    session's model, as a model job of the turn: cancelled with it, bounded by
    ``max_tokens`` and counted where the session's model calls are counted (an
    application budget included)."""

    session_id: str
    turn_id: str
    round: int
    _model: HookModel | None = attrs.field(default=None, alias="model", repr=False)

    async def generate(self, request: GenerationRequest) -> Response:
        """The model's response to ``request``. Checkpoints; raises
        :class:`HookFailed` when the turn offers hooks no model, and what the model
        raises; cancelled with the turn."""
        if self._model is None:
            raise HookFailed("this turn gives hooks no model to call")
        return await self._model(request)


class Hook:
    """Base class of lifecycle hooks: override the points you need.

    Every method is async and may checkpoint; an exception fails the turn with
    :class:`HookFailed` (a :class:`HookRefused` raised on purpose passes unchanged).
    ``name`` identifies the hook in records and errors (its class name by default)."""

    @property
    def name(self) -> str:
        return type(self).__name__

    def runs_at(self, point: HookPoint) -> bool:
        """Whether this hook runs at ``point``: by default, when its class overrides
        the method. The session asks once, when it is built; a point no hook runs at
        costs nothing (and a result no hook reviews is never withheld)."""
        return overrides(self, point)

    async def before_model_request(
        self, ctx: HookContext, request: GenerationRequest
    ) -> RequestDecision:
        return None

    async def after_model_response(self, ctx: HookContext, response: Response) -> ResponseDecision:
        return None

    async def before_tool_call(
        self, ctx: HookContext, call: ToolCall, tool: ToolDefinition
    ) -> CallDecision:
        return None

    async def after_tool_result(
        self, ctx: HookContext, call: ToolCall, output: ToolOutput
    ) -> ResultDecision:
        return None

    async def before_commit(
        self, ctx: HookContext, response: Response, messages: Sequence[Message]
    ) -> CommitDecision:
        return None


def overrides(hook: Hook, point: HookPoint) -> bool:
    """Whether ``hook`` implements ``point`` (the base class only observes), so the
    driver does not await a no-op for every call of every hook."""
    method = getattr(type(hook), point, None)
    return method is not None and method is not getattr(Hook, point)


@attrs.frozen
class HookRecord:
    """A change a hook made, kept on the turn (:attr:`AgentTurn.hooks`) so a replay
    shows what the model actually saw. Committed messages already carry the final
    arguments and results; a replaced request is kept here whole (``after``). Of a
    replaced tool result, ``before`` is only a digest (see ``result_digest``)."""

    point: HookPoint
    hook: str
    round: int
    call_id: str | None
    before: Any
    after: Any


_ALLOWED: dict[str, tuple[type, ...]] = {
    "before_model_request": (ReplaceRequest, FailTurn),
    "after_model_response": (FailTurn,),
    "before_tool_call": (ReplaceArguments, RefuseCall, FailTurn),
    "after_tool_result": (ReplaceResult, FailTurn),
    "before_commit": (FailTurn,),
}


def check_decision(hook: Hook, point: HookPoint, decision: object) -> object:
    """``decision`` when ``point`` allows it; raises HookFailed otherwise, and
    HookRefused for ``FailTurn``."""
    if decision is None:
        return None
    if not isinstance(decision, _ALLOWED[point]):
        allowed = ", ".join(t.__name__ for t in _ALLOWED[point])
        raise HookFailed(
            f"hook {hook.name!r} returned {decision!r} from {point}; it may return None or "
            f"{allowed}"
        )
    if isinstance(decision, FailTurn):
        raise HookRefused(
            f"hook {hook.name!r} stopped the turn at {point}: {decision.reason}",
            hook=hook.name,
            point=point,
            reason=decision.reason,
        )
    return decision


__all__ = [
    "CallDecision",
    "CommitDecision",
    "FailTurn",
    "GuardrailTripped",
    "Hook",
    "HookContext",
    "HookFailed",
    "HookModel",
    "HookPoint",
    "HookRecord",
    "HookRefused",
    "RefuseCall",
    "ReplaceArguments",
    "ReplaceRequest",
    "ReplaceResult",
    "RequestDecision",
    "ResponseDecision",
    "ResultDecision",
    "check_decision",
    "overrides",
]
