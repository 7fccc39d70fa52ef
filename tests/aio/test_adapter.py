"""from_asyncio / asyncio_tool: asyncio functions as tools, with real asyncio streams and
subprocesses, and cancellation reaching the asyncio side."""

from __future__ import annotations

import asyncio
import os
import sys

import pytest
import trio
import trio_asyncio

from emelex import EmelexError
from emelex.agent import AgentCancellation, ToolProgress, TurnCancelled
from emelex.aio import (
    AsyncioLoopMissing,
    AsyncioTaskCancelled,
    asyncio_tool,
    from_asyncio,
    open_asyncio_loop,
    runs_on_asyncio,
)
from emelex.tools import InvalidToolFunction, ToolCallContext, ToolOutput, tool

from .helpers import LineServer, one_call_session


async def shout(port: int, text: str) -> str:
    """Send a line to the shouting server and return its answer.

    Args:
        port: The server's TCP port on 127.0.0.1.
        text: One line of text.
    """
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(text.encode() + b"\n")
        await writer.drain()
        return (await reader.readline()).decode().strip()
    finally:
        writer.close()
        await writer.wait_closed()


def test_the_adapter_keeps_what_tool_reads_from_the_function() -> None:
    plain = tool(shout)
    adapted = asyncio_tool(shout)
    assert adapted.definition == plain.definition
    assert adapted.parameters["properties"]["port"] == {
        "type": "integer",
        "description": "The server's TCP port on 127.0.0.1.",
    }
    stacked = tool(interruptible=True)(from_asyncio(shout))
    assert stacked.definition == plain.definition
    assert stacked.cancellation_policy is tool(interruptible=True)(shout).cancellation_policy
    assert runs_on_asyncio(adapted) and runs_on_asyncio(stacked.function)
    assert not runs_on_asyncio(plain)


def test_only_async_def_functions_are_adapted() -> None:
    def blocking(x: int) -> int:
        return x

    async def agen(x: int):  # type: ignore[no-untyped-def]
        yield x

    with pytest.raises(InvalidToolFunction, match="asyncio `async def`"):
        from_asyncio(blocking)  # type: ignore[arg-type]
    with pytest.raises(InvalidToolFunction):
        from_asyncio(agen)


async def test_a_tool_talks_to_a_real_asyncio_server_in_a_turn() -> None:
    server = LineServer()
    async with open_asyncio_loop():
        port = await server.start()
        with one_call_session(asyncio_tool(shout), {"port": port, "text": "hi there"}) as session:
            with trio.fail_after(10):
                turn = await session.run("go")
        await server.stop()
    results = [m.text for m in turn.messages if m.role == "tool"]
    assert results == ["HI THERE"]


async def test_cancelling_the_turn_cancels_the_asyncio_task() -> None:
    server = LineServer(reply=False)
    seen: list[str] = []
    tasks: list[asyncio.Task[object]] = []

    @asyncio_tool(interruptible=True)
    async def wait_for_answer(port: int) -> str:
        """Waits for an answer that never comes."""
        task = asyncio.current_task()
        assert task is not None
        tasks.append(task)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            writer.write(b"hello\n")
            await writer.drain()
            return (await reader.readline()).decode()
        except asyncio.CancelledError:
            seen.append("asyncio.CancelledError")
            raise
        finally:
            writer.close()

    async with open_asyncio_loop() as loop:
        port = await server.start()
        with one_call_session(wait_for_answer, {"port": port}) as session:
            cancellation = AgentCancellation()
            async with trio.open_nursery() as nursery:

                async def cancel_once_waiting() -> None:
                    await server.waiting.wait()
                    cancellation.cancel()

                nursery.start_soon(cancel_once_waiting)
                with trio.fail_after(10), pytest.raises(TurnCancelled):
                    await session.run("go", cancellation=cancellation)
            history = session.history
        assert seen == ["asyncio.CancelledError"]
        assert tasks[0].cancelled()
        # The cancellation reached the network: the server saw the client close.
        with trio.fail_after(5):
            await server.client_gone.wait()
        await server.stop()
        assert [t for t in asyncio.all_tasks(loop) if not t.done()] == []
    assert next(m.text for m in history if m.role == "tool").startswith("interrupted")


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def test_cancelling_stops_an_asyncio_subprocess() -> None:
    up = trio.Event()
    pids: list[int] = []

    @asyncio_tool(interruptible=True)
    async def child_then_wait(seconds: float) -> int:
        """Start a long child process and wait for it (killing it when cancelled)."""
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            f"import time; print('up', flush=True); time.sleep({seconds})",
            stdout=asyncio.subprocess.PIPE,
        )
        pids.append(process.pid)
        assert process.stdout is not None
        try:
            await process.stdout.readline()
            up.set()  # a Trio event, set from the asyncio side
            return await process.wait()
        except asyncio.CancelledError:
            process.kill()
            await process.wait()
            raise

    async with open_asyncio_loop():
        with one_call_session(child_then_wait, {"seconds": 60}) as session:
            cancellation = AgentCancellation()
            async with trio.open_nursery() as nursery:

                async def cancel_once_up() -> None:
                    await up.wait()
                    cancellation.cancel()

                nursery.start_soon(cancel_once_up)
                with trio.fail_after(20), pytest.raises(TurnCancelled):
                    await session.run("go", cancellation=cancellation)
    assert len(pids) == 1 and not alive(pids[0])


