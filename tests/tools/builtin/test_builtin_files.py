"""The six workspace tools through real session turns: results, bounds and approvals."""

from __future__ import annotations

import hashlib
import os
import re
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import trio

from emelex.agent import AgentCancellation, AgentSession, DenyAll, TurnCancelled
from emelex.model import Message, TextPart
from emelex.testing import ApproveAll, Call, Say, ScriptedApprovals, ScriptedModel
from emelex.tools.workspace._mutate import _HOOKS

Runner = Callable[..., Awaitable[Any]]


def text_of(message: Message) -> str:
    return "".join(p.text for p in message.content if isinstance(p, TextPart))


def _real(path: Path) -> str:
    return os.path.realpath(path)


def _abs(root: Path, *parts: str) -> str:
    return os.path.join(_real(root), *parts)


# -- read_file ------------------------------------------------------------------------------


async def test_read_file_inside_runs_without_approval(run_calls: Runner, ws_root: Path) -> None:
    data = "".join(f"line {n}\n" for n in range(1, 6))
    (ws_root / "a.txt").write_text(data)
    approvals = ApproveAll()
    outcome = await run_calls([Call("read_file", {"path": "a.txt"})], approvals)
    assert approvals.asked == []
    [text] = outcome.tool_messages
    digest = hashlib.sha256(data.encode()).hexdigest()
    assert text == (f'["a.txt": lines 1-5; 35-byte file, sha256 {digest}]\n{data}[end of file]')
    assert outcome.outputs[0].is_error is False


async def test_read_file_offset_limit_says_where_to_continue(
    run_calls: Runner, ws_root: Path
) -> None:
    (ws_root / "a.txt").write_text("".join(f"line {n}\n" for n in range(1, 11)))
    outcome = await run_calls([Call("read_file", {"path": "a.txt", "offset": 3, "limit": 2})])
    [text] = outcome.tool_messages
    assert text.splitlines() == [
        text.splitlines()[0],
        "line 3",
        "line 4",
        "[more lines follow: continue with offset=5]",
    ]
    assert text.startswith('["a.txt": lines 3-4; 71-byte file')


async def test_read_file_byte_bound_says_it_was_cut(run_calls: Runner, ws_root: Path) -> None:
    line = "x" * 99 + "\n"
    (ws_root / "big.txt").write_text(line * 3000)  # 300 KB, over the 128 KiB bound
    outcome = await run_calls([Call("read_file", {"path": "big.txt"})])
    [text] = outcome.tool_messages
    assert "[cut: one call returns at most 131072 bytes]" in text
    assert "[more lines follow: continue with offset=1311]" in text
    assert len(text.encode()) < 132 * 1024


async def test_read_file_errors_are_results_not_crashes(run_calls: Runner, ws_root: Path) -> None:
    (ws_root / "bin").write_bytes(b"\0\1\2")
    os.symlink("/etc/hostname", ws_root / "link")
    (ws_root / "dir").mkdir()
    outcome = await run_calls(
        [
            Call("read_file", {"path": "missing.txt"}),
            Call("read_file", {"path": "bin"}),
            Call("read_file", {"path": "link"}),
            Call("read_file", {"path": "../outside/note.txt"}),
            Call("read_file", {"path": "dir"}),
        ],
        ApproveAll(),
    )
    assert all(output.is_error for output in outcome.outputs)
    missing, binary, link, parent, directory = outcome.tool_messages
    assert missing == "read_file: 'missing.txt': no such file or directory"
    assert binary.startswith('read_file: "bin" is a binary file (3 bytes)')
    assert link == "read_file: 'link': is a symbolic link (never followed)"
    assert "parent traversal" in parent
    assert "is a directory" in directory or "not a regular file" in directory
    assert outcome.reasons == []  # none of these needed (or got) an approval


async def test_outside_read_is_approved_for_that_call_only(
    run_calls: Runner, ws_root: Path, outside_dir: Path
) -> None:
    target = _abs(outside_dir, "note.txt")
    approvals = ScriptedApprovals([True, False])
    call = Call("read_file", {"path": target})
    outcome = await run_calls([call, call], approvals)
    assert len(approvals.asked) == 2  # asked for each call, never remembered
    root = _real(ws_root)
    assert outcome.reasons == [f'read the file "{target}", outside the workspace "{root}"'] * 2
    first, second = outcome.tool_messages
    assert "outside content" in first
    assert second == "denied: denied by script"
    assert outcome.executed == [True, False]


