"""Typed structured output: an answer that becomes a Python value.

``output_type`` (attrs class, dataclass, ``TypedDict``, ``Literal``, enum, list, ...)
becomes a JSON Schema with the builder ``@tool`` uses, and the answer is converted with
the converter ``@tool`` arguments use (cattrs).

How a turn reaches its typed answer (see ``docs/app/structured-output.md``):

* without enabled tools, the turn itself asks for the answer with ``output_schema`` and
  ``ToolChoice.NONE`` (on the native backend the grammar makes it valid);
* with enabled tools, the turn first runs as usual (the model may call tools); if its
  final text already is a valid value, that is the output; otherwise one *answer turn*
  follows, asking for the answer with ``output_schema`` and ``ToolChoice.NONE`` (the
  native backend cannot combine the answer grammar with the tool-call grammar);
* an answer that still does not parse, validate or convert (a server without a JSON
  schema response format, a scripted model) gets a retry turn whose user message
  names the problem, ``retries`` times (default :data:`DEFAULT_OUTPUT_RETRIES`);
  then :class:`~emelex.agent.OutputValidationError`.

Every turn involved is an ordinary committed turn, so history stays structurally valid.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any, Generic, TypeVar

import attrs
import jsonschema
import jsonschema.exceptions
import jsonschema.validators

from emelex._text import shorten
from emelex.agent import AgentTurn, OutputValidationError
from emelex.app._errors import InvalidOutputType
from emelex.model import GenerationOptions, Message, ToolChoice, Usage
from emelex.tools import (
    UnsupportedAnnotation,
    conversion_error,
    converter,
    register_typeddict,
    schema_for,
)

T = TypeVar("T")

#: Retry turns after an invalid structured answer, unless configured otherwise.
DEFAULT_OUTPUT_RETRIES = 1
#: Longest validation problem told to the model (and kept on the error).
MAX_OUTPUT_PROBLEM_CHARS = 600
#: Longest answer text that is parsed at all.
MAX_OUTPUT_CHARS = 1_000_000

_FENCE_LANGUAGE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")


def unfence(body: str) -> str:
    """``body`` without a surrounding Markdown code fence (```` ```json ... ``` ````), or
    ``body`` itself. Plain string operations: the text is the model's, and a regex with
    two adjacent variable runs backtracks quadratically on it."""
    if not (body.startswith("```") and body.endswith("```")) or len(body) < 7:
        return body
    newline = body.find("\n", 3)
    if newline < 0:
        return body
    header = body[3:newline]
    if not set(header.rstrip()) <= _FENCE_LANGUAGE:
        return body
    return body[newline + 1 : -3]


@attrs.frozen
class OutputSpec:
    """An output type, its JSON Schema and how an answer text becomes a value."""

    output_type: Any
    schema: dict[str, Any] = attrs.field(hash=False)
    _validator: Any = attrs.field(eq=False, hash=False, repr=False, alias="validator")

    @classmethod
    def of(cls, output_type: Any) -> OutputSpec:
        """Raises :class:`InvalidOutputType` for a type without a schema mapping."""
        if output_type is None:
            raise InvalidOutputType("output_type must be a type, not None")
        try:
            schema = schema_for(output_type, on_typeddict=register_typeddict)
        except UnsupportedAnnotation as exc:
            raise InvalidOutputType(f"output_type {output_type!r} is unsupported: {exc}") from exc
        validator = jsonschema.validators.validator_for(
            schema, default=jsonschema.Draft202012Validator
        )(schema)
        return cls(output_type, schema, validator=validator)

    def options(self, *, has_tools: bool) -> GenerationOptions:
        """Options of a round that must answer with this schema. With tools offered the
        round must not call one (``ToolChoice.NONE``); without, no tool choice is sent
        (OpenAI-compatible servers refuse a tool choice without tools)."""
        if has_tools:
            return GenerationOptions(tool_choice=ToolChoice.NONE, output_schema=self.schema)
        return GenerationOptions(output_schema=self.schema)

    def parse(self, text: str) -> tuple[Any, str | None]:
        """``(value, None)``, or ``(None, problem)`` with a model-readable problem."""
        if len(text) > MAX_OUTPUT_CHARS:
            return None, f"the answer is longer than {MAX_OUTPUT_CHARS} characters"
        body = text.strip()
        body = unfence(body).strip()
        try:
            data = json.loads(body)
        except ValueError as exc:
            return None, f"the answer is not JSON ({exc})"
        error = jsonschema.exceptions.best_match(self._validator.iter_errors(data))
        if error is not None:
            where = "/".join(str(step) for step in error.absolute_path) or "(root)"
            return None, shorten(f"at {where}: {error.message}", MAX_OUTPUT_PROBLEM_CHARS)
        try:
            return converter.structure(data, self.output_type), None
        except Exception as exc:
            return None, shorten(conversion_error(exc), MAX_OUTPUT_PROBLEM_CHARS)

    def answer_request(self) -> str:
        return (
            "Now give your final answer as one JSON value matching this JSON Schema, "
            f"with no other text:\n{json.dumps(self.schema, sort_keys=True)}"
        )

    def retry_request(self, problem: str) -> str:
        return (
            f"Your answer is not valid: {problem}\nReply again with only one JSON value "
            f"matching this JSON Schema:\n{json.dumps(self.schema, sort_keys=True)}"
        )


def check_retries(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidOutputType(f"output_retries must be a non-negative integer, got {value!r}")
    return value


@attrs.frozen
class TypedTurn(AgentTurn, Generic[T]):
    """A turn whose answer was converted to ``output_type``: :attr:`output` is the value.

    When an answer turn or retries were needed, ``turns`` holds every committed turn in
    order; ``turn_id`` and ``response`` are the last one's, ``messages`` all of their
    messages, ``usage`` and ``rounds`` their sums.
    """

    output: T
    turns: tuple[AgentTurn, ...]


def _combined(turns: list[AgentTurn], value: Any) -> TypedTurn[Any]:
    last = turns[-1]
    usage = Usage()
    for turn in turns:
        usage = usage + turn.usage
    return TypedTurn(
        turn_id=last.turn_id,
        response=last.response,
        messages=tuple(m for turn in turns for m in turn.messages),
        usage=usage,
        rounds=sum(turn.rounds for turn in turns),
        hooks=tuple(record for turn in turns for record in turn.hooks),
        output=value,
        turns=tuple(turns),
    )


RunTurn = Callable[[str, GenerationOptions], Awaitable[AgentTurn]]
"""Runs one committed turn for a user text with the given options."""


async def run_typed_turn(
    run: RunTurn,
    text: str,
    spec: OutputSpec,
    *,
    options: GenerationOptions | None,
    tools_enabled: bool,
    has_tools: bool,
    retries: int = DEFAULT_OUTPUT_RETRIES,
) -> TypedTurn[Any]:
    """Run turns until the answer converts to ``spec``'s type (see the module docs).

    ``tools_enabled``: the model may call tools now (the first turn then runs freely);
    ``has_tools``: the session declares tools at all (structured rounds then forbid
    calls)."""
    base = options if options is not None else GenerationOptions()
    structured = base.overlay(spec.options(has_tools=has_tools))
    turns: list[AgentTurn] = []
    attempts = 0
    if tools_enabled:
        turn = await run(text, base)
        turns.append(turn)
        value, problem = _check(spec, turn)
        if problem is None:
            return _combined(turns, value)
        request = spec.answer_request()
    else:
        request = text
    while True:
        attempts += 1
        turn = await run(request, structured)
        turns.append(turn)
        value, problem = _check(spec, turn)
        if problem is None:
            return _combined(turns, value)
        if attempts > retries:
            error = OutputValidationError(
                f"the answer did not match the output type after {attempts} "
                f"attempt{'s' if attempts != 1 else ''}: {problem}",
                answer=shorten(turn.response.text, MAX_OUTPUT_PROBLEM_CHARS),
                problem=problem,
                attempts=attempts,
            )
            error.rolled_back = False
            error.checkpoint = _messages(turns)
            raise error
        request = spec.retry_request(problem)


def _check(spec: OutputSpec, turn: AgentTurn) -> tuple[Any, str | None]:
    value, problem = spec.parse(turn.response.text)
    if problem is not None and turn.response.finish_reason == "length":
        # A grammar keeps the answer valid only until the token limit cuts it off.
        problem = f"the answer was cut off by the token limit (max_tokens); {problem}"
    return value, problem


def _messages(turns: list[AgentTurn]) -> tuple[Message, ...]:
    return tuple(m for turn in turns for m in turn.messages)


__all__ = ["DEFAULT_OUTPUT_RETRIES", "OutputSpec", "TypedTurn", "run_typed_turn"]
