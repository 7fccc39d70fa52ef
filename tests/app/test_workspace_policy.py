"""Workspace policy through real sessions: read-only default, read-only seeded files,
hidden paths, the recursive-delete guard, and private workspaces."""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Any

import pytest

from emelex.agent import ApprovalRequested
from emelex.app import Engine, Harness, WorkspacePolicy, recursive_delete_reason
from emelex.app._policy import HiddenPaths
from emelex.testing import ApproveAll, Call, Say, ScriptedModel

from .helpers import builder, outputs, run_collecting


def calls_then_done(*calls: Call) -> ScriptedModel:
    return ScriptedModel([list(calls), [Say("done")]])


async def run_worker(agent: Any, text: str = "go") -> tuple[Any, list[Any]]:
    async with Engine() as engine:
        session = await engine.create(agent).harness(Harness.worker()).start()
        _, events = await run_collecting(session, text)
        return session, events


# -- read-only default ---------------------------------------------------------------------


async def test_the_default_policy_does_not_register_writes() -> None:
    model = calls_then_done(Call("write_file", {"path": "new.md", "content": "x"}))
    agent = builder(model).build()
    async with Engine() as engine:
        session = await engine.create(agent).harness(Harness.worker()).start()
        root = session.workspace_root
        _, events = await run_collecting(session, "write")
        assert not (root / "new.md").exists()
    output = outputs(events)[0]
    assert output.is_error and "unknown tool 'write_file'" in output.text


async def test_read_write_policy_writes_after_approval() -> None:
    approvals = ApproveAll()
    model = calls_then_done(Call("write_file", {"path": "out/new.md", "content": "hello"}))
    agent = (
        builder(model).workspace_policy(WorkspacePolicy.read_write()).approver(approvals).build()
    )
    async with Engine() as engine:
        session = await engine.create(agent).harness(Harness.worker()).start()
        _, events = await run_collecting(session, "write")
        assert (session.workspace_root / "out" / "new.md").read_text() == "hello"
    assert not outputs(events)[0].is_error
    assert [c.call.name for c in approvals.asked] == ["write_file"]


# -- seeded files ----------------------------------------------------------------------------


async def test_private_workspace_is_seeded_and_read_only_files_are_protected() -> None:
    approvals = ApproveAll()
    model = calls_then_done(
        Call("read_file", {"path": "policy.md"}),
        Call("write_file", {"path": "policy.md", "content": "changed"}),
        Call("edit_file", {"path": "policy.md", "old": "Never", "new": "Always"}),
        Call("edit_file", {"path": "brief.md", "old": "Investigate", "new": "Study"}),
    )
    agent = (
        builder(model)
        .file("brief.md", "Investigate the question.")
        .readonly_file("policy.md", "Never expose secrets.")
        .workspace_policy(WorkspacePolicy.read_write())
        .approver(approvals)
        .build()
    )
    async with Engine() as engine:
        session = await engine.create(agent).harness(Harness.worker()).start()
        root = session.workspace_root
        mode = stat.S_IMODE((root / "policy.md").stat().st_mode)
        assert mode == 0o444
        _, events = await run_collecting(session, "go")
        assert (root / "policy.md").read_text() == "Never expose secrets."
        assert (root / "brief.md").read_text() == "Study the question."
    read, write, edit, editable = outputs(events)
    assert "Never expose secrets." in read.text
    assert write.is_error and "policy.md is a read-only file" in write.text
    assert edit.is_error and "read-only file" in edit.text
    assert not editable.is_error
    # Refused calls never reach the approver; the allowed edit does.
    assert [c.call.name for c in approvals.asked] == ["edit_file"]
    assert not root.exists()


# -- hidden paths ----------------------------------------------------------------------------


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "private").mkdir()
    (tmp_path / "private" / "plan.md").write_text("TOKEN plan\n")
    (tmp_path / "notes.draft").write_text("TOKEN draft\n")
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.py").write_text("TOKEN code\n")
    (tmp_path / "src" / "b.draft").write_text("TOKEN nested draft\n")
    (tmp_path / "README.md").write_text("TOKEN readme\n")
    return tmp_path


HIDDEN = WorkspacePolicy().hide("private", "*.draft")


