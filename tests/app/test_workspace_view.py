"""An agent's ``workspace(root)`` is seen by its model as ``/workspace``."""

from __future__ import annotations

from pathlib import Path

import trio

from emelex.app import Engine, Harness, WorkspacePolicy
from emelex.testing import ApproveAll, Call, Say, ScriptedModel

from .helpers import builder, outputs, run_collecting


async def test_the_model_names_the_workspace_root_as_slash_workspace(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("alpha one\n")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "b.md").write_text("alpha two\n")
    approvals = ApproveAll()
    model = ScriptedModel(
        [
            [
                Call("read_file", {"path": "/workspace/a.txt"}),
                Call("list_directory", {"path": "/workspace"}),
                Call("find_files", {"pattern": "**/*", "path": "/workspace"}),
                Call("grep", {"pattern": "alpha"}),
                Call("write_file", {"path": "/workspace/docs/c.md", "content": "new"}),
                Call("edit_file", {"path": "/workspace/a.txt", "old": "one", "new": "uno"}),
                Call("read_file", {"path": "/workspacefoo/a.txt"}),
            ],
            [Say("done")],
        ]
    )
    agent = (
        builder(model)
        .workspace(tmp_path)
        .workspace_policy(WorkspacePolicy.read_write())
        .approver(approvals)
        .build()
    )
    async with Engine() as engine:
        session = await engine.create(agent).harness(Harness.worker()).start()
        _, events = await run_collecting(session, "go")
    read, listing, found, grepped, written, edited, outside = outputs(events)
    assert "alpha one" in read.text and '"/workspace/a.txt"' in read.text
    assert listing.text.startswith('["/workspace": 2 entries]')
    assert found.text.splitlines()[1:] == ["/workspace/a.txt", "/workspace/docs/b.md"]
    assert "/workspace/a.txt:1:alpha one" in grepped.text
    assert "/workspace/docs/b.md:1:alpha two" in grepped.text
    assert not written.is_error and (tmp_path / "docs" / "c.md").read_text() == "new"
    assert not edited.is_error and (tmp_path / "a.txt").read_text() == "alpha uno\n"
    # /workspacefoo is not inside: it is an outside path, which needs its own approval
    # and then does not exist; nothing under the root was read through it.
    assert outside.is_error and "alpha" not in outside.text
    asked = [c.call.name for c in approvals.asked]
    assert asked == ["write_file", "edit_file", "read_file"]


async def test_the_shell_working_directory_takes_the_view(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    approvals = ApproveAll()
    model = ScriptedModel(
        [
            [
                Call("shell", {"command": "pwd", "cwd": "/workspace/docs"}),
                Call("shell", {"command": "pwd", "cwd": "/workspacefoo"}),
            ],
            [Say("done")],
        ]
    )
    agent = (
        builder(model)
        .workspace(tmp_path)
        .workspace_policy(WorkspacePolicy.read_write())
        .approver(approvals)
        .build()
    )
    async with Engine() as engine:
        session = await engine.create(agent).harness(Harness.shell_worker()).start()
        _, events = await run_collecting(session, "go")
    inside, outside = outputs(events)
    assert not inside.is_error and str((tmp_path / "docs").resolve()) in inside.text
    assert outside.is_error


async def test_an_approval_names_a_path_the_way_its_result_does(tmp_path: Path) -> None:
    # The user reads both: "write ... to X (on disk ...)" then "created X". The real
    # file is named too, after the form every result and the model use.
    approvals = ApproveAll()
    model = ScriptedModel(
        [
            [
                Call("write_file", {"path": "hello.txt", "content": "hi"}),
                Call("edit_file", {"path": "/workspace/hello.txt", "old": "hi", "new": "ho"}),
            ],
            [Say("done")],
        ]
    )
    agent = (
        builder(model)
        .workspace(tmp_path)
        .workspace_policy(WorkspacePolicy.read_write())
        .approver(approvals)
        .build()
    )
    async with Engine() as engine:
        session = await engine.create(agent).harness(Harness.worker()).start()
        _, events = await run_collecting(session, "go")
    written, edited = outputs(events)
    real = await trio.Path(tmp_path / "hello.txt").resolve()
    write_reason, edit_reason = (c.reason for c in approvals.asked)
    assert write_reason.startswith(f'write 2 bytes to "/workspace/hello.txt" (on disk "{real}")')
    assert written.text.startswith('created "/workspace/hello.txt"')
    assert edit_reason.startswith(f'edit "/workspace/hello.txt" (on disk "{real}"): ')
    assert '"/workspace/hello.txt"' in edited.text
