"""Issue 18 items 4 and 14: what a killed write leaves behind.

A process killed in the middle of ``write_file("server.key", ...)`` left
``.server.key.emelex-tmp-<id>``, a full copy of the key, that ``read_file`` read without
approval and ``grep`` searched; such files were never cleaned. The write here is killed
for real (``SIGKILL`` of a child process holding it just before the rename), then a new
workspace (a new session) looks at what is left.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from emelex.tools.builtin import FindFilesTool, GrepTool, ListDirectoryTool, ReadFileTool
from emelex.tools.workspace import (
    SecretPath,
    Workspace,
    _leftovers,
    find_files,
    grep,
    list_directory,
    list_leftovers,
    read_file,
    write_file,
)
from emelex.tools.workspace._mutate import _HOOKS

from .conftest import invoke

KEY = "-----BEGIN PRIVATE KEY-----\nMARK-7d41 secret material\n"
LONG_NAME = "n" * 240 + ".key"

# Each write runs on its own thread and stops just before its rename; once every one has
# said so, the whole process is killed: one real crash leaves every temporary file.
_KILLED_WRITER = textwrap.dedent(
    """
    import json, sys, threading, time
    from emelex.tools.workspace import Workspace, write_file
    from emelex.tools.workspace._mutate import _HOOKS

    def hold(parent_fd, name, temp):
        sys.stdout.write("ready\\n")
        sys.stdout.flush()
        time.sleep(60)

    _HOOKS["before_install"] = hold
    job = json.load(sys.stdin)
    ws = Workspace.open(job["root"])
    for path, content in job["writes"]:
        threading.Thread(
            target=write_file,
            args=(ws, path, content),
            kwargs={"allow_secret": True, "create_parents": True},
        ).start()
    time.sleep(60)
    """
)


def _killed_writes(root: Path, writes: list[tuple[str, str]]) -> None:
    """Run the ``write_file`` calls in a child process and SIGKILL it mid-way."""
    with subprocess.Popen(
        [sys.executable, "-c", _KILLED_WRITER], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    ) as child:
        try:
            assert child.stdin is not None and child.stdout is not None
            child.stdin.write(json.dumps({"root": str(root), "writes": writes}).encode())
            child.stdin.close()
            for _ in writes:
                assert child.stdout.readline() == b"ready\n"
        finally:
            child.send_signal(signal.SIGKILL)
            child.wait(10)


def _temp_names(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if ".emelex-tmp-" in p.name)


@pytest.fixture
def no_margin(monkeypatch: pytest.MonkeyPatch) -> None:
    """Count leftovers as stale as soon as the workspace is opened after them (the real
    margin, 2 s, absorbs coarse file clocks; the tests wait 10 ms instead)."""
    monkeypatch.setattr(_leftovers, "STALE_MARGIN", 0.0)


@pytest.fixture(scope="module")
def crashed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tree left by one killed process: a key, three writes of one file, a long name."""
    root = tmp_path_factory.mktemp("crashed")
    writes = [("keys/server.key", KEY), (LONG_NAME, KEY)]
    writes += [("data.bin", "z" * 1_000_000)] * 3
    _killed_writes(root, writes)
    return root


@pytest.fixture
def killed(root: Path, crashed: Path, no_margin: None) -> str:
    """A copy of the crashed tree as the workspace; the key's temporary name in it."""
    shutil.copytree(crashed, root, dirs_exist_ok=True)
    [name] = _temp_names(root / "keys")
    assert (root / "keys" / name).read_text() == KEY
    time.sleep(0.01)  # the next workspace opens strictly after the leftovers were made
    return f"keys/{name}"


async def test_a_leftover_is_as_secret_as_the_name_it_stands_for(root: Path, killed: str) -> None:
    with Workspace.open(root) as ws:
        reason = ReadFileTool(ws).approval_reason({"path": killed})
        assert reason is not None and "private key" in reason
        with pytest.raises(SecretPath):
            read_file(ws, killed)
        refused = await invoke(ReadFileTool(ws), {"path": killed})
        assert refused.is_error and "MARK-7d41" not in refused.text
        approved = await invoke(ReadFileTool(ws), {"path": killed}, approved=True)
        assert "MARK-7d41" in approved.text


