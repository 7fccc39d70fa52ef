"""Turning events and actor trees into terminal text and NDJSON."""

from __future__ import annotations

import base64
import enum
import json
import re
import sys
from typing import Any, TextIO

import attrs

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


def _short(text: str, limit: int = 120) -> str:
    text = text.replace("\n", " ")
    return text if len(text) <= limit else text[: limit - 1] + "…"


class TerminalRenderer:
    """Streams the answer to ``out`` and everything else (dimmed) to ``err``."""

    def __init__(
        self, out: TextIO = sys.stdout, err: TextIO = sys.stderr, *, reasoning: bool = True
    ) -> None:
        self.out = out
        self.err = err
        self.reasoning = reasoning
        self.color = err.isatty()
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
            self.out.write(event.text)
            self.out.flush()
            self._answer_open = True
        elif isinstance(event, ReasoningDelta):
            if not self.reasoning:
                return
            if not self._in_reasoning:
                self.err.write(DIM if self.color else "")
                self._in_reasoning = True
            self.err.write(event.text)
            self.err.flush()
        elif isinstance(event, ModelStarted) and event.round > 1:
            self._note(f"· model round {event.round}")
        elif isinstance(event, ModelProgress):
            progress = event.progress
            total = f"/{progress.total}" if progress.total is not None else ""
            self._note(f"· {progress.stage}: {progress.completed}{total}")
        elif isinstance(event, ModelCompleted) and event.response.finish_reason == "length":
            self._note("· the answer was cut: the model reached its token limit (--max-tokens)")
        elif isinstance(event, ToolProposed):
            arguments = json.dumps(event.call.arguments, ensure_ascii=False)
            self._note(f"→ tool {event.call.name} {_short(arguments)}")
        elif isinstance(event, ApprovalRequested):
            self._note(f"? approval needed: {event.reason}")
        elif isinstance(event, ApprovalResolved):
            verdict = "approved" if isinstance(event.decision, Approve) else "denied"
            self._note(f"  {verdict}")
        elif isinstance(event, ToolStarted):
            self._note(f"  running {event.name}")
        elif isinstance(event, ToolProgress):
            self._note(f"  … {_short(event.message)}")
        elif isinstance(event, ToolCompleted):
            kind = "error" if event.output.is_error else "result"
            ran = "" if event.executed else " (not run)"
            self._note(f"← {kind}{ran}: {_short(event.output.text, 100)}")
        elif isinstance(event, TurnCompleted | TurnFailed):
            self._close_streams()
            if isinstance(event, TurnFailed):
                state = "rolled back" if event.rolled_back else "checkpointed"
                self._note(f"turn failed ({state}): {event.error}")


def render_tree(snapshot: dict[str, Any]) -> str:
    """The actor tree of a diagnostics snapshot as indented text."""
    lines = [
        f"{snapshot.get('supervisor', '?')} (pid {snapshot.get('pid', '?')}): "
        f"{snapshot.get('actors', 0)} actors"
    ]

    def walk(node: dict[str, Any], depth: int) -> None:
        mailbox = node.get("mailbox")
        extra = []
        if mailbox:
            extra.append(f"mailbox {mailbox['occupancy']}/{mailbox['capacity']}")
        if node.get("cancel_requested"):
            extra.append("cancel requested")
        if node.get("thread_alive") is not None:
            extra.append("thread alive" if node["thread_alive"] else "thread ended")
        suffix = f" [{', '.join(extra)}]" if extra else ""
        lines.append(
            f"{'  ' * depth}└─ {node['kind']} {node['name']!r} {node['state']} "
            f"{node['age_seconds']:.1f}s{suffix}"
        )
        for child in node.get("children", []):
            walk(child, depth + 1)

    for root in snapshot.get("roots", []):
        walk(root, 0)
    return "\n".join(lines)
