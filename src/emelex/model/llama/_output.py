"""Incremental parsing of model output into answer text, reasoning and tool calls.

Generated text arrives in arbitrary pieces. The parser splits it into answer text
(:class:`TextDelta`), reasoning between think tags (:class:`ReasoningDelta`) and tool
calls in the model family's markup, which are buffered until complete and parsed into
:class:`ToolCall` values. Tags split across pieces are held back until they are
recognisable. Whitespace around sections is trimmed (the answer and the reasoning never
start or end with whitespace); every delta is final, so the answer text of the terminal
response is exactly the concatenation of the text deltas.

Markup that turns out not to be a well-formed call (broken JSON, no name) is kept as
answer text, so nothing the model wrote disappears.

Inside a call the parser follows JSON string state: a closing tag, a call marker or a
think tag inside a JSON string is text of an argument, not markup. Arguments about chat
templates (docs, code, tests) hold such strings, and ending the call at the first
``</tool_call>`` lost the whole call (issue 30).
"""

from __future__ import annotations

import enum
import json
import re
from typing import Any, Final

import attrs

from emelex.model._events import ReasoningDelta, TextDelta
from emelex.model._messages import ToolCall
from emelex.model.templates import ThinkMarkers, ToolCallFamily

_HERMES_OPEN: Final = "<tool_call>"
_HERMES_CLOSE: Final = "</tool_call>"
_MISTRAL_MARK: Final = "[TOOL_CALLS]"
_MISTRAL_ARGS: Final = "[ARGS]"
_PYTHON_TAG: Final = "<|python_tag|>"
# What can change the scan's state: outside a string a quote or the start of a close
# tag; inside a string a quote or an escape.
_OUTSIDE_STRING: Final = re.compile(r'["<]')
_INSIDE_STRING: Final = re.compile(r'["\\]')
_CALL_CHARS: Final = frozenset("<[{")


class _State(enum.Enum):
    START = "start"  # nothing but whitespace of the current section seen yet
    REASONING = "reasoning"
    TEXT = "text"
    CALL = "call"  # inside a <tool_call> block
    TRAILING_CALLS = "trailing_calls"  # the rest of the output is tool calls


def _held_suffix(text: str, marker: str) -> int:
    """Length of the longest suffix of ``text`` that is a proper prefix of ``marker``."""
    for size in range(min(len(text), len(marker) - 1), 0, -1):
        if marker.startswith(text[-size:]):
            return size
    return 0


class _JsonScan:
    """Where a call body's close tag is, following JSON strings; resumable, so a long
    call streamed in many pieces is scanned once (linear, not quadratic)."""

    __slots__ = ("in_string", "offset")

    def __init__(self) -> None:
        self.offset = 0
        self.in_string = False

    def find_close(self, text: str, close: str) -> int:
        """The index of ``close`` outside JSON strings in ``text``, or -1 (then the
        scan resumes where it stopped, holding a possible partial tag)."""
        position = self.offset
        while True:
            if self.in_string:
                match = _INSIDE_STRING.search(text, position)
                if match is None:
                    self.offset = len(text)
                    return -1
                index = match.start()
                if text[index] == "\\":
                    if index + 1 >= len(text):
                        self.offset = index  # the escaped character has not arrived
                        return -1
                    position = index + 2
                    continue
                self.in_string = False
                position = index + 1
                continue
            match = _OUTSIDE_STRING.search(text, position)
            if match is None:
                self.offset = len(text)
                return -1
            index = match.start()
            if text[index] == '"':
                self.in_string = True
                position = index + 1
                continue
            if text.startswith(close, index):
                return index
            if close.startswith(text[index:]):
                self.offset = index  # maybe the start of the close tag
                return -1
            position = index + 1


@attrs.frozen
class ParsedOutput:
    """Everything one generation produced, once parsing finished."""

    text: str
    reasoning: str | None
    tool_calls: tuple[ToolCall, ...]


class _Section:
    """Accumulates one kind of text, trimming leading and trailing whitespace."""

    __slots__ = ("held", "parts", "started")

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.held = ""
        self.started = False

    def add(self, text: str) -> str:
        """Add ``text``; return what may be emitted now."""
        if not self.started:
            text = text.lstrip()
            if not text:
                return ""
            self.started = True
        combined = self.held + text
        visible = combined.rstrip()
        self.held = combined[len(visible) :]
        if visible:
            self.parts.append(visible)
        return visible

    def value(self) -> str:
        return "".join(self.parts)


