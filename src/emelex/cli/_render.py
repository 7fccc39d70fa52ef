"""Turning events and actor trees into terminal text and NDJSON."""

from __future__ import annotations

import base64
import enum
import json
import re
import sys
import unicodedata
from collections.abc import Callable
from typing import Any, TextIO

import attrs

from emelex._text import clip
from emelex.agent import (
    AgentEvent,
    AnswerDelta,
    ApprovalRequested,
    ApprovalResolved,
    Approve,
    ModelCompleted,
    ModelProgress,
    ModelStarted,
    ReasoningDelta,
    ToolCompleted,
    ToolProgress,
    ToolProposed,
    ToolStarted,
    TurnCompleted,
    TurnFailed,
)
from emelex.model import TextPart

DIM = "\x1b[2m"
BOLD = "\x1b[1m"
RESET = "\x1b[0m"
_CAMEL = re.compile(r"(?<!^)(?=[A-Z])")


def dim(text: str) -> str:
    """``text`` dimmed when stderr is a terminal (a file or pipe gets plain text)."""
    return f"{DIM}{text}{RESET}" if sys.stderr.isatty() else text


def bold(text: str) -> str:
    return f"{BOLD}{text}{RESET}" if sys.stderr.isatty() else text


def event_name(event: object) -> str:
    return _CAMEL.sub("_", type(event).__name__).lower()


def _plain(value: Any) -> Any:
    if attrs.has(type(value)):
        data = {"type": event_name(value)} if not isinstance(value, TextPart) else {}
        for field in attrs.fields(type(value)):
            data[field.name.lstrip("_")] = _plain(getattr(value, field.name))
        return data
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def event_json(event: AgentEvent) -> str:
    """One event as one line of JSON: ``{"event": "answer_delta", ...fields}``."""
    data = _plain(event)
    data.pop("type", None)
    return json.dumps({"event": event_name(event), **data}, separators=(",", ":"))


# Everything printed that a model, a file or a server wrote goes through ``safe``: a
# terminal obeys escape sequences (set the title, clear the screen, write the clipboard
# with OSC 52) and bidi controls reorder what the user reads. Newlines and tabs stay.
_NOT_PLAIN = re.compile(r"[^\x20-\x7e\n\t]")
_JOINERS = frozenset("\u200c\u200d")  # format characters that emoji and scripts need


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    code = ord(char)
    if code < 0x80 or (
        char not in _JOINERS and unicodedata.category(char) in ("Cc", "Cf", "Cs", "Zl", "Zp")
    ):
        if code < 0x100:
            return f"\\x{code:02x}"
        return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"
    return char


def safe(text: str) -> str:
    """``text`` with every control character (C0 but newline and tab, DEL, C1), escape
    sequence introducer and bidi/format control shown as a visible escape (``\\x1b``,
    ``\\u202e``), so the terminal displays it instead of obeying it. Works on any
    fragment of a stream: each character is judged alone."""
    if not text.isascii() and text.replace("\n", "").replace("\t", "").isprintable():
        return text  # fast path: isprintable() is False for every class escaped here
    return _NOT_PLAIN.sub(_escape, text)


