"""Session budgets: how much context one request may fill, and how much a session may spend.

**Context budget.** :func:`fit_request` is a message filter applied to every request a
session sends to its model (by :class:`BudgetedModel`) and, through the same function,
to what :meth:`Session.inspect` shows. It never touches committed history: it returns a
smaller copy of the request. When the estimate is over budget it shrinks the request
in three deterministic stages, stopping as soon as it fits:

1. shorten older tool results, oldest first, to their first and last bytes with a
   marker saying how much was left out (the latest round's results are never touched);
2. drop whole earlier turns, oldest first (a user message with everything up to the
   next user message);
3. drop earlier rounds of the current turn, oldest first (an assistant message with
   all of its tool results).

System messages, the current user message and the latest round (the last assistant
message with tool calls and its results) are always kept, and a tool call is never
separated from its result. If the request still does not fit,
:class:`ContextBudgetExceeded` is raised. Because the latest round is never shortened,
the worker presets also cap the built-in file and shell tools' output at
:attr:`ContextBudget.tool_result_bytes`.

The estimate is deliberately simple and documented rather than model-specific: per
message, :data:`MESSAGE_OVERHEAD_TOKENS` plus the UTF-8 bytes of its text, reasoning and
tool calls (name and compact JSON arguments) divided by ``bytes_per_token`` (rounded
up), plus :data:`MEDIA_PART_TOKENS` per image, audio or video part; tool declarations
count as their compact JSON divided the same way. Four bytes per token is close for
English text with common tokenizers; lower it for scripts that tokenize densely.

**Usage budget.** :class:`UsageBudget` caps the tokens (input plus output, as the model
reports them in each terminal response) and the model calls of one session. It is
checked before each model call: the call that crosses the token limit completes, the
next one raises :class:`UsageBudgetExhausted`. A call whose stream fails or is cancelled
counts as a call but adds no tokens (the model never reported any). Estimated usage
(``Usage.estimated``: the backend counted what its provider did not report) counts like
reported usage, so a token budget holds on servers that report none.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from types import TracebackType
from typing import Any, Final

import attrs
import trio

from emelex.agent import fit_rounds
from emelex.app._errors import ContextBudgetExceeded, InvalidBudget, UsageBudgetExhausted
from emelex.model import (
    AgentModel,
    Capabilities,
    Completed,
    GenerationEvent,
    GenerationRequest,
    Message,
    TextPart,
    ToolDefinition,
    Usage,
)
from emelex.tools import FunctionTool

#: Default context budget of the worker presets, in estimated tokens.
DEFAULT_CONTEXT_TOKENS: Final = 32_768
#: Estimated tokens of a message's framing (role markers, separators).
MESSAGE_OVERHEAD_TOKENS: Final = 4
#: Estimated tokens of one image, audio or video part (its encoded size says little).
MEDIA_PART_TOKENS: Final = 1_024
#: Smallest cap on one built-in tool result under a context budget.
MIN_TOOL_RESULT_BYTES: Final = 4 * 1024
#: Largest accepted context budget, in estimated tokens.
MAX_CONTEXT_TOKENS: Final = 10_000_000
#: Largest accepted token and model-call limits of a usage budget.
MAX_USAGE_TOKENS: Final = 10**12
MAX_MODEL_CALLS: Final = 10**9

# A result at most this much longer than keep_result_bytes is left alone: shortening it
# would save little, and a result that was already shortened stays as it is.
_SHORTEN_SLACK: Final = 256


def _int_in(low: int, high: int) -> Any:
    def check(_instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        if type(value) is not int or not low <= value <= high:
            raise InvalidBudget(
                f"{attribute.name} must be an integer from {low:,} to {high:,}, got {value!r}"
            )

    return check


def _optional_int_in(low: int, high: int) -> Any:
    check = _int_in(low, high)

    def optional(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        if value is not None:
            check(instance, attribute, value)

    return optional


def _utf8_len(text: str) -> int:
    # surrogatepass: a lone surrogate from a sloppy backend must not crash the estimate.
    return len(text.encode("utf-8", "surrogatepass"))


def _compact_json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)


@attrs.frozen
class ContextBudget:
    """How much one request may hold, in estimated tokens (see the module docs).

    ``max_tokens`` is the budget for the prompt (messages and tool declarations);
    leave room below the model's context size for its answer. ``bytes_per_token``
    (1-16, default 4) is the estimate's ratio. ``keep_result_bytes`` (64 B-1 MiB,
    default 2 KiB) is how much of an older tool result survives shortening: two thirds
    from its start, one third from its end. Raises :class:`InvalidBudget`.
    """

    max_tokens: int = attrs.field(
        default=DEFAULT_CONTEXT_TOKENS, validator=_int_in(1, MAX_CONTEXT_TOKENS)
    )
    bytes_per_token: int = attrs.field(default=4, validator=_int_in(1, 16))
    keep_result_bytes: int = attrs.field(default=2_048, validator=_int_in(64, 1024 * 1024))

    @property
    def tool_result_bytes(self) -> int:
        """The cap the worker presets put on one ``read_file`` or ``grep`` result and on
        the shell's output: a quarter of the budget in bytes, at least 4 KiB, so that
        the latest round (which is never shortened) usually fits."""
        return max(MIN_TOOL_RESULT_BYTES, self.max_tokens * self.bytes_per_token // 4)

    def _tokens(self, size: int) -> int:
        return -(-size // self.bytes_per_token)

    def message_tokens(self, message: Message) -> int:
        """The estimated tokens of one message."""
        size = 0
        media = 0
        for part in message.content:
            if isinstance(part, TextPart):
                size += _utf8_len(part.text)
            else:
                media += 1
        if message.reasoning:
            size += _utf8_len(message.reasoning)
        for call in message.tool_calls:
            size += _utf8_len(call.name) + _utf8_len(_compact_json(call.arguments))
        return MESSAGE_OVERHEAD_TOKENS + self._tokens(size) + media * MEDIA_PART_TOKENS

    def tools_tokens(self, tools: Sequence[ToolDefinition]) -> int:
        """The estimated tokens of the tool declarations (fixed: never shortened)."""
        return sum(
            MESSAGE_OVERHEAD_TOKENS
            + self._tokens(
                _utf8_len(
                    _compact_json(
                        {
                            "name": tool.name,
                            "description": tool.description,
                            "parameters": tool.parameters,
                        }
                    )
                )
            )
            for tool in tools
        )

    def request_tokens(self, request: GenerationRequest) -> int:
        """The estimated tokens of a whole request."""
        return self.tools_tokens(request.tools) + sum(
            self.message_tokens(message) for message in request.messages
        )


# -- the message filter (pure) -----------------------------------------------------------


def _shorten(message: Message, budget: ContextBudget) -> Message | None:
    """The tool result cut to its head and tail, or None when cutting gains nothing."""
    text = message.text
    media = sum(1 for part in message.content if not isinstance(part, TextPart))
    data = text.encode("utf-8", "surrogatepass")
    keep = budget.keep_result_bytes
    long = len(data) > keep + _SHORTEN_SLACK
    if not long and not media:
        return None
    left_out: list[str] = []
    if long:
        head_size = keep * 2 // 3
        # "ignore" drops a multi-byte character cut in half at either edge.
        head = data[:head_size].decode("utf-8", "ignore")
        tail = data[len(data) - (keep - head_size) :].decode("utf-8", "ignore")
        elided = len(data) - _utf8_len(head) - _utf8_len(tail)
        left_out.append(f"{elided:,} bytes")
    else:
        head, tail = text, ""
    if media:
        left_out.append(f"{media} media part{'s' if media != 1 else ''}")
    marker = (
        f"\n[... {' and '.join(left_out)} of this older tool result left out "
        "to fit the context budget ...]\n"
    )
    return Message("tool", head + marker + tail, tool_call_id=message.tool_call_id)


def fit_messages(
    messages: Sequence[Message], budget: ContextBudget, *, reserved_tokens: int = 0
) -> tuple[Message, ...]:
    """``messages`` made to fit ``budget`` (with ``reserved_tokens`` already spent, e.g.
    on tool declarations): unchanged (the same tuple) when they fit, else shrunk as the
    module docs describe (the harness's own fitting under its resource ceilings uses
    the same algorithm, :func:`emelex.agent.fit_rounds`). Pure and
    deterministic. Raises :class:`ContextBudgetExceeded` when even the protected
    messages do not fit."""
    original = tuple(messages)
    costs = [budget.message_tokens(message) for message in original]
    limit = budget.max_tokens

    def shorten(message: Message, cost: int) -> tuple[Message, int] | None:
        shorter = _shorten(message, budget)
        if shorter is None:
            return None
        new_cost = budget.message_tokens(shorter)
        return None if new_cost >= cost else (shorter, new_cost)

    fitted = fit_rounds(
        original, costs, reserved_tokens + sum(costs), lambda total: total <= limit, shorten
    )
    if fitted.fits:
        return fitted.messages
    total = fitted.total
    raise ContextBudgetExceeded(
        "context budget (estimated tokens)",
        limit,
        total,
        f"the request needs about {total:,} estimated tokens even after shortening older "
        f"tool results and dropping earlier exchanges, over the context budget of "
        f"{limit:,}: the system prompt, the tool declarations, the current user message "
        "and the latest tool round must fit on their own (raise the budget or shorten them)",
    )


def fit_request(request: GenerationRequest, budget: ContextBudget) -> GenerationRequest:
    """``request`` with its messages made to fit ``budget`` (tool declarations count but
    are never changed): the same object when it already fits. See :func:`fit_messages`."""
    messages = fit_messages(
        request.messages, budget, reserved_tokens=budget.tools_tokens(request.tools)
    )
    if messages is request.messages:
        return request
    return attrs.evolve(request, messages=messages)


# -- the usage budget --------------------------------------------------------------------


@attrs.frozen
class UsageBudget:
    """What one session may spend: ``max_total_tokens`` (input plus output tokens as the
    model reports them) and ``max_model_calls``; ``None`` means unlimited (usage is
    still counted). Raises :class:`InvalidBudget`."""

    max_total_tokens: int | None = attrs.field(
        default=None, validator=_optional_int_in(1, MAX_USAGE_TOKENS)
    )
    max_model_calls: int | None = attrs.field(
        default=None, validator=_optional_int_in(1, MAX_MODEL_CALLS)
    )


def _remaining(limit: int | None, used: int) -> int | None:
    return None if limit is None else max(0, limit - used)


@attrs.frozen
class BudgetUsage:
    """A snapshot of what a session spent (``Session.usage``, the ``check_budget`` tool).

    ``usage`` sums the terminal usage of the session's model calls; ``model_calls``
    counts the calls the budget let through; ``last_request_tokens`` is the estimate of
    the last request sent, after fitting (None before the first call or without a
    context budget).
    """

    usage: Usage = attrs.field(factory=Usage)
    model_calls: int = 0
    limits: UsageBudget = attrs.field(factory=UsageBudget)
    context_budget: ContextBudget | None = None
    last_request_tokens: int | None = None

    @property
    def total_tokens(self) -> int:
        return self.usage.total_tokens

    @property
    def remaining_tokens(self) -> int | None:
        """Tokens left before the token limit (None: no limit)."""
        return _remaining(self.limits.max_total_tokens, self.total_tokens)

    @property
    def remaining_model_calls(self) -> int | None:
        """Model calls left (None: no limit)."""
        return _remaining(self.limits.max_model_calls, self.model_calls)

    def exhausted(self) -> UsageBudgetExhausted | None:
        """The error the next model call would raise, or None if it may run."""
        limits = self.limits
        if limits.max_total_tokens is not None and self.total_tokens >= limits.max_total_tokens:
            return UsageBudgetExhausted(
                "token budget",
                limits.max_total_tokens,
                self.total_tokens,
                f"the session used {self.total_tokens:,} tokens of its budget of "
                f"{limits.max_total_tokens:,}; no further model call is made",
            )
        if limits.max_model_calls is not None and self.model_calls >= limits.max_model_calls:
            return UsageBudgetExhausted(
                "model-call budget",
                limits.max_model_calls,
                self.model_calls,
                f"the session made {self.model_calls:,} model calls, its whole budget; "
                "no further model call is made",
            )
        return None

    def describe(self) -> str:
        """The plain-text report the ``check_budget`` tool gives the model."""
        usage = self.usage
        tokens = (
            f"Tokens used: {usage.total_tokens:,} (input {usage.input_tokens:,}, "
            f"output {usage.output_tokens:,}{'; estimated' if usage.estimated else ''})"
        )
        if self.limits.max_total_tokens is None:
            tokens += "; no token limit."
        else:
            tokens += f"; remaining: {self.remaining_tokens:,} of {self.limits.max_total_tokens:,}."
        calls = f"Model calls made: {self.model_calls:,}"
        if self.limits.max_model_calls is None:
            calls += "; no call limit."
        else:
            calls += (
                f"; remaining: {self.remaining_model_calls:,} of {self.limits.max_model_calls:,}."
            )
        lines = ["Budget", tokens, calls]
        if self.context_budget is not None:
            size = (
                "unknown"
                if self.last_request_tokens is None
                else f"about {self.last_request_tokens:,}"
            )
            lines.append(
                f"Context: the last request held {size} of {self.context_budget.max_tokens:,} "
                "estimated tokens; beyond that, older tool results are shortened and the "
                "earliest exchanges left out."
            )
        return "\n".join(lines)


class BudgetMeter:
    """One session's budget state: the limits, what was spent, and the filter.

    Mutable on purpose (it counts); :meth:`snapshot` gives a frozen view.
    """

    def __init__(self, limits: UsageBudget | None, context: ContextBudget | None) -> None:
        self._limits = limits if limits is not None else UsageBudget()
        self._context = context
        self._usage = Usage()
        self._calls = 0
        self._last_request_tokens: int | None = None

    def snapshot(self) -> BudgetUsage:
        return BudgetUsage(
            self._usage, self._calls, self._limits, self._context, self._last_request_tokens
        )

    def fit(self, request: GenerationRequest) -> GenerationRequest:
        """The request as the model will get it (also what ``inspect()`` shows)."""
        if self._context is None:
            return request
        return fit_request(request, self._context)

    def admit(self, request: GenerationRequest) -> GenerationRequest:
        """Check the usage budget, fit the request and count the call."""
        refused = self.snapshot().exhausted()
        if refused is not None:
            raise refused
        fitted = self.fit(request)
        self._calls += 1
        if self._context is not None:
            self._last_request_tokens = self._context.request_tokens(fitted)
        return fitted

    def record(self, usage: Usage) -> None:
        self._usage = self._usage + usage


# -- the model wrapper -------------------------------------------------------------------


class BudgetedModel:
    """An AgentModel that applies a session's budgets to every call: it refuses a call
    when the usage budget is spent, sends the fitted request, and counts the terminal
    usage."""

    def __init__(self, inner: AgentModel, meter: BudgetMeter) -> None:
        self._inner = inner
        self._meter = meter

    @property
    def wrapped(self) -> AgentModel:
        """The model this one wraps (tracing reports the wrapped model's identity)."""
        return self._inner

    @property
    def capabilities(self) -> Capabilities:
        return self._inner.capabilities

    def generate(self, request: GenerationRequest) -> _BudgetedGeneration:
        # Nothing happens until the context is entered (the AgentModel contract).
        return _BudgetedGeneration(self._inner, request, self._meter)


class _MeteredStream:
    def __init__(self, stream: AsyncIterator[GenerationEvent], meter: BudgetMeter) -> None:
        self._stream = stream
        self._meter = meter

    def __aiter__(self) -> _MeteredStream:
        return self

    async def __anext__(self) -> GenerationEvent:
        event = await self._stream.__anext__()
        if isinstance(event, Completed):
            self._meter.record(event.response.usage)
        return event


class _BudgetedGeneration(AbstractAsyncContextManager[AsyncIterator[GenerationEvent]]):
    def __init__(self, inner: AgentModel, request: GenerationRequest, meter: BudgetMeter) -> None:
        self._inner = inner
        self._request = request
        self._meter = meter
        self._entered: AbstractAsyncContextManager[AsyncIterator[GenerationEvent]] | None = None

    async def __aenter__(self) -> AsyncIterator[GenerationEvent]:
        try:
            fitted = self._meter.admit(self._request)
        except (UsageBudgetExhausted, ContextBudgetExceeded):
            await trio.lowlevel.checkpoint()
            raise
        generation = self._inner.generate(fitted)
        stream = await generation.__aenter__()
        self._entered = generation
        return _MeteredStream(stream, self._meter)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool | None:
        if self._entered is None:
            return None
        return await self._entered.__aexit__(exc_type, exc, traceback)


# -- the check_budget tool ---------------------------------------------------------------

_NO_ARGUMENTS: Final[Mapping[str, Any]] = {
    "type": "object",
    "properties": {},
    "additionalProperties": False,
}


def check_budget_tool(meter: BudgetMeter) -> FunctionTool:
    """``check_budget``: the session's spent and remaining tokens and model calls, and
    the size of the last request against the context budget. No host effects."""

    async def report(arguments: Mapping[str, Any]) -> str:
        return meter.snapshot().describe()

    return FunctionTool(
        "check_budget",
        "Report the tokens and model calls this session has used and what remains of "
        "its budget, and how full the context is. Takes no arguments.",
        dict(_NO_ARGUMENTS),
        report,
    )


BUDGET_SECTION: Final = (
    "## Budget\n"
    "Your context is limited: results of older tool calls may be shortened and the "
    "earliest exchanges left out of what you see. Call check_budget to see how many "
    "tokens and model calls you have used and how many remain, and plan your work to fit."
)


__all__ = [
    "BUDGET_SECTION",
    "DEFAULT_CONTEXT_TOKENS",
    "MEDIA_PART_TOKENS",
    "MESSAGE_OVERHEAD_TOKENS",
    "BudgetMeter",
    "BudgetUsage",
    "BudgetedModel",
    "check_budget_tool",
    "ContextBudget",
    "UsageBudget",
    "fit_messages",
    "fit_request",
]
