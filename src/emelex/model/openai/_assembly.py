"""From chat completion chunks to generation events and the terminal response.

Only choice 0 is read (a request asks for one). Per chunk:

* ``delta.content`` becomes a :class:`TextDelta`; ``delta.reasoning_content`` (or, when
  that is absent, ``delta.reasoning``) a :class:`ReasoningDelta`; empty strings are
  skipped;
* ``delta.tool_calls`` pieces are collected by their ``index``: the first piece with an
  ``id`` names the call, ``function.name`` is set once (a repeated identical name is
  ignored, a different one is appended), ``function.arguments`` text is concatenated;
* ``finish_reason`` and ``usage`` (the last chunk under ``stream_options.include_usage``)
  are remembered; a chunk carrying ``error`` raises :class:`StreamError`.

:meth:`ChunkAssembler.response` then builds the :class:`Response`: its text and
reasoning are exactly the concatenated deltas, tool calls are ordered by index and their
arguments parsed. A call without a name raises :class:`MalformedToolCall`. A call whose
arguments are not a JSON object keeps its place in the response with ``arguments={}``
and ``arguments_error`` saying why (with an excerpt of the text): the agent harness
answers it with a correction the model can act on, instead of failing the turn. Empty
arguments mean ``{}``. A call without an id gets ``call_<index>``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Final, TypeVar

from emelex.model._events import FinishReason, ReasoningDelta, Response, TextDelta, Usage
from emelex.model._messages import ToolCall
from emelex.model.openai._errors import MalformedChunk, MalformedToolCall, StreamError

_FINISH: Final[dict[str, FinishReason]] = {
    "stop": "stop",
    "length": "length",
    "tool_calls": "tool_calls",
    "function_call": "tool_calls",
    "content_filter": "error",
}
_EXCERPT: Final = 500
#: Start of unparsable arguments quoted back to the model.
_EXCERPT_FOR_MODEL: Final = 200


def _excerpt(value: Any) -> str:
    text = value if isinstance(value, str) else repr(value)
    return text[:_EXCERPT]


def _error_text(error: Any) -> str:
    if isinstance(error, dict):
        message = error.get("message")
        if isinstance(message, str) and message:
            return message[:_EXCERPT]
    if isinstance(error, str) and error:
        return error[:_EXCERPT]
    return _excerpt(json.dumps(error, ensure_ascii=False, default=repr))


class _CallBuilder:
    __slots__ = ("arguments", "id", "index", "name", "parsed")

    def __init__(self, index: int) -> None:
        self.index = index
        self.id: str | None = None
        self.name = ""
        self.arguments: list[str] = []
        self.parsed: dict[str, Any] | None = None

    def build(self) -> ToolCall:
        if not self.name:
            raise MalformedToolCall(
                f"tool call {self.index} has no function name",
                name=None,
                call_id=self.id,
                excerpt="".join(self.arguments)[:_EXCERPT],
            )
        call_id = self.id or f"call_{self.index}"
        if self.parsed is not None:
            return ToolCall(call_id, self.name, self.parsed)
        text = "".join(self.arguments)
        if not text.strip():
            return ToolCall(call_id, self.name, {})
        try:
            arguments = json.loads(text)
        except (json.JSONDecodeError, RecursionError) as exc:
            why = f"not valid JSON ({exc})" if isinstance(exc, json.JSONDecodeError) else None
            return self._unparsed(call_id, why or "nested too deeply to parse", text)
        if not isinstance(arguments, dict):
            return self._unparsed(call_id, f"a JSON {type(arguments).__name__}", text)
        return ToolCall(call_id, self.name, arguments)

    def _unparsed(self, call_id: str, why: str, text: str) -> ToolCall:
        # json's type names read oddly to a model: a list is an array, a dict an object.
        why = why.replace("JSON list", "JSON array").replace("JSON str", "JSON string")
        problem = (
            f"the arguments were {why}, not a JSON object; they began: "
            f"{json.dumps(text[:_EXCERPT_FOR_MODEL], ensure_ascii=False)}"
        )
        return ToolCall(call_id, self.name, {}, arguments_error=problem)


class ChunkAssembler:
    """Collects chunks of one streamed completion (see the module docs)."""

    def __init__(self) -> None:
        self._text: list[str] = []
        self._reasoning: list[str] = []
        self._calls: dict[int, _CallBuilder] = {}
        self._last_call: _CallBuilder | None = None
        self.finish_reason: str | None = None
        """The server's own ``finish_reason`` text (``None`` until one arrives)."""
        self.usage: Usage | None = None
        """Token usage, when the server reported it."""
        self.response_id: str | None = None
        """The completion's ``id`` as the server named it."""
        self.served_model: str | None = None
        """The ``model`` the server reported."""

    # -- chunks ---------------------------------------------------------------------------
    def feed_data(self, data: str) -> list[TextDelta | ReasoningDelta]:
        """Parse one SSE ``data`` payload (not ``[DONE]``) and return its deltas."""
        try:
            chunk = _loads(data)
        except (json.JSONDecodeError, RecursionError) as exc:
            raise MalformedChunk("a stream chunk is not valid JSON", excerpt=data) from exc
        return self.feed_chunk(chunk)

    def feed_chunk(self, chunk: Any) -> list[TextDelta | ReasoningDelta]:
        """Absorb one decoded ``chat.completion.chunk`` object and return its deltas."""
        if not isinstance(chunk, dict):
            raise MalformedChunk("a stream chunk is not a JSON object", excerpt=_excerpt(chunk))
        if chunk.get("error") is not None:
            raise StreamError(_error_text(chunk["error"]))
        if self.response_id is None or self.served_model is None:
            self._identify(chunk)
        usage = chunk.get("usage")
        if usage is not None:
            self.usage = _usage(usage)
        choices = chunk.get("choices")
        choice: dict[str, Any] | None = None
        if type(choices) is list and choices and type(choices[0]) is dict:
            choice = choices[0]  # nearly always the one (index 0): no search
        if choice is None or choice.get("index", 0) != 0:
            choice = _first_choice(chunk)
        if choice is None:
            return []
        events: list[TextDelta | ReasoningDelta] = []
        delta = choice.get("delta")
        if delta is None:
            delta = choice.get("message")  # a few servers send whole messages as chunks
        if delta is not None:
            if not isinstance(delta, dict):
                raise MalformedChunk("a chunk's delta is not an object", excerpt=_excerpt(delta))
            self._delta(delta, events)
        self._finish(choice)
        return events

    def feed_completion(self, body: Any) -> list[TextDelta | ReasoningDelta]:
        """Absorb a whole non-streamed ``chat.completion`` (a server that ignored
        ``stream: true``): its message becomes one text and one reasoning delta."""
        if not isinstance(body, dict):
            raise MalformedChunk("the response is not a JSON object", excerpt=_excerpt(body))
        if body.get("error") is not None:
            raise StreamError(_error_text(body["error"]))
        self._identify(body)
        usage = body.get("usage")
        if usage is not None:
            self.usage = _usage(usage)
        choice = _first_choice(body)
        if choice is None:
            raise MalformedChunk("the response has no choices", excerpt=_excerpt(body))
        message = choice.get("message")
        if not isinstance(message, dict):
            raise MalformedChunk("the response has no message", excerpt=_excerpt(choice))
        calls = message.get("tool_calls")
        if isinstance(calls, list):
            message = dict(message)
            message["tool_calls"] = [
                {**call, "index": position} if isinstance(call, dict) else call
                for position, call in enumerate(calls)
            ]
        events: list[TextDelta | ReasoningDelta] = []
        self._delta(message, events)
        self._finish(choice)
        return events

    def _identify(self, chunk: dict[str, Any]) -> None:
        if self.response_id is None and isinstance(chunk.get("id"), str):
            self.response_id = chunk["id"]
        if self.served_model is None and isinstance(chunk.get("model"), str):
            self.served_model = chunk["model"]

    def _delta(self, delta: dict[str, Any], events: list[TextDelta | ReasoningDelta]) -> None:
        content = delta.get("content")
        if content is not None:
            if not isinstance(content, str):
                raise MalformedChunk("delta.content is not a string", excerpt=_excerpt(content))
            if content:
                self._text.append(content)
                events.append(_delta_of(TextDelta, content))
        reasoning = delta.get("reasoning_content")
        if reasoning is None:
            reasoning = delta.get("reasoning")
        if reasoning is not None:
            if not isinstance(reasoning, str):
                raise MalformedChunk("delta reasoning is not a string", excerpt=_excerpt(reasoning))
            if reasoning:
                self._reasoning.append(reasoning)
                events.append(_delta_of(ReasoningDelta, reasoning))
        calls = delta.get("tool_calls")
        if calls is not None:
            if not isinstance(calls, list):
                raise MalformedChunk("delta.tool_calls is not a list", excerpt=_excerpt(calls))
            for piece in calls:
                self._call_piece(piece)

    def _call_piece(self, piece: Any) -> None:
        if not isinstance(piece, dict):
            raise MalformedChunk("a tool call delta is not an object", excerpt=_excerpt(piece))
        call_id = piece.get("id")
        if call_id is not None and not isinstance(call_id, str):
            raise MalformedChunk("a tool call id is not a string", excerpt=_excerpt(piece))
        builder = self._builder(piece.get("index"), call_id or None)
        if call_id and builder.id is None:
            builder.id = call_id
        function = piece.get("function")
        if function is None:
            return
        if not isinstance(function, dict):
            raise MalformedChunk("a tool call's function is not an object", excerpt=_excerpt(piece))
        name = function.get("name")
        if name is not None:
            if not isinstance(name, str):
                raise MalformedChunk("a tool call name is not a string", excerpt=_excerpt(piece))
            if name and name != builder.name:
                builder.name += name
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            builder.arguments.append(arguments)
        elif isinstance(arguments, dict):  # some servers send the parsed object
            builder.parsed = arguments
        elif arguments is not None:
            raise MalformedChunk(
                "tool call arguments are neither a string nor an object", excerpt=_excerpt(piece)
            )

    def _builder(self, index: Any, call_id: str | None) -> _CallBuilder:
        if index is None:
            # No index (non-standard): continue the call this id names, or the last one.
            if call_id is not None:
                for known in self._calls.values():
                    if known.id == call_id:
                        self._last_call = known
                        return known
            if call_id is None and self._last_call is not None:
                return self._last_call
            index = max(self._calls, default=-1) + 1
        elif type(index) is not int or index < 0:
            raise MalformedChunk(
                "a tool call index is not a non-negative integer", excerpt=str(index)
            )
        builder = self._calls.get(index)
        if builder is None:
            builder = self._calls[index] = _CallBuilder(index)
        self._last_call = builder
        return builder

    def _finish(self, choice: dict[str, Any]) -> None:
        reason = choice.get("finish_reason")
        if reason is None:
            return
        if not isinstance(reason, str):
            raise MalformedChunk("finish_reason is not a string", excerpt=_excerpt(reason))
        self.finish_reason = reason

    # -- the end --------------------------------------------------------------------------
    @property
    def text(self) -> str:
        return "".join(self._text)

    def response(self, *, cancelled: bool = False) -> Response:
        """The terminal response. ``cancelled`` keeps the text and reasoning so far and
        drops tool calls (they may be incomplete)."""
        reasoning = "".join(self._reasoning) or None
        usage = self.usage or Usage()
        if cancelled:
            return Response(self.text, reasoning, (), usage, "cancelled")
        calls = tuple(self._calls[index].build() for index in sorted(self._calls))
        finish = _FINISH.get(self.finish_reason or "stop", "stop")
        if calls and finish == "stop":
            finish = "tool_calls"
        return Response(self.text, reasoning, calls, usage, finish)


