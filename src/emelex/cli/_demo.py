"""``emelex demo``: one real agent turn on the packaged model, with every step visible.

The packaged Gemma 3 270M is a small *base* model: left alone it writes unrelated text
and never calls a tool. The demo therefore guides it by construction, and says so: a
:class:`GuidedModel` wraps the real model and, round by round, narrows what it may
produce with the request's own options (the same grammar machinery any user gets):

1. ``tool_choice=ToolChoice.tool("list_directory", arguments=...)`` with the path
   fixed to ``"."``;
2. ``ToolChoice.tool("read_file", arguments=...)`` with the path limited to the listed
   files the prompt names (all listed files when it names none);
3. ``ToolChoice.NONE`` with an ``output_schema``: a JSON object naming the file read and
   quoting the line of it the model picks (``says``; free text when the file gave no
   lines). A base model asked to write the text itself copies noise, not the file.

The tools are declared to the model unchanged in every round (so each round reuses the
cached prompt of the one before). Everything else is the ordinary pipeline: the chat
template, the grammar-constrained sampling in llama.cpp, the session's validation and
re-identification of each proposed call, an approval (the demo asks before reading a
file), the descriptor-safe file tools, the actor tree, and the committed history.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any, Final

import attrs
import trio

from emelex._text import clip
from emelex.agent import (
    AgentCancellation,
    AgentError,
    AgentEvent,
    AgentSession,
    ApprovalContext,
    ApprovalDecision,
    Approve,
    Deny,
    ModelStarted,
    ToolCompleted,
    ToolStarted,
    TurnCancelled,
)
from emelex.cli._render import TerminalRenderer, safe
from emelex.cli._tree import print_tree
from emelex.model import (
    AgentModel,
    Capabilities,
    GenerationEvent,
    GenerationOptions,
    GenerationRequest,
    ToolChoice,
    ToolDefinition,
)
from emelex.runtime import Supervisor, open_supervisor
from emelex.tools import AgentTool, ToolCancellationPolicy, ToolInvocation, ToolOutput
from emelex.tools.builtin import ListDirectoryTool, ReadFileTool
from emelex.tools.workspace import Workspace

DEFAULT_PROMPT: Final = "Which files are in this folder? Read todo.txt and tell me what it says."
DEMO_FILES: Final = {
    "shopping.md": "# Shopping\n- apples\n- bread\n",
    "todo.txt": "Call Sam on Friday.\n",
}
#: The longest ``says`` text the answer schema allows (the answer round's token budget
#: follows from it).
SAYS_MAX_CHARS: Final = 160
#: The most file lines the answer may choose from.
ANSWER_LINES: Final = 20

NEXT_STEP: Final = (
    "Next: point emelex at a real model: emelex run --model openai:MODEL --base-url URL "
    '"your prompt" (any OpenAI-compatible server), or --model llama:PATH for a GGUF file.'
)


# -- the plan: pure, testable without a model -------------------------------------------
@attrs.frozen
class RoundPlan:
    """What the guided model may produce in one round."""

    stage: str  # "list", "read" or "answer"
    request: GenerationRequest


def _path_arguments(tool: ToolDefinition, path_schema: dict[str, Any]) -> dict[str, Any]:
    """An arguments schema for ``tool`` with only its ``path``, narrowed by
    ``path_schema`` (the tool's other arguments keep their defaults)."""
    path = tool.parameters.get("properties", {}).get("path", {})
    return {
        "type": "object",
        "properties": {"path": {**path, **path_schema}},
        "required": ["path"],
        "additionalProperties": False,
    }


def listed_files(listing: str) -> list[str]:
    """File names (not directories) of a ``list_directory`` result, in listed order."""
    names = []
    for line in listing.splitlines():
        entry = line.strip()
        if not entry or entry.endswith("/") or entry.startswith(("#", "[")):
            continue
        name = re.split(r"\s+\(", entry, maxsplit=1)[0].strip()
        if name and "/" not in name:
            names.append(name)
    return names


def content_lines(result: str) -> list[str]:
    """The text lines of a ``read_file`` result (its bracketed header and notes left
    out), each clipped to ``SAYS_MAX_CHARS``, at most ``ANSWER_LINES`` of them."""
    lines = []
    for line in result.splitlines():
        text = line.strip()
        if not text or (text.startswith("[") and text.endswith("]")):
            continue
        lines.append(text[:SAYS_MAX_CHARS])
    return list(dict.fromkeys(lines))[:ANSWER_LINES]


def plan_round(request: GenerationRequest) -> RoundPlan:
    """The demo's narrowed request for the round ``request`` asks for.

    Decided from the conversation since the last user message: no ``list_directory``
    call yet → list; no ``read_file`` call yet → read; otherwise → answer.
    """
    messages = request.messages
    last_user = max(
        (index for index, message in enumerate(messages) if message.role == "user"), default=-1
    )
    prompt = messages[last_user].text if last_user >= 0 else ""
    since = messages[last_user + 1 :]
    calls = [call for message in since for call in message.tool_calls]
    results = {message.tool_call_id: message.text for message in since if message.role == "tool"}
    tools = {tool.name: tool for tool in request.tools}
    if "list_directory" in tools and not any(c.name == "list_directory" for c in calls):
        arguments = _path_arguments(tools["list_directory"], {"enum": ["."]})
        choice = ToolChoice.tool("list_directory", arguments=arguments)
        return RoundPlan(
            "list", attrs.evolve(request, options=attrs.evolve(request.options, tool_choice=choice))
        )
    if "read_file" in tools and not any(c.name == "read_file" for c in calls):
        listing = next((results.get(c.id, "") for c in calls if c.name == "list_directory"), "")
        files = listed_files(listing)
        named = [name for name in files if name in prompt]
        candidates = named or files
        if candidates:
            arguments = _path_arguments(tools["read_file"], {"enum": candidates})
            choice = ToolChoice.tool("read_file", arguments=arguments)
            return RoundPlan(
                "read",
                attrs.evolve(request, options=attrs.evolve(request.options, tool_choice=choice)),
            )
    read = [c for c in calls if c.name == "read_file" and isinstance(c.arguments.get("path"), str)]
    subject = read[-1].arguments["path"] if read else "the folder"
    lines = content_lines(results.get(read[-1].id, "")) if read else []
    says: dict[str, Any] = (
        {"enum": lines}
        if lines
        else {"type": "string", "minLength": 1, "maxLength": SAYS_MAX_CHARS}
    )
    schema = {
        "type": "object",
        "properties": {"file": {"const": subject}, "says": says},
        "required": ["file", "says"],
        "additionalProperties": False,
    }
    return RoundPlan(
        "answer",
        attrs.evolve(
            request,
            options=attrs.evolve(
                request.options,
                tool_choice=ToolChoice.NONE,
                output_schema=schema,
                # The JSON around ``says`` plus the text itself, with room to spare.
                max_tokens=SAYS_MAX_CHARS + 64,
            ),
        ),
    )


class GuidedModel:
    """An :class:`~emelex.model.AgentModel` that narrows each round as :func:`plan_round`
    says, then lets the wrapped model generate it. Counts the time spent generating."""

    def __init__(self, model: AgentModel) -> None:
        self._model = model
        self.model_seconds = 0.0
        self.stages: list[str] = []

    @property
    def capabilities(self) -> Capabilities:
        return self._model.capabilities

    def generate(
        self, request: GenerationRequest
    ) -> AbstractAsyncContextManager[AsyncIterator[GenerationEvent]]:
        return self._generate(request)

    @asynccontextmanager
    async def _generate(
        self, request: GenerationRequest
    ) -> AsyncIterator[AsyncIterator[GenerationEvent]]:
        plan = plan_round(request)
        self.stages.append(plan.stage)
        started = time.perf_counter()
        try:
            async with self._model.generate(plan.request) as stream:
                yield stream
        finally:
            self.model_seconds += time.perf_counter() - started


# -- tools and approvals -----------------------------------------------------------------
class AskBeforeReading:
    """``read_file`` that always asks for approval (the demo shows one approval)."""

    def __init__(self, tool: ReadFileTool) -> None:
        self._tool = tool

    @property
    def definition(self) -> ToolDefinition:
        return self._tool.definition

    @property
    def cancellation_policy(self) -> ToolCancellationPolicy:
        return self._tool.cancellation_policy

    def approval_reason(self, arguments: Mapping[str, Any]) -> str | None:
        reason = self._tool.approval_reason(arguments)
        if reason is not None:
            return reason
        return f"read the file {json.dumps(arguments.get('path'), ensure_ascii=True)}"

    async def invoke(self, invocation: ToolInvocation) -> ToolOutput:
        return await self._tool.invoke(invocation)


class DemoApprovals:
    """Asks on the terminal when there is one; otherwise approves with a visible line."""

    def __init__(self, lines: Any | None, err: Any = None) -> None:
        self._lines = lines
        self._err = err

    async def decide(self, context: ApprovalContext) -> ApprovalDecision:
        err = self._err or sys.stderr
        if self._lines is None:
            print("  approved automatically (emelex demo without a terminal)", file=err, flush=True)
            return Approve()
        print(f"  Approve {safe(context.call.name)}? [y/N] ", end="", file=err, flush=True)
        answer = await self._lines.readline()
        if answer is not None and answer.strip().lower() in ("y", "yes"):
            return Approve()
        return Deny("the user declined this call")


# -- the command -------------------------------------------------------------------------
def _seed(directory: Path) -> None:
    for name, text in DEMO_FILES.items():
        (directory / name).write_text(text, encoding="utf-8")


RESULT_LINES: Final = 12
RESULT_LINE_CHARS: Final = 160


def result_block(output: ToolOutput) -> str:
    """A tool result as the demo shows it: whole lines, at most ``RESULT_LINES`` of them,
    each clipped, and a note saying how much was left out."""
    kind = "error" if output.is_error else "result"
    lines = output.text.splitlines()
    shown = [
        line if len(line) <= RESULT_LINE_CHARS else clip(line, RESULT_LINE_CHARS)
        for line in lines[:RESULT_LINES]
    ]
    block = [f"← {kind}:", *(f"    {safe(line)}" for line in shown)]
    if len(lines) > RESULT_LINES:
        block.append(f"    [{len(lines) - RESULT_LINES} more lines not shown]")
    return "\n".join(block)


def _consumer(renderer: TerminalRenderer, tree: bool) -> Any:
    def consume(event: AgentEvent) -> None:
        if isinstance(event, ToolCompleted) and event.executed:
            print(result_block(event.output), file=renderer.err, flush=True)
        else:
            renderer(event)
        if tree and isinstance(event, ModelStarted | ToolStarted):
            snapshot = Supervisor.current().snapshot().to_json_dict()
            snapshot["pid"] = os.getpid()
            print_tree(snapshot, renderer.err)

    return consume


def demo_tools(workspace: Workspace) -> Sequence[AgentTool]:
    return (ListDirectoryTool(workspace), AskBeforeReading(ReadFileTool(workspace)))


async def run_demo(args: argparse.Namespace) -> int:
    """The demo turn; returns the exit code."""
    from emelex.cli._approvals import StdinLines
    from emelex.cli._models import open_model

    with tempfile.TemporaryDirectory(prefix="emelex-demo-") as scratch:
        if args.workspace:
            root = Path(args.workspace)
        else:
            root = Path(scratch)
            _seed(root)
        err = sys.stderr
        print(f"workspace: {safe(str(root))}", file=err)
        for name in sorted(os.listdir(root)):
            print(f"  {safe(name)}", file=err)
        print(f"prompt: {safe(args.prompt)}", file=err, flush=True)
        interactive = sys.stdin.isatty() and not args.no_input
        async with open_supervisor("emelex demo"):
            print("loading the model…", file=err, flush=True)
            async with open_model(args.model, base_url=args.base_url) as loaded:
                print(f"model: {loaded.description}", file=err)
                print(
                    "guided rounds (a base model cannot follow instructions, so each "
                    "round is grammar-constrained): list_directory of the folder, then "
                    "read_file of a listed file the prompt names, then a JSON answer "
                    "quoting a line of that file",
                    file=err,
                    flush=True,
                )
                guided = GuidedModel(loaded.client.model)
                from emelex.model import Client

                with Workspace.open(root) as workspace:
                    builder = AgentSession.builder(Client(guided), root)
                    builder.include_file_tools(False).include_shell_tool(False)
                    builder.include_web_fetch(False).include_datetime(False)
                    builder.tools(demo_tools(workspace))
                    builder.options(GenerationOptions(max_tokens=args.max_tokens, temperature=0))
                    lines = StdinLines() if interactive else None
                    try:
                        if lines is not None:
                            async with lines:
                                builder.approval_policy(DemoApprovals(lines))
                                code = await _turn(builder, args, guided)
                        else:
                            builder.approval_policy(DemoApprovals(None))
                            code = await _turn(builder, args, guided)
                    except AgentError as exc:
                        print(f"emelex demo: {exc}", file=err)
                        return 1
        rounds = len(guided.stages)
        print(f"model time: {guided.model_seconds:.1f} s over {rounds} rounds", file=err)
        print(NEXT_STEP, file=err, flush=True)
        return code


async def _turn(builder: Any, args: argparse.Namespace, guided: GuidedModel) -> int:
    renderer = TerminalRenderer(reasoning=True)
    consume = _consumer(renderer, tree=not args.no_tree)
    with builder.build() as session:
        try:
            turn = await session.run(
                args.prompt, cancellation=AgentCancellation(), on_event=consume
            )
        except TurnCancelled:
            return 130
        except AgentError as exc:
            print(f"emelex demo: the turn failed: {exc}", file=sys.stderr)
            return 1
    answer = _answer_line(turn.response.text)
    if answer:
        print(answer, file=sys.stderr, flush=True)
    return 0


def _answer_line(text: str) -> str | None:
    """The JSON answer as one sentence, or None when it is not the demo's object."""
    try:
        data = json.loads(text)
    except ValueError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("says"), str):
        return None
    says = json.dumps(data["says"], ensure_ascii=False)
    return safe(f"answer: {data.get('file')} says {says}")


def demo_command(args: argparse.Namespace) -> int:
    try:
        return trio.run(run_demo, args)
    except KeyboardInterrupt:
        return 130