async def test_outside_read_with_default_policy_is_denied(
    run_calls: Runner, outside_dir: Path
) -> None:
    target = str(outside_dir / "note.txt")
    outcome = await run_calls([Call("read_file", {"path": target})])
    [text] = outcome.tool_messages
    assert text.startswith("denied: no approval policy")
    assert outcome.executed == [False]


async def test_secret_read_asks_and_names_the_reason(run_calls: Runner, ws_root: Path) -> None:
    (ws_root / ".env").write_text("TOKEN=hunter2\n")
    approvals = ApproveAll()
    outcome = await run_calls([Call("read_file", {"path": ".env"})], approvals)
    assert [a.reason for a in approvals.asked] == [
        f'read the file ".env" (on disk "{_abs(ws_root, ".env")}"), '
        "a likely-secret path (dotenv file)"
    ]
    assert "TOKEN=hunter2" in outcome.tool_messages[0]

    denied = await run_calls([Call("read_file", {"path": ".env"})], DenyAll())
    assert "hunter2" not in denied.tool_messages[0]
    assert denied.executed == [False]


async def test_unknown_arguments_never_reach_the_tool(run_calls: Runner, ws_root: Path) -> None:
    (ws_root / "a.txt").write_text("x\n")
    outcome = await run_calls(
        [
            Call("read_file", {"path": "a.txt", "follow_symlinks": True}),
            Call("read_file", {"path": "a.txt", "limit": 0}),
            Call("read_file", {}),
        ]
    )
    assert outcome.executed == [False, False, False]
    assert all("invalid arguments" in text for text in outcome.tool_messages)


# -- list_directory ---------------------------------------------------------------------------


async def test_list_directory_marks_kinds_and_secrets(run_calls: Runner, ws_root: Path) -> None:
    (ws_root / "src").mkdir()
    (ws_root / "b.txt").write_text("12345")
    (ws_root / ".env").write_text("S=1")
    os.symlink("b.txt", ws_root / "link")
    approvals = ApproveAll()
    outcome = await run_calls([Call("list_directory", {"path": "."})], approvals)
    assert approvals.asked == []
    assert outcome.tool_messages == [
        '[".": 4 entries]\n'
        ".env  (3 bytes)  [likely secret: reading it needs approval]\n"
        "b.txt  (5 bytes)\n"
        "link  (symbolic link, not followed)\n"
        "src/"
    ]


async def test_list_directory_bounded(run_calls: Runner, ws_root: Path) -> None:
    many = ws_root / "many"
    many.mkdir()
    for n in range(1005):
        (many / f"f{n:04d}").touch()
    outcome = await run_calls([Call("list_directory", {"path": "many"})])
    [text] = outcome.tool_messages
    lines = text.splitlines()
    assert lines[0] == '["many": 1005 entries]'
    assert lines[-1] == "[cut: showing the first 1000 of 1005 entries by name]"
    assert len(lines) == 1002


async def test_list_secret_directory_asks(run_calls: Runner, ws_root: Path) -> None:
    (ws_root / ".ssh").mkdir()
    (ws_root / ".ssh" / "id_rsa").write_text("KEY")
    outcome = await run_calls([Call("list_directory", {"path": ".ssh"})], DenyAll())
    assert outcome.reasons == [
        f'list the directory ".ssh" (on disk "{_abs(ws_root, ".ssh")}"), '
        "a likely-secret path (SSH directory)"
    ]
    assert outcome.executed == [False]


# -- find_files -------------------------------------------------------------------------------


