"""Stop strings of the native generation loop, and where they must not fire.

A stop string ends a generation where it appears in the answer, but never inside a
tool call: a call's arguments are data (code, docs, a chat template's own markup), and
cutting them left an unparsable call, so no call at all (issue 30). The loop asks
:class:`CallAwareStops`, which follows the output with the same parser the Trio side
uses, so "inside a call" means exactly what the parser will call one.
"""

from __future__ import annotations

from collections.abc import Sequence

from emelex.model.llama._output import OutputParser
from emelex.model.templates import ThinkMarkers, ToolCallFamily


class StopScanner:
    """Finds stop strings in streamed text, holding back what could begin one."""

    __slots__ = ("_held", "_longest", "_stops")

    def __init__(self, stops: Sequence[str]) -> None:
        self._stops = tuple(stops)
        self._longest = max((len(stop) for stop in self._stops), default=0)
        self._held = ""

    def feed(self, text: str) -> tuple[str, bool]:
        """Return (text safe to emit, whether a stop string was reached)."""
        if not self._stops:
            return text, False
        buffer = self._held + text
        hits = [index for index in (buffer.find(stop) for stop in self._stops) if index >= 0]
        if hits:
            first = min(hits)
            # A longer stop string starting before this match may still complete (stops
            # "a" and "XaX" over "Xa|X"): hold from there and decide on the next text.
            earlier = self._unfinished_start(buffer, before=first)
            if earlier is None:
                self._held = ""
                return buffer[:first], True
            self._held = buffer[earlier:]
            return buffer[:earlier], False
        keep = 0
        for size in range(min(len(buffer), self._longest - 1), 0, -1):
            tail = buffer[-size:]
            if any(stop.startswith(tail) for stop in self._stops):
                keep = size
                break
        self._held = buffer[len(buffer) - keep :]
        return buffer[: len(buffer) - keep], False

    def _unfinished_start(self, buffer: str, *, before: int) -> int | None:
        """The first index below ``before`` where ``buffer``'s tail is a proper prefix
        of a stop string (one that may still complete), or None."""
        start = max(0, len(buffer) - self._longest + 1)
        for index in range(start, before):
            tail = buffer[index:]
            if any(len(stop) > len(tail) and stop.startswith(tail) for stop in self._stops):
                return index
        return None

    def flush(self) -> tuple[str, bool]:
        """At the end of the stream: the held text, cut at a stop string it holds (one
        that was waiting for a longer, earlier one that never completed)."""
        held, self._held = self._held, ""
        hits = [index for index in (held.find(stop) for stop in self._stops) if index >= 0]
        if hits:
            return held[: min(hits)], True
        return held, False


class CallAwareStops:
    """:class:`StopScanner` that lets text inside tool-call markup through unscanned.

    ``family`` is the markup the output may hold (``NONE``: a plain scanner). The same
    ``feed``/``flush`` contract as :class:`StopScanner`.
    """

    __slots__ = ("_calls", "_scanner")

    def __init__(
        self,
        stops: Sequence[str],
        family: ToolCallFamily,
        *,
        think: ThinkMarkers | None = None,
        in_reasoning: bool = False,
    ) -> None:
        self._scanner = StopScanner(stops)
        follow = bool(stops) and family is not ToolCallFamily.NONE
        self._calls = (
            OutputParser(family=family, think=think, in_reasoning=in_reasoning) if follow else None
        )

    def feed(self, text: str) -> tuple[str, bool]:
        """Return (text safe to emit, whether a stop string was reached)."""
        calls = self._calls
        if calls is None:
            return self._scanner.feed(text)
        if not calls.may_cross_call(text):  # the usual token: all on one side of a call
            inside = calls.in_call
            calls.feed(text)
            return (text, False) if inside else self._scanner.feed(text)
        # Character by character, so a token that both ends the answer and opens a call
        # (or closes a call and holds a stop string) is split exactly where the call
        # starts and ends; only runs when stop strings and tools meet.
        out: list[str] = []
        for char in text:
            was_in_call, entered = calls.in_call, calls.calls_entered
            calls.feed(char)
            if was_in_call or calls.in_call or calls.calls_entered != entered:
                # What the scanner held back came before the call: answer text, cut at
                # a stop string that had completed in it.
                held, ended = self._scanner.flush()
                if ended:
                    out.append(held)
                    return "".join(out), True
                out.append(held + char)
                continue
            piece, stopped = self._scanner.feed(char)
            out.append(piece)
            if stopped:
                return "".join(out), True
        return "".join(out), False

    def flush(self) -> tuple[str, bool]:
        """At the end of the stream: see :meth:`StopScanner.flush`."""
        return self._scanner.flush()
