"""The session authority the Host builds for every file request."""

from __future__ import annotations

from pathlib import Path

import pytest

from emelex.service.workspace._files_host import hidden_paths, session_authority
from emelex.tools.workspace import PatternError
from tests.service.files_support import files_session, list_all, names


def test_equal_hidden_paths_are_compiled_once() -> None:
    first = hidden_paths(["*.env", "secrets/**"])
    assert hidden_paths(("*.env", "secrets/**")) is first
    assert hidden_paths(("*.env",)) is not first
    assert first.hides(("a", "b.env")) and not first.hides(("a", "b.txt"))
    assert not hidden_paths(())


def test_invalid_hidden_paths_still_fail_with_their_typed_error() -> None:
    with pytest.raises(PatternError):
        hidden_paths(["ok", 3])  # type: ignore[list-item]
    with pytest.raises(PatternError):
        hidden_paths(["[z-a]"])
    with pytest.raises(PatternError):  # a failure is never remembered as a success
        hidden_paths(["[z-a]"])


async def test_every_request_of_a_session_shares_its_compiled_hidden_paths(
    tmp_path: Path,
) -> None:
    async with files_session(tmp_path, hidden=("*.env",)) as files:
        for index in range(300):
            (files.workspace / f"{index:03d}.env").write_bytes(b"")
            (files.workspace / f"{index:03d}.txt").write_bytes(b"")
        pages, entries = await list_all(files.host, files.session_id)
        assert len(pages) > 1
        assert names(entries) == [f"{index:03d}.txt".encode() for index in range(300)]
        host = files.host
        assert host._workspace.authority(files.session_id).hidden is (
            host._workspace.authority(files.session_id).hidden
        )
        # A fresh authority, built as the Host does, hides the same.
        again = session_authority(str(files.workspace), ("*.env",), tmp_path / "none")
        assert again.hidden is host._workspace.authority(files.session_id).hidden