async def test_find_files_skips_secrets_unless_approved(run_calls: Runner, ws_root: Path) -> None:
    (ws_root / "pkg").mkdir()
    (ws_root / "pkg" / "a.py").write_text("")
    (ws_root / "pkg" / "b.py").write_text("")
    (ws_root / "pkg" / "c.txt").write_text("")
    (ws_root / ".env").write_text("")
    approvals = ApproveAll()
    outcome = await run_calls([Call("find_files", {"pattern": "**/*"})], approvals)
    assert approvals.asked == []
    [text] = outcome.tool_messages
    assert text.splitlines() == [
        '[3 files matching "**/*"]',
        "pkg/a.py",
        "pkg/b.py",
        "pkg/c.txt",
        "[1 likely-secret entry skipped (include_secrets=true asks for approval to search them)]",
    ]

    call = Call("find_files", {"pattern": "**/*", "include_secrets": True})
    approved = await run_calls([call, call], ScriptedApprovals([True, False]))
    assert (
        approved.reasons
        == [
            f'search for files matching "**/*" under "." (on disk "{_real(ws_root)}"), including '
            "likely-secret files and directories"
        ]
        * 2
    )
    assert ".env" in approved.tool_messages[0].splitlines()
    assert approved.tool_messages[1] == "denied: denied by script"


async def test_find_files_glob_and_no_match(run_calls: Runner, ws_root: Path) -> None:
    (ws_root / "a.py").write_text("")
    outcome = await run_calls(
        [
            Call("find_files", {"pattern": "*.rs"}),
            Call("find_files", {"pattern": "*.py", "path": "."}),
            Call("find_files", {"pattern": "../*"}),
        ]
    )
    none, one, bad = outcome.tool_messages
    assert none == '[no files match "*.rs"]'
    assert one == '[1 file matching "*.py"]\na.py'
    assert outcome.outputs[2].is_error
    assert "'..' is not allowed" in bad


# -- grep --------------------------------------------------------------------------------------


async def test_grep_context_groups_and_secret_skip(run_calls: Runner, ws_root: Path) -> None:
    (ws_root / "a.txt").write_text("one\ntwo\nneedle 1\nthree\nfour\nfive\nsix\nneedle 2\n")
    (ws_root / ".env").write_text("needle=secret\n")
    outcome = await run_calls([Call("grep", {"pattern": "needle", "context": 1})])
    [text] = outcome.tool_messages
    assert text.splitlines() == [
        "[2 matching lines in 1 file; 1 file searched]",
        "a.txt-2-two",
        "a.txt:3:needle 1",
        "a.txt-4-three",
        "--",
        "a.txt-7-six",
        "a.txt:8:needle 2",
        "[1 likely-secret entry skipped (include_secrets=true asks for approval to search them)]",
    ]
    assert "secret" not in text.replace("likely-secret", "").replace("include_secrets", "")


async def test_grep_literal_regex_and_errors(run_calls: Runner, ws_root: Path) -> None:
    (ws_root / "a.py").write_text("x = f(a.b)\ny = a+b\n")
    outcome = await run_calls(
        [
            Call("grep", {"pattern": "a.b", "literal": True}),
            Call("grep", {"pattern": "a.b"}),
            Call("grep", {"pattern": "(unclosed"}),
            Call("grep", {"pattern": "A\\+B", "case_insensitive": True, "glob": "*.py"}),
        ]
    )
    literal, regex, error, folded = outcome.tool_messages
    assert literal.splitlines()[1:] == ["a.py:1:x = f(a.b)"]
    assert regex.splitlines()[1:] == ["a.py:1:x = f(a.b)", "a.py:2:y = a+b"]
    assert outcome.outputs[2].is_error and "invalid regular expression" in error
    assert folded.splitlines()[1:] == ["a.py:2:y = a+b"]


async def test_grep_bounded_by_matches(run_calls: Runner, ws_root: Path) -> None:
    (ws_root / "many.txt").write_text("hit\n" * 500)
    outcome = await run_calls([Call("grep", {"pattern": "hit"})])
    lines = outcome.tool_messages[0].splitlines()
    assert lines[0] == "[200 matching lines in 1 file; 1 file searched]"
    assert (
        lines[-1] == "[cut: the match limit was reached; narrow the pattern, the path or the glob]"
    )


async def test_grep_outside_asks(run_calls: Runner, outside_dir: Path) -> None:
    outside = _real(outside_dir)
    approvals = ApproveAll()
    outcome = await run_calls([Call("grep", {"pattern": "content", "path": outside})], approvals)
    assert approvals.asked[0].reason.startswith(
        f'search file contents for the regular expression "content" under "{outside}", '
        "outside the workspace"
    )
    assert f"{outside}/note.txt:1:outside content" in outcome.tool_messages[0]


