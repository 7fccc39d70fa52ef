"""Issue 18 item 6: ``edit_file`` must know the result's size before building it.

Replacing a 1-byte text with 100 KB at 10,000 places built about 1 GB of text (1.95 GB
peak) before the size check refused it. The size is occurrences x delta: computed
first, the edit is refused with the memory of the inputs only.
"""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import pytest

from emelex._errors import LimitExceeded
from emelex.tools.builtin import EditFileTool
from emelex.tools.workspace import MAX_WRITE_BYTES, Workspace, edit_file

from .conftest import invoke

PLACES = 1_000  # 100 MB of result: well past the 16 MiB ceiling, cheap to refuse
BIG = "y" * 100_000


def test_oversized_edit_is_refused_before_it_is_built(root: Path, ws: Workspace) -> None:
    (root / "f.txt").write_text("x\n" * PLACES)
    tracemalloc.start()
    try:
        with pytest.raises(LimitExceeded) as caught:
            edit_file(ws, "f.txt", "x", BIG, count=PLACES)
        _current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert caught.value.actual == 2 * PLACES + PLACES * (len(BIG) - 1)
    assert peak < 8 * 1024 * 1024  # the old code peaked at about 200 MB here
    assert (root / "f.txt").read_text() == "x\n" * PLACES


def test_an_edit_up_to_the_ceiling_still_applies(root: Path, ws: Workspace) -> None:
    (root / "f.txt").write_text("a" * 16)
    result = edit_file(ws, "f.txt", "a", "b" * (MAX_WRITE_BYTES // 16), count=16)
    assert result.bytes_written == MAX_WRITE_BYTES
    with pytest.raises(LimitExceeded):
        piece = MAX_WRITE_BYTES // 16
        edit_file(ws, "f.txt", "b" * piece, "c" * (piece + 1), count=16)


async def test_the_tool_states_the_growth_and_refuses_without_a_worker(
    root: Path, ws: Workspace
) -> None:
    (root / "f.txt").write_text("x\n" * PLACES)
    tool = EditFileTool(ws)
    arguments = {"path": "f.txt", "old": "x", "new": BIG, "count": PLACES}
    reason = tool.approval_reason(arguments)
    assert reason is not None
    assert f"grows by {PLACES * (len(BIG) - 1)} bytes" in reason
    tracemalloc.start()
    try:
        output = await invoke(tool, arguments, approved=True)
        _current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert output.is_error
    assert "edit_file_bytes exceeded" in output.text
    assert peak < 8 * 1024 * 1024
