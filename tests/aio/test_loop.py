"""open_asyncio_loop: one loop per engine or session, found by every task inside."""

from __future__ import annotations

import asyncio

import trio

from emelex.aio import asyncio_tool, current_asyncio_loop, open_asyncio_loop
from emelex.app import Agent, Engine
from emelex.testing import ApproveAll, Call, Say, ScriptedModel


async def loop_id() -> str:
    """Names the asyncio loop this call ran on."""
    return str(id(asyncio.get_running_loop()))


async def test_nested_opens_reuse_the_loop_and_exit_closes_it() -> None:
    assert current_asyncio_loop() is None
    async with open_asyncio_loop() as outer:
        assert current_asyncio_loop() is outer
        async with open_asyncio_loop() as inner:
            assert inner is outer
        assert not outer.is_closed()
    assert outer.is_closed()
    assert current_asyncio_loop() is None


async def test_tasks_started_inside_find_the_loop() -> None:
    found: list[object] = []

    async def child() -> None:
        found.append(current_asyncio_loop())

    async with open_asyncio_loop() as loop, trio.open_nursery() as nursery:
        nursery.start_soon(child)
    assert found == [loop]


async def test_leaving_the_block_cancels_asyncio_tasks_still_running() -> None:
    seen: list[str] = []

    async def background() -> None:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise

    async with open_asyncio_loop() as loop:
        loop.create_task(background())
        await trio.sleep(0.01)
    assert seen == ["cancelled"]


async def test_one_loop_serves_every_session_of_an_engine() -> None:
    lookup = asyncio_tool(loop_id)
    approver = ApproveAll()
    answers: list[str] = []
    async with open_asyncio_loop() as loop, Engine() as engine:
        for _ in range(2):
            model = ScriptedModel([[Call("loop_id", {})], [Say("done")]])
            agent = (
                Agent.builder()
                .name("aio")
                .instructions("Use the tool.")
                .model(model)
                .tools([lookup])
                .approver(approver)
                .build()
            )
            async with await engine.create(agent).start() as session:
                with trio.fail_after(10):
                    turn = await session.send_and_wait("go")
            answers += [m.text for m in turn.messages if m.role == "tool"]
    assert answers == [str(id(loop))] * 2


def test_run_sync_still_refuses_inside_asyncio_run_after_emelex_aio_is_imported() -> None:
    # Importing trio-asyncio makes asyncio.run() itself run on Trio (a process-wide
    # patch); the user is in an asyncio loop all the same and gets that message.
    import emelex
    from emelex.app import LoopAlreadyRunning

    caught: list[BaseException] = []

    async def notebook_cell() -> None:
        try:
            emelex.run_sync(trio.sleep, 0)
        except LoopAlreadyRunning as exc:
            caught.append(exc)

    asyncio.run(notebook_cell())
    assert len(caught) == 1 and "asyncio loop" in str(caught[0])