async def test_hidden_paths_are_refused_before_approval(project: Path) -> None:
    model = calls_then_done(
        Call("read_file", {"path": "private/plan.md"}),
        Call("read_file", {"path": "src/b.draft"}),
        Call("read_file", {"path": str(project / "notes.draft")}),
        Call("list_directory", {"path": "private"}),
        Call("grep", {"pattern": "TOKEN", "path": "private"}),
        Call("read_file", {"path": "README.md"}),
    )
    agent = builder(model).workspace(project).workspace_policy(HIDDEN).build()
    _, events = await run_worker(agent)
    *refused, allowed = outputs(events)
    for output in refused:
        assert output.is_error and "hidden by the workspace policy" in output.text
    assert "TOKEN readme" in allowed.text
    assert not [e for e in events if isinstance(e, ApprovalRequested)]


async def test_listings_and_searches_leave_hidden_entries_out(project: Path) -> None:
    model = calls_then_done(
        Call("list_directory", {"path": "."}),
        Call("list_directory", {"path": "src"}),
        Call("find_files", {"pattern": "**/*"}),
        Call("grep", {"pattern": "TOKEN"}),
    )
    agent = builder(model).workspace(project).workspace_policy(HIDDEN).build()
    _, events = await run_worker(agent)
    root_listing, src_listing, found, grepped = (o.text for o in outputs(events))
    assert "README.md" in root_listing and "src/" in root_listing
    assert "private" not in root_listing and "notes.draft" not in root_listing
    assert "2 hidden entries not shown" in root_listing
    assert "a.py" in src_listing and "b.draft" not in src_listing
    assert "README.md" in found and "src/a.py" in found
    assert "plan.md" not in found and ".draft" not in found
    assert "TOKEN readme" in grepped and "TOKEN code" in grepped
    assert "plan" not in grepped and "draft" not in grepped
    assert "3 hidden entries left out (workspace policy)" in grepped


async def test_without_hidden_paths_listings_are_untouched(project: Path) -> None:
    model = calls_then_done(Call("find_files", {"pattern": "**/*.draft"}))
    agent = builder(model).workspace(project).build()
    _, events = await run_worker(agent)
    assert "src/b.draft" in outputs(events)[0].text


@pytest.mark.parametrize(
    ("patterns", "path", "hidden"),
    [
        (("private",), ("private",), True),
        (("private",), ("private", "deep", "x.md"), True),
        (("private",), ("src", "private", "x.md"), True),  # no slash: any depth
        (("/private",), ("src", "private"), False),  # leading slash: from the root
        (("docs/*.md",), ("docs", "a.md"), True),
        (("docs/*.md",), ("docs", "sub", "a.md"), False),
        (("docs/**",), ("docs", "sub", "a.md"), True),
        (("*.{key,pem}",), ("certs", "site.pem"), True),
        (("*.{key,pem}",), ("certs", "site.crt"), False),
    ],
)
def test_hidden_path_matching(
    patterns: tuple[str, ...], path: tuple[str, ...], hidden: bool
) -> None:
    assert HiddenPaths(patterns).hides(path) is hidden


# -- recursive delete ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "refused"),
    [
        ("rm -rf build", True),
        ("rm -r build", True),
        ("rm -fR build", True),
        ("rm -v --recursive build", True),
        ("cd x && /bin/rm -rf .", True),
        ("ls | xargs rm -r", True),
        ("find . -name '*.o' -delete", True),
        ("git clean -fdx", True),
        ("python -c 'import shutil; shutil.rmtree(\"x\")'", True),
        ("rm build/a.o", False),
        ("rm -f build/a.o", False),
        ("echo rmdir", False),
        ("grep -r TODO src", False),
        ("git clean -n", False),
    ],
)
def test_recursive_delete_guard(command: str, refused: bool) -> None:
    assert (recursive_delete_reason(command) is not None) is refused


async def test_the_shell_refuses_recursive_deletes_unless_allowed() -> None:
    for allowed in (False, True):
        approvals = ApproveAll()
        model = calls_then_done(Call("shell", {"command": "rm -rf build"}))
        policy = WorkspacePolicy.read_write().allow_recursive_delete(allowed)
        agent = (
            builder(model)
            .file("build/a.o", "obj")
            .workspace_policy(policy)
            .approver(approvals)
            .build()
        )
        async with Engine() as engine:
            session = await engine.create(agent).harness(Harness.shell_worker()).start()
            _, events = await run_collecting(session, "clean")
            still_there = (session.workspace_root / "build" / "a.o").exists()
        output = outputs(events)[0]
        if allowed:
            assert not still_there and not output.is_error
            assert len(approvals.asked) == 1
        else:
            assert still_there and output.is_error and "recursive delete" in output.text
            assert approvals.asked == []
