"""The tool journal: before each call may start, the turn says what it would commit if
the process were lost then; a cancellation at that point commits exactly that."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import trio
import trio.testing

from emelex.agent import (
    AgentCancellation,
    AgentSessionBuilder,
    ToolJournalFailed,
    TurnCancelled,
)
from emelex.agent._turn_rules import INTERRUPTED, NOT_EXECUTED
from emelex.model import Message
from emelex.testing import Call, Say, ScriptedModel, ScriptedTool
from emelex.tools import ToolCancellationPolicy

Make = Callable[..., AgentSessionBuilder]


def tool_texts(messages: tuple[Message, ...]) -> list[str]:
    return [m.text for m in messages if m.role == "tool"]


async def test_a_cancelled_turn_commits_the_last_journalled_checkpoint(
    make_builder: Make, autojump_clock: trio.testing.MockClock
) -> None:
    entries: list[tuple[str, tuple[Message, ...]]] = []

    async def journal(turn_id: str, checkpoint: tuple[Message, ...]) -> None:
        entries.append((turn_id, checkpoint))

    quick = ScriptedTool("a")
    slow = ScriptedTool("b", duration=100, policy=ToolCancellationPolicy.INTERRUPTIBLE)
    model = ScriptedModel([[Call("a", {}), Call("b", {})], [Say("never")]])
    cancellation = AgentCancellation()
    builder = make_builder(model).tool(quick).tool(slow).tool_journal(journal)
    with builder.build() as session:
        async with trio.open_nursery() as nursery:

            async def cancel_while_b_runs() -> None:
                await trio.sleep(5)
                cancellation.cancel()

            nursery.start_soon(cancel_while_b_runs)
            with pytest.raises(TurnCancelled) as caught:
                await session.run("go", cancellation=cancellation)
    assert len(entries) == 2  # one entry before each call
    (first_turn, first), (second_turn, second) = entries
    assert first_turn == second_turn
    # Before "a": both results would be synthetic.
    assert tool_texts(first) == [INTERRUPTED, NOT_EXECUTED]
    # Before "b": a's real result is kept, b counts as interrupted.
    assert tool_texts(second)[1] == INTERRUPTED and tool_texts(second)[0] != INTERRUPTED
    # What the cancellation committed is exactly the last journal entry.
    assert caught.value.rolled_back is False
    assert caught.value.checkpoint == second
    assert session.history == second


async def test_a_failing_journal_stops_the_call_and_fails_the_turn(make_builder: Make) -> None:
    async def journal(turn_id: str, checkpoint: tuple[Message, ...]) -> None:
        raise OSError("disk full")

    tool = ScriptedTool("a")
    model = ScriptedModel([[Call("a", {})], [Say("never")]])
    with make_builder(model).tool(tool).tool_journal(journal).build() as session:
        with pytest.raises(ToolJournalFailed, match="disk full") as caught:
            await session.run("go")
        assert tool.started == []
        assert caught.value.rolled_back is True and session.history == ()
