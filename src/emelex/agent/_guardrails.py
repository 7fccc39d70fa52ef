"""Guardrails: checks on a turn's input, output and tool calls, as one hook.

A guardrail returns a :class:`GuardrailResult`; a tripped one stops the turn with
:class:`GuardrailTripped`, by the usual rule: rolled back when no tool may have run
(an input guardrail always: it checks before the first model request), checkpointed
otherwise. A tool guardrail that trips on a result withholds that result from the
checkpoint. Guardrails run where hooks run (in the turn's scope, cancelled with it)
and may ask the model a separate question through ``ctx.generate``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Protocol, runtime_checkable

import attrs

from emelex.agent._errors import GuardrailTripped
from emelex.agent._hooks import Hook, HookContext, HookPoint
from emelex.model import (
    GenerationOptions,
    GenerationRequest,
    Message,
    Response,
    ToolCall,
    ToolDefinition,
)
from emelex.tools import ToolOutput


@attrs.frozen
class GuardrailResult:
    """What a check found: ``tripwire`` stops the turn; ``reason`` says why and
    ``info`` carries anything the application wants back (on the error)."""

    tripwire: bool
    reason: str = ""
    info: Any = None

    @classmethod
    def ok(cls, info: Any = None) -> GuardrailResult:
        return cls(False, "", info)

    @classmethod
    def trip(cls, reason: str, info: Any = None) -> GuardrailResult:
        return cls(True, reason, info)


@runtime_checkable
class InputGuardrail(Protocol):
    """Checks the turn's user message before the first model request."""

    async def check_input(self, ctx: HookContext, message: Message) -> GuardrailResult: ...


@runtime_checkable
class OutputGuardrail(Protocol):
    """Checks the final answer before the turn commits."""

    async def check_output(self, ctx: HookContext, response: Response) -> GuardrailResult: ...


@runtime_checkable
class ToolGuardrail(Protocol):
    """Checks each call before approval (``check_call``) and its result before the
    model sees it (``check_result``)."""

    async def check_call(
        self, ctx: HookContext, call: ToolCall, tool: ToolDefinition
    ) -> GuardrailResult: ...

    async def check_result(
        self, ctx: HookContext, call: ToolCall, output: ToolOutput
    ) -> GuardrailResult: ...


def guardrail_name(guardrail: object) -> str:
    name = getattr(guardrail, "name", None)
    return name if isinstance(name, str) and name else type(guardrail).__name__


def _tripped(guardrail: object, kind: str, point: str, result: object) -> None:
    if not isinstance(result, GuardrailResult):
        raise TypeError(
            f"guardrail {guardrail_name(guardrail)!r} returned {result!r}, not a GuardrailResult"
        )
    if result.tripwire:
        raise GuardrailTripped(guardrail_name(guardrail), kind, point, result.reason, result.info)


class Guardrails(Hook):
    """The hook that runs input, output and tool guardrails, each kind in order."""

    def __init__(
        self,
        *,
        input: Iterable[InputGuardrail] = (),
        output: Iterable[OutputGuardrail] = (),
        tool: Iterable[ToolGuardrail] = (),
    ) -> None:
        self.input = tuple(input)
        self.output = tuple(output)
        self.tool = tuple(tool)
        for kinds, protocol in (
            (self.input, InputGuardrail),
            (self.output, OutputGuardrail),
            (self.tool, ToolGuardrail),
        ):
            for guardrail in kinds:
                if not isinstance(guardrail, protocol):
                    raise TypeError(f"{guardrail!r} is not an {protocol.__name__}")

    def runs_at(self, point: HookPoint) -> bool:
        kinds = {
            "before_model_request": self.input,
            "before_tool_call": self.tool,
            "after_tool_result": self.tool,
            "before_commit": self.output,
        }
        return bool(kinds.get(point))

    async def before_model_request(self, ctx: HookContext, request: GenerationRequest) -> None:
        if ctx.round != 1 or not self.input:
            return
        message = next(m for m in reversed(request.messages) if m.role == "user")
        for guardrail in self.input:
            result = await guardrail.check_input(ctx, message)
            _tripped(guardrail, "input", "before_model_request", result)

    async def before_tool_call(
        self, ctx: HookContext, call: ToolCall, tool: ToolDefinition
    ) -> None:
        for guardrail in self.tool:
            _tripped(
                guardrail, "tool", "before_tool_call", await guardrail.check_call(ctx, call, tool)
            )

    async def after_tool_result(self, ctx: HookContext, call: ToolCall, output: ToolOutput) -> None:
        for guardrail in self.tool:
            result = await guardrail.check_result(ctx, call, output)
            _tripped(guardrail, "tool", "after_tool_result", result)

    async def before_commit(
        self, ctx: HookContext, response: Response, messages: Sequence[Message]
    ) -> None:
        for guardrail in self.output:
            result = await guardrail.check_output(ctx, response)
            _tripped(guardrail, "output", "before_commit", result)


@attrs.frozen
class ModelJudge:
    """An input and output guardrail that asks the session's model (a separate request,
    bounded by ``max_tokens``, cancelled with the turn and counted like every model
    call): ``instructions`` then the text; it trips when the answer contains
    ``trip_word``."""

    instructions: str
    trip_word: str = "BLOCK"
    max_tokens: int = 16
    name: str = "model-judge"

    async def _judge(self, ctx: HookContext, text: str) -> GuardrailResult:
        request = GenerationRequest(
            (Message("system", self.instructions), Message("user", text)),
            options=GenerationOptions(max_tokens=self.max_tokens),
        )
        verdict = await ctx.generate(request)
        if self.trip_word in verdict.text:
            return GuardrailResult.trip(f"the judge answered {verdict.text.strip()!r}", verdict)
        return GuardrailResult.ok(verdict)

    async def check_input(self, ctx: HookContext, message: Message) -> GuardrailResult:
        return await self._judge(ctx, message.text)

    async def check_output(self, ctx: HookContext, response: Response) -> GuardrailResult:
        return await self._judge(ctx, response.text)


__all__ = [
    "GuardrailResult",
    "Guardrails",
    "InputGuardrail",
    "ModelJudge",
    "OutputGuardrail",
    "ToolGuardrail",
    "guardrail_name",
]