# -- write_file and edit_file ------------------------------------------------------------------


async def test_write_denied_by_default_changes_nothing(run_calls: Runner, ws_root: Path) -> None:
    outcome = await run_calls([Call("write_file", {"path": "new.txt", "content": "hello"})])
    assert outcome.executed == [False]
    assert outcome.reasons == [
        f'write 5 bytes to "new.txt" (on disk "{_abs(ws_root, "new.txt")}") '
        "(creating the file or atomically "
        "replacing its content; missing parent directories are created)"
    ]
    assert not (ws_root / "new.txt").exists()


async def test_write_asks_every_call_and_writes(run_calls: Runner, ws_root: Path) -> None:
    approvals = ScriptedApprovals([True, True])
    content = "héllo\n"  # 7 bytes in UTF-8
    calls = [
        Call("write_file", {"path": "deep/dir/a.txt", "content": content}),
        Call("write_file", {"path": "deep/dir/a.txt", "content": "second"}),
    ]
    outcome = await run_calls(calls, approvals)
    assert len(approvals.asked) == 2
    assert approvals.asked[0].reason.startswith(
        f'write 7 bytes to "deep/dir/a.txt" (on disk "{_abs(ws_root, "deep/dir/a.txt")}")'
    )
    created, replaced = outcome.tool_messages
    assert created == (
        f'created "deep/dir/a.txt": 7 bytes written, sha256 '
        f"{hashlib.sha256(content.encode()).hexdigest()}"
    )
    assert replaced.startswith('replaced "deep/dir/a.txt": 6 bytes written')
    assert (ws_root / "deep/dir/a.txt").read_text() == "second"


async def test_write_outside_or_secret_sentence_says_so(
    run_calls: Runner, ws_root: Path, outside_dir: Path
) -> None:
    target = _abs(outside_dir, "x.pem")
    outcome = await run_calls([Call("write_file", {"path": target, "content": ""})], DenyAll())
    assert outcome.reasons == [
        f'write 0 bytes to "{target}", outside the workspace "{_real(ws_root)}", '
        "a likely-secret path (PEM key or certificate) (creating the file or atomically "
        "replacing its content; missing parent directories are created)"
    ]
    assert not (outside_dir / "x.pem").exists()


async def test_write_refused_path_is_an_error_without_asking(
    run_calls: Runner, ws_root: Path, outside_dir: Path
) -> None:
    os.symlink(outside_dir, ws_root / "out-link")
    approvals = ApproveAll()
    outcome = await run_calls(
        [
            Call("write_file", {"path": "a/../../x", "content": "x"}),
            Call("write_file", {"path": "out-link/x", "content": "x"}),
        ],
        approvals,
    )
    parent, link = outcome.tool_messages
    assert "parent traversal" in parent
    assert link == "write_file: 'out-link': is a symbolic link (never followed)"
    assert len(approvals.asked) == 1  # the '..' path was never offered for approval
    assert not (outside_dir / "x").exists()
    assert not (ws_root.parent / "x").exists()


async def test_quoted_sentence_cannot_be_spoofed(run_calls: Runner, ws_root: Path) -> None:
    path = 'a.txt" (harmless)\nwrite 0 bytes to "b'
    outcome = await run_calls([Call("write_file", {"path": path, "content": "x"})], DenyAll())
    [reason] = outcome.reasons
    assert "\n" not in reason
    assert '\\"' in reason and "\\n" in reason


