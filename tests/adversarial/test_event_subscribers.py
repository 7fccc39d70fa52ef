"""Spec gap of issue 18: an ``events()`` subscriber that never reads must not stall the
session. It used to: the turn waited for room in its full channel forever. Now the
turn yields to consumers that keep reading and drops one that does not, which gets a
typed lagged end (:class:`EventsLagged`) after the events in its channel.
"""

from __future__ import annotations

import pytest
import trio
import trio.testing

from emelex.agent import AgentEvent, AnswerDelta, ToolProposed, TurnCompleted
from emelex.app import Agent, Engine, EventsLagged, EventStream, FunctionTool, Session
from emelex.testing import Call, Say, ScriptedModel


async def noop(arguments: object) -> str:
    return "ok"


NOOP = FunctionTool("noop", "Does nothing.", {"type": "object"}, noop)


async def start(model: ScriptedModel, buffer: int) -> Session:
    agent = Agent.builder().name("t").instructions("Be brief.").model(model).tool(NOOP).build()
    return await Engine().create(agent).event_buffer(buffer).start()


async def read_all(stream: EventStream, into: list[AgentEvent], turns: int = 1) -> None:
    async for event in stream:
        into.append(event)
        if isinstance(event, TurnCompleted):
            turns -= 1
            if not turns:
                return


async def test_a_subscriber_that_never_reads_does_not_stall_the_session(
    autojump_clock: trio.testing.MockClock,
) -> None:
    model = ScriptedModel([[Say(f"{i} ") for i in range(100)], [Say("again")]])
    session = await start(model, buffer=4)
    idle = session.events()
    with trio.fail_after(60):  # autojump: a turn waiting for a reader fails at once
        turn = await session.send_and_wait("count")
        await session.send_and_wait("again")  # and the session stays usable
    assert turn.response.text == "".join(f"{i} " for i in range(100))
    assert idle.lagged
    held = [await idle.receive() for _ in range(idle.buffered)]
    assert [type(e).__name__ for e in held[:2]] == ["TurnStarted", "ModelStarted"]
    with pytest.raises(EventsLagged, match="8 events behind"):
        await idle.receive()
    with pytest.raises(EventsLagged):
        async for _ in idle:
            pass
    await session.aclose()


async def test_a_reader_beside_a_stalled_subscriber_gets_every_event(
    autojump_clock: trio.testing.MockClock,
) -> None:
    model = ScriptedModel([[Say(f"{i} ") for i in range(100)]])
    session = await start(model, buffer=1)
    idle = session.events()
    seen: list[AgentEvent] = []
    with trio.fail_after(60):
        async with session.events() as live, trio.open_nursery() as nursery:
            nursery.start_soon(read_all, live, seen)
            await session.send_and_wait("count")
    assert idle.lagged
    text = "".join(e.text for e in seen if isinstance(e, AnswerDelta))
    assert text == "".join(f"{i} " for i in range(100))
    assert isinstance(seen[-1], TurnCompleted)
    await session.aclose()


async def test_a_reader_keeps_up_with_a_burst_larger_than_its_buffer(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # One tool batch emits a proposal per call at once: more than the buffer holds.
    model = ScriptedModel([[Call("noop", {"n": n}) for n in range(20)], [Say("done")]])
    session = await start(model, buffer=2)
    seen: list[AgentEvent] = []
    with trio.fail_after(60):
        async with session.events() as live, trio.open_nursery() as nursery:
            nursery.start_soon(read_all, live, seen)
            await session.send_and_wait("twenty calls")
            assert not live.lagged
    assert sum(isinstance(e, ToolProposed) for e in seen) == 20
    assert isinstance(seen[-1], TurnCompleted)
    await session.aclose()
