"""Turning events and actor trees into terminal text and NDJSON."""

from __future__ import annotations

import base64
import enum
import json
import re
import sys
from collections.abc import Callable
from typing import Any, TextIO

import attrs
from rich.console import Console
from rich.style import Style
from rich.text import Text

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
from emelex.cli._answer import MarkdownAnswer
from emelex.cli._progress import Bar
from emelex.cli._safe import safe as safe  # re-exported: the CLI imports it from here
from emelex.model import TextPart

_CAMEL = re.compile(r"(?<!^)(?=[A-Z])")
_DIM = Style(dim=True)
_BOLD = Style(bold=True)


def dim(text: str) -> str:
    """``text`` dimmed when stderr is a terminal (a file or pipe gets plain text)."""
    return _DIM.render(text) if sys.stderr.isatty() else text


def bold(text: str) -> str:
    return _BOLD.render(text) if sys.stderr.isatty() else text


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


class TerminalRenderer:
    """Streams the answer to ``out`` and everything else (dimmed) to ``err``; every text
    from the model, a tool or a server passes through :func:`safe`.

    On a terminal the answer is rendered as Markdown (:class:`MarkdownAnswer`) and
    prompt processing is a progress bar on ``err`` (when ``err`` is a terminal); to a
    pipe or file both stay plain lines, exactly as before.

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
        self._markdown = MarkdownAnswer(out) if out.isatty() else None
        self._prompt_bar: Bar | None = None
        # Styled text on a terminal; soft_wrap: rich adds no line breaks of its own.
        self._styled = (
            Console(file=err, highlight=False, markup=False, emoji=False, soft_wrap=True)
            if self.color
            else None
        )

    def _dim(self, text: str, end: str = "\n") -> None:
        if self._styled is not None:
            self._styled.print(Text(text, style="dim"), end=end)
        else:
            print(text, end=end, file=self.err, flush=True)

    def _note(self, text: str) -> None:
        self._close_streams()
        self._dim(text)

    def _end_reasoning(self) -> None:
        if self._in_reasoning:
            print(file=self.err, flush=True)
            self._in_reasoning = False

    def _close_bar(self) -> None:
        if self._prompt_bar is not None:
            self._prompt_bar.close()
            self._prompt_bar = None

    def _close_streams(self) -> None:
        self._close_bar()
        self._end_reasoning()
        if self._answer_open:
            if self._markdown is not None:
                self._markdown.close()
            else:
                print(file=self.out, flush=True)
            self._answer_open = False

    def __call__(self, event: AgentEvent) -> None:
        if isinstance(event, AnswerDelta):
            self._close_bar()
            self._end_reasoning()
            if self._markdown is not None:
                self._markdown.feed(event.text)
            else:
                self.out.write(safe(event.text))
                self.out.flush()
            self._answer_open = True
        elif isinstance(event, ReasoningDelta):
            if not self.reasoning:
                return
            self._close_bar()
            self._in_reasoning = True
            self._dim(safe(event.text), end="")
        elif isinstance(event, ModelStarted) and event.round > 1:
            self._note(f"· model round {event.round}")
        elif isinstance(event, ModelProgress) and self.color:
            self._progress(event)
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

    def _progress(self, event: ModelProgress) -> None:
        progress = event.progress
        if self._prompt_bar is None:
            self._close_streams()
            self._prompt_bar = Bar(self.err, f"· {progress.stage}", counts=True)
        self._prompt_bar.update(progress.completed, progress.total)
        if progress.total is not None and progress.completed >= progress.total:
            self._close_bar()


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
