"""The command line's approval flags as a policy: what --allow-workspace-reads covers."""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any

import pytest

from emelex.agent import ApprovalContext, Approve, Deny
from emelex.cli._approvals import NOT_APPROVED, FlagApprovals
from emelex.cli._workspace_reads import workspace_read_refusal
from emelex.model import ToolCall, ToolDefinition


@pytest.fixture
def layout(tmp_path: Path) -> dict[str, Path]:
    """A workspace beside a fake home with an SSH key and an outside directory."""
    ws = tmp_path / "ws"
    (ws / "docs").mkdir(parents=True)
    (ws / "notes.txt").write_text("hello notes\n")
    (ws / "docs" / "guide.md").write_text("# guide\n")
    (ws / ".env").write_text("TOKEN=abc\n")
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_ed25519").write_text("PRIVATE KEY\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "data.txt").write_text("outside data\n")
    (ws / "link").symlink_to(outside)
    (ws / "docs" / "nested-link.md").symlink_to(outside / "data.txt")
    return {"ws": ws.resolve(), "home": home.resolve(), "outside": outside.resolve()}


def context(name: str, arguments: dict[str, Any], root: Path | None) -> ApprovalContext:
    return ApprovalContext(
        "session",
        "turn",
        ToolCall("018f0000-0000-7000-8000-000000000001", name, arguments),
        ToolDefinition(name, "", {"type": "object"}),
        f"{name} something",
        workspace_root=None if root is None else str(root),
    )


def reads(err: io.StringIO | None = None) -> FlagApprovals:
    return FlagApprovals((), workspace_reads=True, err=err or io.StringIO())


@pytest.mark.parametrize(
    ("name", "arguments"),
    [
        ("read_file", {"path": "notes.txt"}),
        ("read_file", {"path": "./docs/guide.md", "offset": 1, "limit": 10}),
        ("list_directory", {"path": "."}),
        ("list_directory", {"path": "docs/"}),
        ("find_files", {"pattern": "**/*.md"}),
        ("grep", {"pattern": "hello", "path": "docs", "literal": True, "context": 2}),
        ("read_file", {"path": "missing/deeper.txt"}),  # the tool reports it as not found
    ],
)
async def test_ordinary_workspace_reads_are_approved(
    layout: dict[str, Path], name: str, arguments: dict[str, Any]
) -> None:
    ctx = context(name, arguments, layout["ws"])
    assert workspace_read_refusal(ctx) is None
    assert await reads().decide(ctx) == Approve()


async def test_an_absolute_path_inside_the_workspace_is_approved(
    layout: dict[str, Path],
) -> None:
    ctx = context("read_file", {"path": str(layout["ws"] / "notes.txt")}, layout["ws"])
    assert await reads().decide(ctx) == Approve()


@pytest.mark.parametrize(
    ("name", "arguments", "why"),
    [
        ("read_file", {"path": "{home}/.ssh/id_ed25519"}, "outside the workspace"),
        ("read_file", {"path": "~/.ssh/id_ed25519"}, "looks like a secret (SSH"),
        ("read_file", {"path": ".ssh/id_ed25519"}, "looks like a secret"),
        ("read_file", {"path": "../outside/data.txt"}, "refused"),
        ("read_file", {"path": "{outside}/data.txt"}, "outside the workspace"),
        ("read_file", {"path": "/etc/passwd"}, "outside the workspace"),
        ("read_file", {"path": "{ws}_evil/x"}, "outside the workspace"),
        ("read_file", {"path": ".env"}, "looks like a secret (dotenv"),
        ("read_file", {"path": "config/.ENV.production"}, "looks like a secret"),
        ("read_file", {"path": "link/data.txt"}, "symbolic link"),
        ("read_file", {"path": "docs/nested-link.md"}, "symbolic link"),
        ("list_directory", {"path": "link"}, "symbolic link"),
        ("list_directory", {"path": "/"}, "outside the workspace"),
        ("grep", {"pattern": "KEY", "include_secrets": True}, "likely-secret"),
        ("find_files", {"pattern": "*", "path": ".ssh"}, "looks like a secret"),
        ("grep", {"pattern": "x", "path": "a\0b"}, "refused"),
        ("read_file", {"path": "notes.txt", "follow": True}, "unexpected arguments follow"),
        ("read_file", {"path": 7}, "not text"),
        ("write_file", {"path": "notes.txt", "content": ""}, "not a read-only file tool"),
        ("shell", {"command": "cat notes.txt"}, "not a read-only file tool"),
    ],
)
async def test_secret_outside_and_unclassifiable_reads_are_not_approved(
    layout: dict[str, Path], name: str, arguments: dict[str, Any], why: str
) -> None:
    arguments = {
        key: value.format(**{k: str(v) for k, v in layout.items()})
        if isinstance(value, str)
        else value
        for key, value in arguments.items()
    }
    ctx = context(name, arguments, layout["ws"])
    flags = reads()
    refusal = await flags.refusal(ctx)
    assert refusal is not None and why in refusal
    decision = await flags.decide(ctx)
    assert decision == Deny(NOT_APPROVED)


async def test_without_a_known_root_nothing_is_approved_as_a_workspace_read(
    layout: dict[str, Path],
) -> None:
    ctx = context("read_file", {"path": "notes.txt"}, None)
    assert await reads().decide(ctx) == Deny(NOT_APPROVED)


async def test_allow_tool_approves_every_call_of_that_tool(layout: dict[str, Path]) -> None:
    flags = FlagApprovals({"read_file"}, err=io.StringIO())
    ctx = context("read_file", {"path": str(layout["home"] / ".ssh" / "id_ed25519")}, None)
    assert await flags.decide(ctx) == Approve()  # the user named the tool explicitly
    assert await flags.decide(context("list_directory", {"path": "."}, None)) == Deny(NOT_APPROVED)


async def test_the_model_hears_what_happened_and_the_user_gets_one_hint(
    layout: dict[str, Path],
) -> None:
    err = io.StringIO()
    flags = reads(err)
    secret = context("read_file", {"path": ".env"}, layout["ws"])
    denials = [await flags.decide(secret) for _ in range(3)]
    write = context("write_file", {"path": "x", "content": ""}, layout["ws"])
    denials.append(await flags.decide(write))
    for decision in denials:
        assert isinstance(decision, Deny)
        assert "user did not approve" in decision.reason
        assert "--" not in decision.reason  # no command-line flags for the model
    hints = err.getvalue().splitlines()
    assert len(hints) == 2  # once per tool
    assert "denied read_file" in hints[0] and ".env looks like a secret" in hints[0]
    assert "--allow-tool read_file" in hints[0]
    assert "denied write_file" in hints[1] and "--allow-tool write_file" in hints[1]


async def test_a_symlink_swapped_in_later_is_still_never_followed(
    layout: dict[str, Path],
) -> None:
    # Approval is a judgement of the path as it is; the file tools themselves never
    # follow links, so a link created after the decision cannot lead a read outside.
    from emelex.tools.workspace import SymlinkRefused, Workspace, read_file

    ctx = context("read_file", {"path": "later/data.txt"}, layout["ws"])
    assert await reads().decide(ctx) == Approve()
    os.symlink(layout["outside"], layout["ws"] / "later")
    with Workspace.open(layout["ws"]) as workspace, pytest.raises(SymlinkRefused):
        read_file(workspace, "later/data.txt", allow_outside=True, allow_secret=True)
