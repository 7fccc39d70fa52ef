"""A Host process for the resume crash trials of test_crash_resume.py: it drives one
session whose turns mix a ledger tool (appends its call id to ``ledger.txt``) and a gated
tool, answers approvals after a random delay, and reports each receipt on stdout until
it is killed."""

from __future__ import annotations

import contextlib
import random
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import trio

from emelex.agent import DenyAll, ToolCancellationPolicy
from emelex.app import Agent
from emelex.contracts import ApproveResponse, InteractionsChanged, WatchEnded
from emelex.model import ToolDefinition
from emelex.service import Host, InteractionSettled
from emelex.testing import Call, Say, ScriptedModel, Wait
from emelex.tools import ToolInvocation, ToolOutput, tool

SENDS = 4
LEDGER = "ledger.txt"


class Ledger:
    """An ungated tool that appends its call id to the workspace's ledger: a line seen
    twice means a call ran twice."""

    def __init__(self, workspace: Path) -> None:
        self.path = workspace / LEDGER

    @property
    def definition(self) -> ToolDefinition:
        return ToolDefinition("stamp", "Stamp the ledger.", {"type": "object"})

    @property
    def cancellation_policy(self) -> ToolCancellationPolicy:
        return ToolCancellationPolicy.FINISH_ONCE_STARTED

    def approval_reason(self, arguments: Mapping[str, Any]) -> str | None:
        return None

    async def invoke(self, invocation: ToolInvocation) -> ToolOutput:
        await trio.sleep(0.02)
        with self.path.open("a") as ledger:
            ledger.write(invocation.call.id + "\n")
        await trio.sleep(0.02)
        return ToolOutput("stamped")


@tool(needs_approval=True)
async def note(text: str) -> str:
    """Write a note.

    Args:
        text: What to note.
    """
    await trio.sleep(0.02)
    return f"noted {text}"


def resume_agent(workspace: Path, turns: int = 200) -> Agent:
    rounds: list[list[object]] = []
    for n in range(turns):
        rounds.append([Wait(0.03), Call("stamp", {}), Call("note", {"text": f"n{n}"})])
        rounds.append([Say("and "), Wait(0.03), Call("stamp", {})])
        rounds.append([Say("done "), Wait(0.03), Say(f"{n}")])
    model = ScriptedModel(rounds)  # type: ignore[arg-type]
    builder = Agent.builder().name("helper").instructions("Stamp.").model(model)
    builder = builder.tool(Ledger(workspace)).tool(note).approver(DenyAll())
    return builder.on_restart("resume").build()


def report(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


async def answer_later(host: Host, session_id: str, seed: int) -> None:
    rng = random.Random(seed)
    while True:
        async with host.watch(session_id) as updates:
            async for update in updates:
                if isinstance(update, InteractionsChanged):
                    for interaction in update.pending:
                        await trio.sleep(rng.uniform(0.0, 0.4))
                        with contextlib.suppress(InteractionSettled):
                            await host.respond(
                                session_id,
                                interaction.id,
                                ApproveResponse(),
                                operation=f"answer-{interaction.id}",
                            )
                if isinstance(update, WatchEnded):
                    break


async def main(root: Path, workspace: Path, run: int, store: str | None) -> None:
    agents = {"helper": resume_agent(workspace)}
    async with Host.open(root, agents=agents, store=store) as host:
        created = await host.create_session("helper", workspace, operation="create")
        session_id = created.session.id
        report(f"SESSION {session_id}")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(answer_later, host, session_id, run)
            # Every run repeats the sends of earlier runs (retries of possibly lost
            # responses) and adds SENDS new ones.
            for n in range(SENDS * (run + 1)):
                receipt = await host.send(session_id, f"task {n}", operation=f"send-{n}")
                report(f"RECEIPT send-{n} {receipt.invocation_id}")
            await trio.sleep_forever()


if __name__ == "__main__":
    store = None if sys.argv[4] == "-" else sys.argv[4]
    trio.run(main, Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]), store)
