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
from emelex.tools.builtin import ReadFileTool
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
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(ticker.run)
            call = invocation(
                tool, {"path": "huge.log", "offset": 1_000_000_000}, cancellation=cancellation
            )
            nursery.start_soon(_cancel_later, cancellation)
            output = await tool.invoke(call)
            stopped = time.perf_counter() - _CANCELLED_AT[-1]
            nursery.cancel_scope.cancel()
    assert output.is_error and "stopped: the turn was cancelled" in output.text
    assert stopped < 0.5
    assert ticker.longest_gap < 0.25


_CANCELLED_AT: list[float] = []


async def _cancel_later(cancellation: AgentCancellation) -> None:
    await trio.sleep(0.2)
    _CANCELLED_AT.append(time.perf_counter())
    cancellation.cancel()


@pytest.mark.usefixtures("dense")
async def test_the_callers_timeout_stops_a_long_scan(root: Path, ws: Workspace) -> None:
    _sparse(root)
    with trio.fail_after(20):
        with trio.move_on_after(0.2) as scope:
            started = time.perf_counter()
            await invoke(ReadFileTool(ws), {"path": "huge.log", "offset": 1_000_000_000})
        late = time.perf_counter() - started - 0.2
    assert scope.cancelled_caught
    assert late < 0.5


def test_offsets_still_count_lines_exactly(root: Path, ws: Workspace) -> None:
    (root / "f.txt").write_bytes(b"".join(b"line %d\n" % n for n in range(1, 400_001)))
    content = _read.read_file(ws, "f.txt", offset_line=300_000, limit_lines=2)
    assert content.text == "line 300000\nline 300001\n"
    assert os.path.getsize(root / "f.txt") > 2 * 1024 * 1024  # spans several chunks
