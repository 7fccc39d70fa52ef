"""Issue 18 item 5: ``read_file`` with a huge ``offset`` on a large or sparse file.

A 20 GiB sparse file made the line scan read 20 GiB of zeros (33 s) and the cancel was
ignored. Holes hold no newline, so the scan now jumps over them; and a scan that really
has that much data to read checks an abort flag between 1 MiB chunks.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import trio

from emelex.runtime import AgentCancellation
from emelex.tools.builtin import ListDirectoryTool, ReadFileTool
from emelex.tools.workspace import Workspace, _read

from .conftest import Ticker, invocation, invoke

SIZE = 20 * 1024**3
HEAD_LINES = 16_384  # 1 MiB of text first, so the file is not taken for binary


def _sparse(root: Path) -> Path:
    path = root / "huge.log"
    with path.open("wb") as handle:
        handle.write(("h" * 63 + "\n").encode() * HEAD_LINES)
        handle.seek(SIZE - 6)
        handle.write(b"x\ny\nz\n")
    assert path.stat().st_blocks * 512 < 4 * 1024 * 1024  # really sparse
    return path


async def test_huge_offset_on_a_sparse_file_is_quick(root: Path, ws: Workspace) -> None:
    _sparse(root)
    tool = ReadFileTool(ws)
    with trio.fail_after(10):
        started = time.perf_counter()
        past = await invoke(tool, {"path": "huge.log", "offset": 1_000_000_000})
        elapsed = time.perf_counter() - started
        # The hole's zeros and "x" form line HEAD_LINES + 1; "y" and "z" follow.
        tail = await invoke(tool, {"path": "huge.log", "offset": HEAD_LINES + 2})
    assert past.text == (f'["huge.log": no lines at or after line 1000000000; {SIZE}-byte file]')
    assert elapsed < 2.0
    assert tail.text.splitlines()[1:] == ["y", "z", "[end of file]"]


@pytest.fixture
def dense(monkeypatch: pytest.MonkeyPatch) -> None:
    """Read holes as data, as on a filesystem without SEEK_DATA (or a file really that
    large): then only the abort flag can stop the scan."""
    monkeypatch.setattr(_read, "_SEEK_HOLES", False)


@pytest.mark.usefixtures("dense")
async def test_cancelling_the_turn_stops_a_long_scan(root: Path, ws: Workspace) -> None:
    _sparse(root)
    tool = ReadFileTool(ws)
    cancellation = AgentCancellation()
    ticker = Ticker()
    cancelled_at: list[float] = []

    async def cancel_later() -> None:
        await trio.sleep(0.2)
        cancelled_at.append(time.perf_counter())
        cancellation.cancel()

    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(ticker.run)
            nursery.start_soon(cancel_later)
            call = invocation(
                tool, {"path": "huge.log", "offset": 1_000_000_000}, cancellation=cancellation
            )
            output = await tool.invoke(call)
            stopped = time.perf_counter() - cancelled_at[0]
            nursery.cancel_scope.cancel()
    assert output.is_error and "stopped: the turn was cancelled" in output.text
    assert stopped < 0.25
    assert ticker.longest_gap < 0.25


@pytest.mark.usefixtures("dense")
async def test_the_callers_timeout_stops_a_long_scan(root: Path, ws: Workspace) -> None:
    _sparse(root)
    with trio.fail_after(20):
        with trio.move_on_after(0.2) as scope:
            started = time.perf_counter()
            await invoke(ReadFileTool(ws), {"path": "huge.log", "offset": 1_000_000_000})
        late = time.perf_counter() - started - 0.2
    assert scope.cancelled_caught
    assert late < 0.25


def test_offsets_still_count_lines_exactly(root: Path, ws: Workspace) -> None:
    (root / "f.txt").write_bytes(b"".join(b"line %d\n" % n for n in range(1, 400_001)))
    content = _read.read_file(ws, "f.txt", offset_line=300_000, limit_lines=2)
    assert content.text == "line 300000\nline 300001\n"
    assert os.path.getsize(root / "f.txt") > 2 * 1024 * 1024  # spans several chunks


async def test_a_cancelled_listing_of_a_huge_directory_stops(root: Path, ws: Workspace) -> None:
    for index in range(5000):
        (root / f"f{index:05d}").touch()
    cancellation = AgentCancellation()
    cancellation.cancel()
    tool = ListDirectoryTool(ws)
    with trio.fail_after(10):
        output = await tool.invoke(invocation(tool, {"path": "."}, cancellation=cancellation))
    assert output.is_error and "stopped" in output.text
    assert "5000 entries" in (await invoke(tool, {"path": "."})).text
