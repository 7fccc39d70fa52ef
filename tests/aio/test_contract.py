"""check_tool_contract on tools adapted from asyncio: it opens the loop itself (sync
form) or reuses yours (async form), and catches what they leave behind."""

from __future__ import annotations

import asyncio
import sys

import pytest
import trio

from emelex.aio import asyncio_tool, from_asyncio, open_asyncio_loop
from emelex.testing import ToolContractViolation, check_tool_contract, check_tool_contract_async

from .helpers import LineServer


@asyncio_tool(interruptible=True)
async def nap(seconds: float) -> str:
    """Sleeps on the asyncio loop."""
    await asyncio.sleep(seconds)
    return "rested"


@asyncio_tool(interruptible=True)
async def run_child(seconds: float) -> str:
    """Runs a child process for a while; kills it when cancelled."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c", f"import time; time.sleep({seconds})"
    )
    try:
        return f"exit {await process.wait()}"
    except asyncio.CancelledError:
        process.kill()
        await process.wait()
        raise


def test_the_sync_form_opens_a_loop_for_each_run() -> None:
    report = check_tool_contract(nap, {"seconds": 0.01}, runs=8, max_cancel_delay=0.02)
    assert report.violations == ()
    assert report.records[0].result == "ok"
    assert report.cancelled >= 1


def test_an_asyncio_subprocess_tool_that_cleans_up_passes() -> None:
    report = check_tool_contract(run_child, {"seconds": 0.2}, runs=6, max_cancel_delay=0.1)
    assert report.violations == ()
    assert any(r.started and not r.completed for r in report.records)


async def test_the_async_form_reuses_the_open_loop_and_a_real_server() -> None:
    server = LineServer()

    @asyncio_tool(interruptible=True)
    async def shout(text: str) -> str:
        """Asks the shouting server."""
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        try:
            writer.write(text.encode() + b"\n")
            await writer.drain()
            return (await reader.readline()).decode().strip()
        finally:
            writer.close()
            await writer.wait_closed()

    async with open_asyncio_loop():
        await server.start()
        report = await check_tool_contract_async(
            shout, {"text": "hey"}, runs=6, max_cancel_delay=0.005
        )
        await server.stop()
    assert report.violations == ()
    assert report.records[0].result == "ok"


async def test_a_leaked_asyncio_task_is_caught() -> None:
    leaked: list[asyncio.Task[None]] = []

    @asyncio_tool
    async def fire_and_forget() -> str:
        """Starts background work and returns."""
        leaked.append(asyncio.ensure_future(asyncio.sleep(60)))
        return "started"

    async with open_asyncio_loop():
        with pytest.raises(ToolContractViolation, match="left behind: asyncio task"):
            await check_tool_contract_async(fire_and_forget, {}, runs=2, leak_grace=0.05)
        leaked[0].cancel()


async def test_a_leaked_asyncio_subprocess_is_caught() -> None:
    processes: list[asyncio.subprocess.Process] = []

    @asyncio_tool
    async def spawn() -> str:
        """Starts a child process and never waits for it."""
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-c", "import time; time.sleep(60)"
        )
        processes.append(process)
        return "spawned"

    @from_asyncio
    async def reap(process: asyncio.subprocess.Process) -> None:
        process.kill()
        await process.wait()

    async with open_asyncio_loop():
        with pytest.raises(ToolContractViolation, match="left behind: process") as caught:
            await check_tool_contract_async(spawn, {}, runs=2, leak_grace=0.05)
        with trio.fail_after(10):
            await reap(processes[0])
    assert str(processes[0].pid) in str(caught.value)
