"""A Host process for the crash trials of test_crash.py: it drives one session (sends,
answers every approval) and reports each receipt on stdout until it is killed."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

import trio

from emelex.agent import DenyAll
from emelex.app import Agent
from emelex.contracts import ApproveResponse, InteractionsChanged, WatchEnded
from emelex.service import Host, InteractionSettled
from emelex.testing import Call, Say, ScriptedModel, Wait
from emelex.tools import tool

SENDS = 6


@tool(needs_approval=True)
async def note(text: str) -> str:
    """Write a note into the workspace.

    Args:
        text: What to note.
    """
    await trio.sleep(0.05)
    return f"noted {text}"


def crash_agent(turns: int = 200) -> Agent:
    rounds: list[list[object]] = []
    for n in range(turns):
        rounds.append([Wait(0.03), Call("note", {"text": f"n{n}"})])
        rounds.append([Say("done "), Wait(0.03), Say(f"{n}")])
    model = ScriptedModel(rounds)  # type: ignore[arg-type]
    builder = Agent.builder().name("helper").instructions("Take notes.").model(model)
    return builder.tool(note).approver(DenyAll()).build()


def report(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


async def answer_everything(host: Host, session_id: str) -> None:
    while True:
        async with host.watch(session_id) as updates:
            async for update in updates:
                if isinstance(update, InteractionsChanged):
                    for interaction in update.pending:
                        with contextlib.suppress(InteractionSettled):  # answered before a kill
                            await host.respond(
                                session_id,
                                interaction.id,
                                ApproveResponse(),
                                operation=f"answer-{interaction.id}",
                            )
                if isinstance(update, WatchEnded):
                    break


async def main(root: Path, workspace: Path, run: int) -> None:
    async with Host.open(root, agents={"helper": crash_agent()}) as host:
        created = await host.create_session("helper", workspace, operation="create")
        session_id = created.session.id
        report(f"SESSION {session_id}")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(answer_everything, host, session_id)
            # Every run repeats the sends of earlier runs (retries of possibly lost
            # responses) and adds SENDS new ones.
            for n in range(SENDS * (run + 1)):
                receipt = await host.send(session_id, f"task {n}", operation=f"send-{n}")
                report(f"RECEIPT send-{n} {receipt.invocation_id}")
            await trio.sleep_forever()


if __name__ == "__main__":
    trio.run(main, Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]))
