"""A whole agent turn on a scripted model: a tool call under approval, streamed events,
the live actor tree while the tool runs, and the committed history.

Run: python examples/quickstart.py
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Mapping
from typing import Any

import attrs
import trio

from emelex import (
    AgentCancellation,
    AgentEvent,
    AgentSession,
    ApprovalContext,
    ApprovalDecision,
    Approve,
    Supervisor,
    ToolCancellationPolicy,
    ToolDefinition,
    ToolInvocation,
    ToolOutput,
    open_supervisor,
)
from emelex.testing import Call, Say, ScriptedModel, Think


class WordCount:
    """Counts words in a text; asks for approval when the text is long."""

    definition = ToolDefinition(
        "word_count",
        "Count the words in a text.",
        {
            "type": "object",
            "properties": {"text": {"type": "string", "maxLength": 10_000}},
            "required": ["text"],
            "additionalProperties": False,
        },
    )
    cancellation_policy = ToolCancellationPolicy.FINISH_ONCE_STARTED

    def approval_reason(self, arguments: Mapping[str, Any]) -> str | None:
        return f"count the words of a {len(arguments['text'])}-character text"

    async def invoke(self, invocation: ToolInvocation) -> ToolOutput:
        tree = Supervisor.current().snapshot()
        print("  live actors:", " > ".join(f"{i.kind}:{i.name[:20]}" for i in tree.walk()))
        await invocation.progress("counting")
        return ToolOutput(str(len(invocation.arguments["text"].split())))


class ApproveAndSay:
    async def decide(self, context: ApprovalContext) -> ApprovalDecision:
        print(f"  approval asked: {context.reason} -> approved (one shot)")
        return Approve()


def show(event: AgentEvent) -> None:
    name = type(event).__name__
    fields = attrs.asdict(event, recurse=False)
    detail = {k: v for k, v in fields.items() if k not in ("turn_id", "response")}
    print(f"  {name:18} {json.dumps(detail, default=repr)[:90]}")


async def main() -> None:
    model = ScriptedModel(
        [
            [Think("I should count."), Call("word_count", {"text": "the quick brown fox"})],
            [Say("The text has "), Say("4 words.")],
        ]
    )
    with tempfile.TemporaryDirectory() as workspace:
        async with open_supervisor("quickstart") as supervisor:
            builder = (
                AgentSession.builder(model, workspace)
                .include_shell_tool(False)
                .include_file_tools(False)
                .system_prompt("You count words.")
                .tool(WordCount())
                .approval_policy(ApproveAndSay())
            )
            with builder.build() as session:
                print("authority:", session.authority_snapshot.to_json()[:100], "...")
                turn = await session.run(
                    "How many words in 'the quick brown fox'?",
                    cancellation=AgentCancellation(),
                    on_event=show,
                )
                print("answer:", turn.response.text)
                print("committed:", [m.role for m in turn.messages])
            print("actors left after the turn:", len(supervisor.snapshot()))


if __name__ == "__main__":
    trio.run(main)
