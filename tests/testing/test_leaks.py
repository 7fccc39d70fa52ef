"""The leak finder behind check_tool_contract: what counts as left behind."""

from __future__ import annotations

import threading

import trio

from emelex.testing._leaks import left_behind, snapshot


async def test_nothing_new_is_nothing_left() -> None:
    before = snapshot()
    await trio.to_thread.run_sync(lambda: None)  # leaves an idle cached worker
    assert await left_behind(before, 0.05) == []


async def test_work_that_ends_within_the_grace_is_not_a_leak() -> None:
    before = snapshot()
    thread = threading.Thread(target=lambda: __import__("time").sleep(0.05), name="brief")
    thread.start()
    assert await left_behind(before, 5.0) == []
    thread.join()


async def test_a_running_thread_and_a_task_are_described() -> None:
    release = threading.Event()
    before = snapshot()
    thread = threading.Thread(target=release.wait, name="still-here")
    thread.start()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(trio.sleep_forever, name="still-running")
        await trio.testing.wait_all_tasks_blocked()
        found = await left_behind(before, 0.01)
        nursery.cancel_scope.cancel()
    release.set()
    thread.join()
    assert any(item.startswith("thread 'still-here' at ") for item in found)
    assert "Trio task 'still-running'" in found


async def test_a_child_process_is_described_with_its_command_line() -> None:
    before = snapshot()
    if before.children is None:  # no /proc: nothing to compare
        return
    process = await trio.lowlevel.open_process(["sleep", "30"])
    try:
        found = await left_behind(before, 0.01)
    finally:
        process.kill()
        await process.wait()
    assert found == [f"process {process.pid}: sleep 30"]
    assert await left_behind(before, 1.0) == []  # waited for: gone
