"""A Host process for test_resumed_turns.py: it starts one turn whose batch waits for an
approval, prints ``PENDING <session> <interaction>`` and waits to be killed."""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import trio

from emelex.agent import DenyAll, ToolCancellationPolicy
from emelex.app import Agent
from emelex.contracts import InteractionsChanged
from emelex.model import ToolDefinition
from emelex.service import Host
from emelex.testing import Call, Say, ScriptedModel
from emelex.tools import ToolInvocation, ToolOutput

#: The batch of the first round: a ledger line, a gated note, another ledger line.
FIRST_ROUND: list[Any] = [
    Call("ledger", {"text": "a"}),
    Call("note", {"text": "x"}),
    Call("ledger", {"text": "b"}),
]


class Ledger:
    """Appends one line per call to ``path`` (so a second run of a call shows)."""

    def __init__(self, path: Path, name: str = "ledger", gated: bool = False) -> None:
        self.path = path
        self.name = name
        self.gated = gated

    @property
    def definition(self) -> ToolDefinition:
        schema = {"type": "object", "properties": {"text": {"type": "string"}}}
        return ToolDefinition(self.name, f"Append a line ({self.name}).", schema)

    @property
    def cancellation_policy(self) -> ToolCancellationPolicy:
        return ToolCancellationPolicy.FINISH_ONCE_STARTED

    def approval_reason(self, arguments: Mapping[str, Any]) -> str | None:
        return f"{self.name} writes" if self.gated else None

    async def invoke(self, invocation: ToolInvocation) -> ToolOutput:
        text = str(invocation.call.arguments.get("text", ""))
        with self.path.open("a", encoding="utf-8") as ledger:
            ledger.write(f"{self.name} {text} {invocation.call.id}\n")
        return ToolOutput(f"{self.name} wrote {text}")


def resumable_agent(workspace: Path, rounds: Sequence[list[Any]]) -> Agent:
    """The agent both Hosts run: same tools, each Host its own script."""
    ledger_file = workspace / "ledger.txt"
    tools = [Ledger(ledger_file), Ledger(ledger_file, "note", gated=True)]
    builder = Agent.builder().name("helper").instructions("Keep a ledger.")
    return builder.model(ScriptedModel(list(rounds))).tools(tools).approver(DenyAll()).build()


def ledger_lines(workspace: Path) -> list[str]:
    path = workspace / "ledger.txt"
    return path.read_text(encoding="utf-8").splitlines() if path.exists() else []


async def main(root: Path, workspace: Path, store: str | None) -> None:
    agent = resumable_agent(workspace, [FIRST_ROUND, [Say("never")]])
    async with Host.open(root, agents={"helper": agent}, store=store) as host:
        session = (await host.create_session("helper", workspace, operation="c")).session
        await host.send(session.id, "go", operation="s1")
        async with host.watch(session.id) as updates:
            async for update in updates:
                if isinstance(update, InteractionsChanged) and update.pending:
                    sys.stdout.write(f"PENDING {session.id} {update.pending[0].id}\n")
                    sys.stdout.flush()
                    break
        await trio.sleep_forever()


if __name__ == "__main__":
    trio.run(main, Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3] if len(sys.argv) > 3 else None)