_scan_once: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]


def _loads(text: str) -> Any:
    """``json.loads`` for one chunk, through the C scanner directly (two Python frames
    and two regex calls less per chunk); anything unusual (leading or trailing
    whitespace, extra data, invalid JSON) takes ``json.loads`` itself, which decides
    and names the error."""
    try:
        value, end = _scan_once(text, 0)
    except StopIteration:
        return json.loads(text)
    if end != len(text):
        return json.loads(text)
    return value


def _first_choice(chunk: dict[str, Any]) -> dict[str, Any] | None:
    choices = chunk.get("choices")
    if choices is None:
        return None
    if not isinstance(choices, list):
        raise MalformedChunk("choices is not a list", excerpt=_excerpt(choices))
    for choice in choices:
        if not isinstance(choice, dict):
            raise MalformedChunk("a choice is not an object", excerpt=_excerpt(choice))
        if choice.get("index", 0) == 0:
            return choice
    return None


def _count(usage: dict[str, Any], key: str) -> int:
    value = usage.get(key, 0)
    if value is None:
        return 0
    if type(value) is not int or value < 0:
        raise MalformedChunk(f"usage.{key} is not a non-negative integer", excerpt=_excerpt(usage))
    return value


def _usage(usage: Any) -> Usage:
    if not isinstance(usage, dict):
        raise MalformedChunk("usage is not an object", excerpt=_excerpt(usage))
    return Usage(_count(usage, "prompt_tokens"), _count(usage, "completion_tokens"))


_Delta = TypeVar("_Delta", TextDelta, ReasoningDelta)


def _delta_of(kind: type[_Delta], text: str) -> _Delta:
    """``kind(text)`` for a ``text`` already checked to be a string: without the
    validator's call (one of these per streamed chunk)."""
    delta = object.__new__(kind)
    object.__setattr__(delta, "text", text)
    return delta
