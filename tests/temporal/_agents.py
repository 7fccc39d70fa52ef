"""Agents the Temporal tests run: a model that answers from the request (so a worker
restarted mid-turn needs no memory of earlier rounds) and tools with visible effects."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import trio

from emelex.agent import AgentSession
from emelex.model import (
    Capabilities,
    Completed,
    GenerationEvent,
    GenerationRequest,
    Response,
    TextDelta,
    ToolCall,
    ToolDefinition,
    Usage,
)
from emelex.tools import ToolCancellationPolicy, ToolInvocation, ToolOutput


class RequestModel:
    """Round 1: the user message is JSON ``{"tool": name, "arguments": {...}}`` and the
    model calls that tool (or answers the text when it is not JSON). Later rounds: it
    answers ``done: <last tool result>``."""

    capabilities = Capabilities()

    def generate(self, request: GenerationRequest) -> Any:
        return self._stream(request)

    @asynccontextmanager
    async def _stream(self, request: GenerationRequest) -> AsyncIterator[Any]:
        yield self._events(request)

    async def _events(self, request: GenerationRequest) -> AsyncIterator[GenerationEvent]:
        await trio.lowlevel.checkpoint()
        last = request.messages[-1]
        usage = Usage(len(request.messages), 1)
        if last.role == "tool":
            text = "done: " + "".join(getattr(p, "text", "") for p in last.content)
            yield TextDelta(text)
            yield Completed(Response(text, None, (), usage, "stop"))
            return
        text = "".join(getattr(p, "text", "") for p in last.content)
        try:
            order = json.loads(text)
        except ValueError:
            yield TextDelta(text)
            yield Completed(Response(text, None, (), usage, "stop"))
            return
        call = ToolCall("c1", order["tool"], order.get("arguments", {}))
        yield Completed(Response("", None, (call,), usage, "tool_calls"))


class AppendLine:
    """Appends a line to a file (the effect), then waits ``pause`` seconds before it
    returns: a worker killed in the pause has done the effect but not answered."""

    cancellation_policy = ToolCancellationPolicy.FINISH_ONCE_STARTED

    def __init__(self, path: Path, pause: float = 0.0, marker: Path | None = None) -> None:
        self._path = path
        self._pause = pause
        self._marker = marker
        self.definition = ToolDefinition(
            "append_line",
            "Append a line to the journal.",
            {"type": "object", "properties": {"line": {"type": "string"}}, "required": ["line"]},
        )

    def approval_reason(self, arguments: Mapping[str, Any]) -> str | None:
        return f"append {arguments['line']!r}" if arguments.get("ask") else None

    async def invoke(self, invocation: ToolInvocation) -> ToolOutput:
        with self._path.open("a") as journal:
            journal.write(invocation.arguments["line"] + "\n")
            journal.flush()
            os.fsync(journal.fileno())
        if self._marker is not None:
            self._marker.write_text(invocation.call.id)
        await trio.sleep(self._pause)
        return ToolOutput(f"appended {invocation.arguments['line']}")


class IdempotentAppend(AppendLine):
    """The same effect, declared idempotent: Temporal may run it again after a loss."""

    idempotent = True

    def __init__(self, path: Path, pause: float = 0.0, marker: Path | None = None) -> None:
        super().__init__(path, pause, marker)
        self.definition = ToolDefinition(
            "idempotent_append", "Append a line (idempotent).", self.definition.parameters
        )


class Guarded(AppendLine):
    """The same effect, behind an approval (every call asks)."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.definition = ToolDefinition(
            "guarded_append", "Append a line after approval.", self.definition.parameters
        )

    def approval_reason(self, arguments: Mapping[str, Any]) -> str | None:
        return f"append {arguments['line']!r} to the journal"


class WaitForCancel:
    """A cooperative tool: runs until the turn is cancelled, then returns what it did."""

    cancellation_policy = ToolCancellationPolicy.FINISH_ONCE_STARTED

    def __init__(self, started: Path) -> None:
        self._started = started
        self.definition = ToolDefinition(
            "wait_for_cancel", "Work until cancelled.", {"type": "object", "properties": {}}
        )

    def approval_reason(self, arguments: Mapping[str, Any]) -> str | None:
        return None

    async def invoke(self, invocation: ToolInvocation) -> ToolOutput:
        self._started.write_text("started")
        with trio.fail_after(60):
            await invocation.cancellation.wait_cancelled()
        return ToolOutput("stopped early, cleanly")


class Interruptible:
    """An INTERRUPTIBLE tool that would run a minute; it records being interrupted."""

    cancellation_policy = ToolCancellationPolicy.INTERRUPTIBLE

    def __init__(self, started: Path) -> None:
        self._started = started
        self.interrupted = trio.Event()
        self.definition = ToolDefinition(
            "long_job", "A long job.", {"type": "object", "properties": {}}
        )

    def approval_reason(self, arguments: Mapping[str, Any]) -> str | None:
        return None

    async def invoke(self, invocation: ToolInvocation) -> ToolOutput:
        self._started.write_text("started")
        try:
            await trio.sleep(60)
        except trio.Cancelled:
            self.interrupted.set()
            raise
        return ToolOutput("finished")


def build_session(
    workspace: Path, *tools: Any, model: Any = None, max_rounds: int | None = None
) -> AgentSession:
    builder = AgentSession.builder(model or RequestModel(), workspace)
    builder.system_prompt("You are a test agent.").include_file_tools(False)
    builder.include_shell_tool(False).include_web_fetch(False).include_datetime(False)
    if max_rounds is not None:
        builder.max_rounds(max_rounds)
    return builder.tools(tools).build()


def order(tool: str, **arguments: Any) -> str:
    return json.dumps({"tool": tool, "arguments": arguments})