class OutputParser:
    """Turns generated text pieces into events and, at the end, a :class:`ParsedOutput`.

    ``family`` selects the tool-call markup (use :attr:`ToolCallFamily.NONE` when no
    tools were offered); ``think`` the reasoning tags (``None``: no reasoning);
    ``in_reasoning`` whether the prompt already opened a think block. Not thread-safe;
    pure (no I/O).
    """

    def __init__(
        self,
        *,
        family: ToolCallFamily = ToolCallFamily.NONE,
        think: ThinkMarkers | None = None,
        in_reasoning: bool = False,
    ) -> None:
        self._family = family
        self._think = think
        self._state = _State.REASONING if in_reasoning and think else _State.START
        self._reasoning_seen = self._state is _State.REASONING
        self._pending = ""
        self._text = _Section()
        self._reasoning = _Section()
        self._calls: list[ToolCall] = []
        self._events: list[TextDelta | ReasoningDelta] = []
        self._finished = False
        self._scan = _JsonScan()
        self._calls_entered = 0

    @property
    def in_call(self) -> bool:
        """Whether the text fed so far ends inside tool-call markup (a call block, or
        the trailing calls of families whose calls end the answer)."""
        return self._state in (_State.CALL, _State.TRAILING_CALLS)

    @property
    def calls_entered(self) -> int:
        """How many times the output entered tool-call markup so far."""
        return self._calls_entered

    def may_cross_call(self, text: str) -> bool:
        """Whether feeding ``text`` could enter or leave tool-call markup. ``False`` is
        certain: every marker that opens a call starts with ``<``, ``[`` or ``{`` and a
        call block ends only at ``<``, unless part of a marker is already held."""
        state = self._state
        if state is _State.TRAILING_CALLS:
            return False  # the rest of the output is calls
        if state is _State.CALL:
            return self._scan.offset < len(self._pending) or "<" in text
        return bool(self._pending) or not _CALL_CHARS.isdisjoint(text)

    # -- emission -------------------------------------------------------------------------
    def _emit_text(self, text: str) -> None:
        visible = self._text.add(text)
        if not visible:
            return
        if self._events and isinstance(self._events[-1], TextDelta):
            self._events[-1] = TextDelta(self._events[-1].text + visible)
        else:
            self._events.append(TextDelta(visible))

    def _emit_reasoning(self, text: str) -> None:
        visible = self._reasoning.add(text)
        if not visible:
            return
        if self._events and isinstance(self._events[-1], ReasoningDelta):
            self._events[-1] = ReasoningDelta(self._events[-1].text + visible)
        else:
            self._events.append(ReasoningDelta(visible))

    def _take_events(self) -> list[TextDelta | ReasoningDelta]:
        events, self._events = self._events, []
        return events

    # -- parsing --------------------------------------------------------------------------
    def feed(self, piece: str) -> list[TextDelta | ReasoningDelta]:
        """Add the next piece of output; return the deltas it completes (maybe none)."""
        if self._finished:
            raise RuntimeError("the parser has finished")
        self._pending += piece
        while self._step():
            pass
        return self._take_events()

    def _step(self) -> bool:
        """Process pending text in the current state; True when the state changed and
        there may be more to do."""
        state = self._state
        if state is _State.START:
            return self._step_start()
        if state is _State.REASONING:
            return self._step_reasoning()
        if state is _State.TEXT:
            return self._step_text()
        if state is _State.CALL:
            return self._step_call()
        return False  # TRAILING_CALLS: everything waits for the end

    def _step_start(self) -> bool:
        stripped = self._pending.lstrip()
        if not stripped:
            self._pending = ""
            return False
        candidates: list[str] = []
        if self._think is not None and not self._reasoning_seen:
            candidates.append(self._think.open)
        if self._family is ToolCallFamily.LLAMA3_JSON:
            candidates.append(_PYTHON_TAG)
        for marker in candidates:
            if stripped.startswith(marker):
                if marker == _PYTHON_TAG:
                    self._state = _State.TRAILING_CALLS
                    self._calls_entered += 1
                    self._pending = stripped
                else:
                    self._state = _State.REASONING
                    self._reasoning_seen = True
                    self._pending = stripped[len(marker) :]
                return True
            if marker.startswith(stripped):
                self._pending = stripped
                return False  # could still become the marker
        if self._family is ToolCallFamily.LLAMA3_JSON and stripped.startswith("{"):
            self._state = _State.TRAILING_CALLS
            self._calls_entered += 1
            self._pending = stripped
            return True
        self._state = _State.TEXT
        self._pending = stripped
        return True

    def _step_reasoning(self) -> bool:
        assert self._think is not None
        close = self._think.close
        index = self._pending.find(close)
        if index >= 0:
            self._emit_reasoning(self._pending[:index])
            self._pending = self._pending[index + len(close) :]
            self._state = _State.START
            return True
        keep = _held_suffix(self._pending, close)
        self._emit_reasoning(self._pending[: len(self._pending) - keep])
        self._pending = self._pending[len(self._pending) - keep :]
        return False

    def _text_marker(self) -> str | None:
        if self._family is ToolCallFamily.HERMES:
            return _HERMES_OPEN
        if self._family is ToolCallFamily.MISTRAL:
            return _MISTRAL_MARK
        return None

    def _step_text(self) -> bool:
        marker = self._text_marker()
        if marker is None:
            self._emit_text(self._pending)
            self._pending = ""
            return False
        index = self._pending.find(marker)
        if index >= 0:
            self._emit_text(self._pending[:index])
            self._pending = self._pending[index + len(marker) :]
            self._state = _State.CALL if marker == _HERMES_OPEN else _State.TRAILING_CALLS
            self._scan = _JsonScan()
            self._calls_entered += 1
            return True
        keep = _held_suffix(self._pending, marker)
        self._emit_text(self._pending[: len(self._pending) - keep])
        self._pending = self._pending[len(self._pending) - keep :]
        return False

    def _step_call(self) -> bool:
        index = self._scan.find_close(self._pending, _HERMES_CLOSE)
        if index < 0:
            return False
        body = self._pending[:index]
        self._pending = self._pending[index + len(_HERMES_CLOSE) :]
        self._state = _State.TEXT
        call = self._call_from(_loads_object(body))
        if call is None:
            self._emit_text(_HERMES_OPEN + body + _HERMES_CLOSE)
        else:
            self._calls.append(call)
        return True

    # -- calls ----------------------------------------------------------------------------
    def _call_from(
        self, data: Any, arguments_keys: tuple[str, ...] = ("arguments",)
    ) -> ToolCall | None:
        if not isinstance(data, dict):
            return None
        if isinstance(data.get("function"), dict):  # {"type": "function", "function": {...}}
            data = data["function"]
        name = data.get("name")
        if not isinstance(name, str) or not name:
            return None
        arguments: Any = {}
        for key in (*arguments_keys, "arguments", "parameters"):
            if key in data:
                arguments = data[key]
                break
        if isinstance(arguments, str):
            arguments = _loads_object(arguments) if arguments.strip() else {}
        if not isinstance(arguments, dict):
            return None
        return ToolCall(f"call_{len(self._calls)}", name, arguments)

    def _trailing_calls(self, text: str) -> list[ToolCall] | None:
        """Parse the buffered rest of the output as calls; None if it is not calls."""
        count = len(self._calls)
        calls: list[ToolCall] = []

        def add(data: Any, keys: tuple[str, ...]) -> bool:
            call = self._call_from(data, keys)
            if call is None:
                return False
            calls.append(ToolCall(f"call_{count + len(calls)}", call.name, call.arguments))
            return True

        if self._family is ToolCallFamily.MISTRAL:
            body = text.strip()
            if body.startswith("["):
                items = _loads(body)
                if not isinstance(items, list) or not items:
                    return None
                return calls if all(add(item, ("arguments",)) for item in items) else None
            # Newer releases: name[ARGS]{...}, each call behind its own [TOOL_CALLS]. The
            # arguments are decoded as JSON before looking for the next marker: a marker
            # inside an argument string is text.
            decoder = json.JSONDecoder()
            position = 0
            while True:
                name, separator, _rest = body[position:].partition(_MISTRAL_ARGS)
                if not separator or _MISTRAL_MARK in name:
                    return None
                start = position + len(name) + len(_MISTRAL_ARGS)
                start += len(body[start:]) - len(body[start:].lstrip())
                try:
                    arguments, end = decoder.raw_decode(body, start)
                except (json.JSONDecodeError, RecursionError):
                    return None
                if not add({"name": name.strip(), "arguments": arguments}, ("arguments",)):
                    return None
                rest = body[end:].lstrip()
                if not rest:
                    return calls
                if not rest.startswith(_MISTRAL_MARK):
                    return None
                position = len(body) - len(rest) + len(_MISTRAL_MARK)
        # Llama 3: optional <|python_tag|>, then JSON objects separated by ";".
        body = text.strip()
        body = body.removeprefix(_PYTHON_TAG).strip()
        decoder = json.JSONDecoder()
        position = 0
        while position < len(body):
            try:
                data, end = decoder.raw_decode(body, position)
            except (json.JSONDecodeError, RecursionError):  # a model can nest 10^5 deep
                return None
            if not add(data, ("parameters",)):
                return None
            position = end
            while position < len(body) and body[position] in " \t\r\n;":
                position += 1
        return calls or None

    # -- end ------------------------------------------------------------------------------
    def finish(self) -> tuple[list[TextDelta | ReasoningDelta], ParsedOutput]:
        """Flush what is held back; return the last deltas and the parsed output.

        An unfinished call block or unparsable trailing calls become answer text.
        """
        if self._finished:
            raise RuntimeError("the parser has finished")
        self._finished = True
        state, pending = self._state, self._pending
        self._pending = ""
        if state is _State.REASONING:
            self._emit_reasoning(pending)
        elif state in (_State.TEXT, _State.START):
            self._emit_text(pending)
        elif state is _State.CALL:
            call = self._call_from(_loads_object(pending))
            if call is None:
                self._emit_text(_HERMES_OPEN + pending)
            else:
                self._calls.append(call)
        else:
            calls = self._trailing_calls(pending)
            if calls is None:
                prefix = _MISTRAL_MARK if self._family is ToolCallFamily.MISTRAL else ""
                self._emit_text(prefix + pending)
            else:
                self._calls.extend(calls)
        reasoning = self._reasoning.value() or None
        output = ParsedOutput(self._text.value(), reasoning, tuple(self._calls))
        return self._take_events(), output


def _loads(text: str) -> Any:
    try:
        return json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        return None


def _loads_object(text: str) -> Any:
    value = _loads(text.strip())
    return value if isinstance(value, dict) else None
