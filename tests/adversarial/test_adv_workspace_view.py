"""Follow-up attacks on the ``/workspace`` view and hidden paths, through a real Engine
session: climbing out of the view, look-alike prefixes, and reaching hidden content
through the view's spelling or a search."""

from __future__ import annotations

from pathlib import Path

import trio

from emelex.agent import ApprovalRequested, ToolCompleted, TurnCompleted
from emelex.app import Agent, Engine, Harness, WorkspacePolicy
from emelex.testing import Call, Say, ScriptedModel

SECRET = "HIDDEN-CONTENT-5e1f"


async def test_the_view_cannot_be_climbed_out_of_or_spoofed(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (root / "plain.txt").write_text("plain\n")
    (root / "private").mkdir()
    (root / "private" / "plan.md").write_text(SECRET + "\n")
    (tmp_path / "workspacefoo").mkdir()
    (tmp_path / "workspacefoo" / "x.txt").write_text(SECRET + "\n")
    attacks = [
        Call("read_file", {"path": "/workspace/../etc/passwd"}),
        Call("read_file", {"path": "/workspace/./../root/plain.txt"}),
        Call("read_file", {"path": f"/workspace{tmp_path}/workspacefoo/x.txt"}),
        Call("list_directory", {"path": "/workspacefoo"}),
        Call("read_file", {"path": "/workspace/private/plan.md"}),
        Call("read_file", {"path": "/workspace/private/../private/plan.md"}),
        Call("grep", {"pattern": "HIDDEN", "path": "/workspace"}),
        Call("find_files", {"pattern": "**/plan.md", "path": "/workspace/"}),
        Call("grep", {"pattern": "HIDDEN", "path": "/workspace", "glob": "private/**"}),
    ]
    model = ScriptedModel([attacks, [Say("done")]])
    agent = (
        Agent.builder()
        .name("attacker")
        .instructions("Read files.")
        .model(model)
        .workspace(root)
        .workspace_policy(WorkspacePolicy().hide("private"))
        .build()
    )
    events: list[object] = []
    async with Engine() as engine:
        session = await engine.create(agent).harness(Harness.worker()).start()
        async with session.events() as stream, trio.open_nursery() as nursery:

            async def consume() -> None:
                async for event in stream:
                    events.append(event)
                    if isinstance(event, TurnCompleted):
                        return

            nursery.start_soon(consume)
            with trio.fail_after(30):
                await session.send_and_wait("attack")
    results = [e.output for e in events if isinstance(e, ToolCompleted)]
    assert len(results) == len(attacks)
    for output in results:
        assert SECRET not in output.text
    climb, relative_climb, nested, lookalike, hidden, hidden_dotdot = results[:6]
    assert climb.is_error and "parent traversal" in climb.text
    assert relative_climb.is_error and "parent traversal" in relative_climb.text
    assert nested.is_error  # /workspace/<tmp>/workspacefoo is inside the root: absent
    # /workspacefoo is outside: it needs approval, and the default policy denies it.
    assert lookalike.is_error and lookalike.text.startswith("denied:")
    assert hidden.is_error and "hidden by the workspace policy" in hidden.text
    assert hidden_dotdot.is_error
    grep_all, find_plan, grep_glob = results[6:]
    assert "1 hidden entry left out" in grep_all.text
    assert find_plan.text.startswith('[no files match "**/plan.md"]')
    assert "/workspace/private" not in grep_glob.text
    asked = [e for e in events if isinstance(e, ApprovalRequested)]
    assert len(asked) == 1 and "workspacefoo" in asked[0].reason  # only the outside path