async def test_a_function_that_swallows_cancellation_still_cancels_the_caller() -> None:
    finished: list[str] = []

    @from_asyncio
    async def stubborn() -> str:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            finished.append("swallowed")
        return "kept going"

    async with open_asyncio_loop():
        with trio.move_on_after(0.05) as scope:
            await stubborn()
            finished.append("returned to the caller")  # must not run
    assert scope.cancelled_caught
    assert finished == ["swallowed"]


async def test_an_asyncio_task_cancelling_itself_is_a_typed_failure() -> None:
    @from_asyncio
    async def gives_up() -> str:
        raise asyncio.CancelledError

    async with open_asyncio_loop():
        with pytest.raises(AsyncioTaskCancelled, match="gives_up"):
            await gives_up()
    assert issubclass(AsyncioTaskCancelled, EmelexError)


async def test_without_a_loop_the_call_fails_clearly() -> None:
    adapted = asyncio_tool(shout)
    with pytest.raises(AsyncioLoopMissing, match="open_asyncio_loop"):
        await adapted.function(port=1, text="x")
    assert issubclass(AsyncioLoopMissing, EmelexError)
    # In a turn the model gets an error result naming the fix; the turn goes on.
    with one_call_session(adapted, {"port": 1, "text": "x"}) as session:
        with trio.fail_after(10):
            turn = await session.run("go")
    result = next(m for m in turn.messages if m.role == "tool")
    assert "AsyncioLoopMissing" in result.text and "open_asyncio_loop" in result.text


async def test_errors_from_the_asyncio_side_reach_the_model_as_tool_errors() -> None:
    async with open_asyncio_loop():
        # Nothing listens on port 1: asyncio raises ConnectionRefusedError.
        with one_call_session(asyncio_tool(shout), {"port": 1, "text": "x"}) as session:
            with trio.fail_after(10):
                turn = await session.run("go")
    result = next(m for m in turn.messages if m.role == "tool")
    assert "ConnectionRefusedError" in result.text


def test_tool_output_values_pass_through() -> None:
    async def made() -> ToolOutput:
        await asyncio.sleep(0)
        return ToolOutput("as is")

    async def main() -> ToolOutput:
        async with open_asyncio_loop():
            result: ToolOutput = await from_asyncio(made)()
            return result

    assert trio.run(main) == ToolOutput("as is")


async def test_trio_calls_from_the_asyncio_side_go_through_trio_as_aio() -> None:
    @asyncio_tool
    async def report(ctx: ToolCallContext, steps: int) -> str:
        """Reports progress from asyncio code."""
        await asyncio.sleep(0)
        await trio_asyncio.trio_as_aio(ctx.progress)("half", completed=1, total=steps)
        return f"{steps} steps"

    events: list[object] = []
    async with open_asyncio_loop():
        with one_call_session(report, {"steps": 2}) as session:
            with trio.fail_after(10):
                turn = await session.run("go", on_event=events.append)
    assert next(m.text for m in turn.messages if m.role == "tool") == "2 steps"
    progress = [e for e in events if isinstance(e, ToolProgress)]
    assert [(p.message, p.completed, p.total) for p in progress] == [("half", 1, 2)]


def test_stacked_under_tool_annotations_may_name_local_classes() -> None:
    import attrs

    @attrs.frozen
    class Point:
        x: int
        y: int

    @tool
    @from_asyncio
    async def norm(point: Point) -> int:
        """Manhattan norm."""
        await asyncio.sleep(0)
        return abs(point.x) + abs(point.y)

    assert set(norm.parameters["properties"]["point"]["properties"]) == {"x", "y"}

    async def main() -> int:
        async with open_asyncio_loop():
            result: int = await norm.function(point=Point(3, -4))
            return result

    assert trio.run(main) == 7