async def test_edit_file_flow(run_calls: Runner, ws_root: Path) -> None:
    original = "alpha\nbeta\nbeta\n"
    (ws_root / "e.txt").write_text(original)
    digest = hashlib.sha256(original.encode()).hexdigest()
    approvals = ApproveAll()
    outcome = await run_calls(
        [
            Call("edit_file", {"path": "e.txt", "old": "beta", "new": "gamma"}),
            Call("edit_file", {"path": "e.txt", "old": "zeta", "new": "eta"}),
            Call(
                "edit_file",
                {
                    "path": "e.txt",
                    "old": "beta",
                    "new": "B",
                    "count": 2,
                    "expected_sha256": "0" * 64,
                },
            ),
            Call(
                "edit_file",
                {"path": "e.txt", "old": "beta", "new": "B", "count": 2, "expected_sha256": digest},
            ),
        ],
        approvals,
    )
    assert [a.reason for a in approvals.asked] == [
        f'edit "e.txt" (on disk "{_abs(ws_root, "e.txt")}"): '
        "replace 1 occurrence of a 4-byte text with a "
        "5-byte text (the file grows by 1 byte)",
        f'edit "e.txt" (on disk "{_abs(ws_root, "e.txt")}"): '
        "replace 1 occurrence of a 4-byte text with a "
        "3-byte text (the file shrinks by 1 byte)",
        f'edit "e.txt" (on disk "{_abs(ws_root, "e.txt")}"): '
        "replace 2 occurrences of a 4-byte text with a "
        f"1-byte text (the file shrinks by 6 bytes), only if the file's sha256 is {'0' * 64}",
        f'edit "e.txt" (on disk "{_abs(ws_root, "e.txt")}"): '
        "replace 2 occurrences of a 4-byte text with a "
        f"1-byte text (the file shrinks by 6 bytes), only if the file's sha256 is {digest}",
    ]
    count, missing, stale, done = outcome.tool_messages
    assert count == (
        "edit_file: 'e.txt': expected 1 occurrence(s) of the old text, found 2; nothing was "
        "changed (include more surrounding text in `old`, or set `count` to the number found)"
    )
    assert "found 0" in missing and "read the file again" in missing
    assert "sha256" in stale and "changed since it was read" in stale
    assert done.startswith('edited "e.txt": 2 replacements, 10 bytes written')
    assert (ws_root / "e.txt").read_text() == "alpha\nB\nB\n"
    assert [o.is_error for o in outcome.outputs] == [True, True, True, False]


async def test_read_then_edit_with_reported_sha(run_calls: Runner, ws_root: Path) -> None:
    (ws_root / "r.txt").write_text("value = 1\n")
    read = await run_calls([Call("read_file", {"path": "r.txt"})])
    match = re.search(r"sha256 ([0-9a-f]{64})", read.tool_messages[0])
    assert match is not None
    edit = {"path": "r.txt", "old": "1", "new": "2", "expected_sha256": match.group(1)}
    outcome = await run_calls([Call("edit_file", edit)], ApproveAll())
    assert outcome.outputs[0].is_error is False
    assert (ws_root / "r.txt").read_text() == "value = 2\n"


async def test_edit_denied_leaves_file(run_calls: Runner, ws_root: Path) -> None:
    (ws_root / "e.txt").write_text("a\n")
    outcome = await run_calls([Call("edit_file", {"path": "e.txt", "old": "a", "new": "b"})])
    assert outcome.executed == [False]
    assert (ws_root / "e.txt").read_text() == "a\n"


async def test_cancelled_turn_waits_for_a_started_write(
    ws_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reached = threading.Event()
    release = threading.Event()

    def hold(parent_fd: int, name: str, temp: str) -> None:
        reached.set()
        release.wait(10)

    monkeypatch.setitem(_HOOKS, "before_install", hold)
    model = ScriptedModel(
        [[Call("write_file", {"path": "w.txt", "content": "new"})], [Say("unreached")]]
    )
    cancellation = AgentCancellation()
    builder = AgentSession.builder(model, ws_root).approval_policy(ApproveAll())
    with builder.build() as session, trio.fail_after(20):
        async with trio.open_nursery() as nursery:

            async def turn() -> None:
                with pytest.raises(TurnCancelled):
                    await session.run("go", cancellation=cancellation)

            nursery.start_soon(turn)
            assert await trio.to_thread.run_sync(reached.wait, 10)
            cancellation.cancel()  # the write is in flight: it must complete, not vanish
            release.set()
        tool_messages = [text_of(m) for m in session.history if m.role == "tool"]
    assert tool_messages == [
        'created "w.txt": 3 bytes written, sha256 '
        "11507a0e2f5e69d5dfa40a62a1bd7b6ee57e6bcd85c67c9b8431b36fff21c437"
    ]
    assert (ws_root / "w.txt").read_text() == "new"
    assert model.calls_made == 1