class TerminalRenderer:
    """Streams the answer to ``out`` and everything else (dimmed) to ``err``; every text
    from the model, a tool or a server passes through :func:`safe`.

    ``prompted`` is given when approvals are asked on the terminal: it tells, for a call
    id, whether the prompt already showed the approval sentence (then it is not repeated
    here). ``failure_shown`` becomes true once a failed turn was reported.
    """

    def __init__(
        self,
        out: TextIO = sys.stdout,
        err: TextIO = sys.stderr,
        *,
        reasoning: bool = True,
        prompted: Callable[[str], bool] | None = None,
    ) -> None:
        self.out = out
        self.err = err
        self.reasoning = reasoning
        self.color = err.isatty()
        self.prompted = prompted
        self.failure_shown = False
        self._pending: dict[str, str] = {}
        self._in_reasoning = False
        self._answer_open = False

    def _note(self, text: str) -> None:
        self._close_streams()
        dim, reset = (DIM, RESET) if self.color else ("", "")
        print(f"{dim}{text}{reset}", file=self.err, flush=True)

    def _close_streams(self) -> None:
        if self._in_reasoning:
            print(RESET if self.color else "", file=self.err, flush=True)
            self._in_reasoning = False
        if self._answer_open:
            print(file=self.out, flush=True)
            self._answer_open = False

    def __call__(self, event: AgentEvent) -> None:
        if isinstance(event, AnswerDelta):
            if self._in_reasoning:
                print(RESET if self.color else "", file=self.err, flush=True)
                self._in_reasoning = False
            self.out.write(safe(event.text))
            self.out.flush()
            self._answer_open = True
        elif isinstance(event, ReasoningDelta):
            if not self.reasoning:
                return
            if not self._in_reasoning:
                self.err.write(DIM if self.color else "")
                self._in_reasoning = True
            self.err.write(safe(event.text))
            self.err.flush()
        elif isinstance(event, ModelStarted) and event.round > 1:
            self._note(f"· model round {event.round}")
        elif isinstance(event, ModelProgress):
            progress = event.progress
            total = f"/{progress.total}" if progress.total is not None else ""
            self._note(f"· {safe(progress.stage)}: {progress.completed}{total}")
        elif isinstance(event, ModelCompleted) and event.response.finish_reason == "length":
            self._note("· the answer was cut: the model reached its token limit (--max-tokens)")
        elif isinstance(event, ToolProposed):
            arguments = json.dumps(event.call.arguments, ensure_ascii=False)
            self._note(f"→ tool {safe(event.call.name)} {safe(clip(arguments, 120))}")
        elif isinstance(event, ApprovalRequested):
            if self.prompted is None:
                self._note(f"? approval needed: {safe(event.reason)}")
            else:
                self._pending[event.call_id] = event.reason
        elif isinstance(event, ApprovalResolved):
            reason = self._pending.pop(event.call_id, None)
            if reason is not None and self.prompted and not self.prompted(event.call_id):
                # Decided without a prompt (a flag): the sentence was not shown yet.
                self._note(f"? approval needed: {safe(reason)}")
            verdict = "approved" if isinstance(event.decision, Approve) else "denied"
            self._note(f"  {verdict}")
        elif isinstance(event, ToolStarted):
            self._note(f"  running {safe(event.name)}")
        elif isinstance(event, ToolProgress):
            self._note(f"  … {safe(clip(event.message, 120))}")
        elif isinstance(event, ToolCompleted):
            kind = "error" if event.output.is_error else "result"
            ran = "" if event.executed else " (not run)"
            self._note(f"← {kind}{ran}: {safe(clip(event.output.text, 100))}")
        elif isinstance(event, TurnCompleted | TurnFailed):
            self._close_streams()
            if isinstance(event, TurnFailed):
                state = "rolled back" if event.rolled_back else "checkpointed"
                self._note(f"turn failed ({state}): {safe(event.error)}")
                self.failure_shown = True


def render_tree(snapshot: dict[str, Any]) -> str:
    """The actor tree of a diagnostics snapshot as text: every root and child under its
    parent, with connectors (``├─`` for all but the last sibling, ``│`` continuing a
    branch). The snapshot comes from another process: its text is made :func:`safe`."""
    lines = [
        safe(
            f"{snapshot.get('supervisor', '?')} (pid {snapshot.get('pid', '?')}): "
            f"{snapshot.get('actors', 0)} actors"
        )
    ]

    def walk(node: dict[str, Any], prefix: str, last: bool) -> None:
        mailbox = node.get("mailbox")
        extra = []
        if mailbox:
            extra.append(f"mailbox {mailbox['occupancy']}/{mailbox['capacity']}")
        if node.get("cancel_requested"):
            extra.append("cancel requested")
        if node.get("thread_alive") is not None:
            extra.append("thread alive" if node["thread_alive"] else "thread ended")
        suffix = f" [{', '.join(extra)}]" if extra else ""
        label = safe(
            f"{node['kind']} {node['name']!r} {node['state']} {node['age_seconds']:.1f}s{suffix}"
        )
        lines.append(f"{prefix}{'└─' if last else '├─'} {label}")
        children = node.get("children", [])
        for index, child in enumerate(children):
            walk(child, prefix + ("   " if last else "│  "), index == len(children) - 1)

    roots = snapshot.get("roots", [])
    for index, root in enumerate(roots):
        walk(root, "", index == len(roots) - 1)
    return "\n".join(lines)