async def test_recursive_tools_skip_leftovers(root: Path, killed: str) -> None:
    (root / "keys" / "notes.txt").write_text("MARK-7d41 is mentioned here\n")
    with Workspace.open(root) as ws:
        searched = grep(ws, "MARK-7d41", include_secrets=True)
        assert [line.path for line in searched.lines] == ["keys/notes.txt"]
        assert find_files(ws, "**/*", include_secrets=True).matches == ("keys/notes.txt",)
        listing = list_directory(ws, "keys")
        assert [entry.name for entry in listing.entries] == ["notes.txt"]
        assert listing.leftovers == 1
        shown = await invoke(ListDirectoryTool(ws), {"path": "keys"})
        assert "1 leftover file of interrupted writes not shown" in shown.text
        grepped = await invoke(GrepTool(ws), {"pattern": "secret material"})
        assert grepped.text.startswith("[0 matching lines")
        found = await invoke(FindFilesTool(ws), {"pattern": "**/*"})
        assert ".emelex-tmp-" not in found.text


def test_leftovers_are_listed(root: Path, killed: str) -> None:
    with Workspace.open(root) as ws:
        listing = list_leftovers(ws, "keys")
    [leftover] = listing.leftovers
    assert leftover.path == killed
    assert leftover.kind == "temporary"
    assert leftover.stands_for == "keys/server.key"
    assert leftover.size == len(KEY)
    assert not leftover.shortened and not listing.truncated


def test_the_next_write_in_the_directory_cleans_stale_temporaries(root: Path, killed: str) -> None:
    (root / "other").mkdir()
    stale_elsewhere = root / "other" / ".a.txt.emelex-tmp-0123456789ab"
    stale_elsewhere.write_text("old")
    recovery = root / "keys" / ".x.emelex-recovered-0123456789ab"
    recovery.write_text("someone's version")
    with Workspace.open(root) as ws:
        fresh = root / "keys" / ".b.emelex-tmp-ba9876543210"  # made during this session
        fresh.write_text("in flight")
        write_file(ws, "keys/new.txt", "hello")
        assert _temp_names(root / "keys") == [fresh.name]
        assert recovery.exists()  # never removed automatically: may be the only copy
        assert stale_elsewhere.exists()  # another directory: untouched until written to
        write_file(ws, "other/b.txt", "hello")
        assert not stale_elsewhere.exists()
    assert (root / "keys" / "new.txt").read_text() == "hello"


def test_killed_writes_leave_nothing_after_the_next_write(root: Path, killed: str) -> None:
    # The issue saw 13 files and 192 MB after 40 kills; the crash here left three.
    assert len([n for n in _temp_names(root) if ".data.bin." in n]) == 3
    with Workspace.open(root) as ws:
        write_file(ws, "data.bin", "final")
    assert _temp_names(root) == []
    assert (root / "data.bin").read_text() == "final"


def test_shortened_names_are_treated_as_secret(root: Path, killed: str) -> None:
    [name] = [n for n in _temp_names(root) if n.startswith(".nnn")]
    assert len(os.fsencode(name)) >= 252
    with Workspace.open(root) as ws:
        assert ReadFileTool(ws).approval_reason({"path": name}) is not None
        leftovers = {leftover.path: leftover for leftover in list_leftovers(ws).leftovers}
        assert leftovers[name].shortened


def test_a_temporary_made_just_before_opening_is_kept(root: Path) -> None:
    # Another process's write that started a moment before this session opened.
    recent = root / ".a.txt.emelex-tmp-0123456789ab"
    recent.write_text("in flight elsewhere")
    with Workspace.open(root) as ws:
        write_file(ws, "b.txt", "hello")
    assert recent.exists()


def test_this_processs_writes_in_flight_are_never_cleaned(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_leftovers, "STALE_MARGIN", -60.0)  # every timestamp looks stale
    reached, release = threading.Event(), threading.Event()

    def hold(parent_fd: int, name: str, temp: str) -> None:
        reached.set()
        release.wait(10)

    monkeypatch.setitem(_HOOKS, "before_install", hold)
    with Workspace.open(root) as ws:
        slow = threading.Thread(target=write_file, args=(ws, "slow.txt", "slow"))
        slow.start()
        assert reached.wait(10)
        monkeypatch.delitem(_HOOKS, "before_install")
        write_file(ws, "fast.txt", "fast")  # cleans the directory while "slow" is in flight
        release.set()
        slow.join(10)
    assert (root / "slow.txt").read_text() == "slow"
    assert (root / "fast.txt").read_text() == "fast"
