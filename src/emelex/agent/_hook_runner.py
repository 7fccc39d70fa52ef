"""Awaits a turn's lifecycle hooks and hands what they return to the turn core.

The core decides (validates rewrites, records them); this module only runs the hooks,
in the turn's own task and cancel scope, so cancelling the turn cancels a hook at its
next checkpoint. A hook's exception becomes :class:`HookFailed`; ``FailTurn`` and a
raised :class:`HookRefused` end the turn by the usual rollback/checkpoint rule.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any

import attrs

from emelex.agent._events import AgentEvent
from emelex.agent._hooks import (
    Hook,
    HookContext,
    HookFailed,
    HookModel,
    HookPoint,
    HookRefused,
    RefuseCall,
    ReplaceArguments,
    ReplaceRequest,
    ReplaceResult,
    check_decision,
)
from emelex.agent._turn_core import PlannedCall, TurnCore
from emelex.model import GenerationRequest
from emelex.tools import ToolOutput

Emit = Callable[[Iterable[AgentEvent]], None]

#: Most tokens a hook's own model request generates when it sets no ``max_tokens``.
HOOK_MAX_TOKENS = 256

WITHHELD_CANCELLED = (
    "result withheld: the turn was cancelled before its after_tool_result hooks could review it"
)


class HookRunner:
    """The hooks of one session, each point's list computed once."""

    __slots__ = ("_points", "_session_id")

    def __init__(self, hooks: Sequence[Hook], session_id: str) -> None:
        for hook in hooks:
            if not isinstance(hook, Hook):
                raise TypeError(f"{hook!r} is not a Hook (subclass emelex.agent.Hook)")
        self._session_id = session_id
        points: tuple[HookPoint, ...] = (
            "before_model_request",
            "after_model_response",
            "before_tool_call",
            "after_tool_result",
            "before_commit",
        )
        self._points = {p: tuple(h for h in hooks if h.runs_at(p)) for p in points}

    def has(self, point: HookPoint) -> bool:
        return bool(self._points[point])

    def _context(self, core: TurnCore, model: HookModel | None) -> HookContext:
        return HookContext(self._session_id, core.turn_id, core.round, model=model)

    @staticmethod
    async def _ask(hook: Hook, point: HookPoint, call: Awaitable[object]) -> object:
        try:
            decision = await call
        except HookRefused:
            raise
        except Exception as exc:
            raise HookFailed(
                f"hook {hook.name!r} raised {type(exc).__name__} in {point}: {exc}"
            ) from exc
        return check_decision(hook, point, decision)

    async def before_request(
        self, core: TurnCore, request: GenerationRequest, emit: Emit, model: HookModel | None
    ) -> GenerationRequest:
        ctx = self._context(core, model)
        for hook in self._points["before_model_request"]:
            decision = await self._ask(
                hook, "before_model_request", hook.before_model_request(ctx, request)
            )
            if isinstance(decision, ReplaceRequest):
                request, events = core.replace_request(request, hook.name, decision.request)
                emit(events)
        return request

    async def after_response(self, core: TurnCore, model: HookModel | None) -> None:
        response = core.response
        assert response is not None
        ctx = self._context(core, model)
        for hook in self._points["after_model_response"]:
            await self._ask(hook, "after_model_response", hook.after_model_response(ctx, response))

    async def before_call(
        self, core: TurnCore, item: PlannedCall, emit: Emit, model: HookModel | None
    ) -> PlannedCall | None:
        """The call to approve and run (rewritten, maybe), or None when a hook refused
        it (its error result is recorded)."""
        assert item.tool is not None
        ctx = self._context(core, model)
        for hook in self._points["before_tool_call"]:
            decision = await self._ask(
                hook,
                "before_tool_call",
                hook.before_tool_call(ctx, item.call, item.tool.definition),
            )
            if isinstance(decision, RefuseCall):
                emit(core.refuse_call(item.call.id, hook.name, decision.reason))
                return None
            if isinstance(decision, ReplaceArguments):
                item, events = core.replace_arguments(
                    item.call.id, hook.name, dict(decision.arguments)
                )
                emit(events)
        return item

    async def after_result(
        self, core: TurnCore, item: PlannedCall, output: ToolOutput, emit: Emit, model: Any
    ) -> ToolOutput:
        """The result the model gets. When a hook fails or stops the turn here, the
        tool's result is withheld (recorded as an error naming why) and the error
        raised: a result no hook finished reviewing never enters history."""
        ctx = self._context(core, model)
        for hook in self._points["after_tool_result"]:
            try:
                decision = await self._ask(
                    hook, "after_tool_result", hook.after_tool_result(ctx, item.call, output)
                )
            except (HookRefused, HookFailed) as exc:
                withheld = ToolOutput.error(f"result withheld: {exc}")
                emit(core.record_result(item.call.id, withheld, executed=True))
                raise
            if isinstance(decision, ReplaceResult):
                output, events = core.replace_result(
                    item.call.id, hook.name, output, decision.output
                )
                emit(events)
        return output

    async def before_commit(self, core: TurnCore, model: HookModel | None) -> None:
        response = core.response
        assert response is not None
        ctx = self._context(core, model)
        for hook in self._points["before_commit"]:
            await self._ask(hook, "before_commit", hook.before_commit(ctx, response, core.messages))


def capped(request: GenerationRequest) -> GenerationRequest:
    """``request`` with ``max_tokens`` set when it has none: a hook's own request is
    bounded like every model call the harness makes."""
    if request.options.max_tokens is not None:
        return request
    return attrs.evolve(request, options=attrs.evolve(request.options, max_tokens=HOOK_MAX_TOKENS))


__all__ = ["HOOK_MAX_TOKENS", "WITHHELD_CANCELLED", "HookRunner", "capped"]
