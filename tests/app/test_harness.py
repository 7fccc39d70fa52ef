"""Harness presets: exactly what each one adds to a session."""

from __future__ import annotations

from typing import Any

import pytest

from emelex.app import (
    ApproverRequired,
    ContextBudget,
    Engine,
    FunctionTool,
    Harness,
    NameCollision,
    ShellNotAllowed,
    UsageBudget,
    WorkspacePolicy,
    tool,
)
from emelex.testing import ApproveAll, Call, Say, ScriptedModel

from .helpers import builder, outputs, run_collecting

READ_TOOLS = ("read_file", "list_directory", "find_files", "grep")
WORKER_TOOLS = ("update_tasks", "read_tasks", "check_budget")


@tool
async def add(left: int, right: int) -> int:
    """Add two integers."""
    return left + right


def test_presets_are_plain_values() -> None:
    assert Harness.base() == Harness("base")
    assert Harness.conversation().datetime and not Harness.conversation().files
    assert Harness.worker() == Harness(
        "worker",
        files=True,
        skills=True,
        tasks=True,
        context_budget=ContextBudget(32_768),
        usage_budget=UsageBudget(),
    )
    worker, shell = Harness.worker(), Harness.shell_worker()
    assert (shell.files, shell.skills, shell.shell, shell.tasks) == (True, True, True, True)
    assert shell.context_budget == worker.context_budget
    assert not worker.shell
    for preset in (Harness.base(), Harness.conversation()):
        assert not preset.tasks
        assert preset.context_budget is None and preset.usage_budget is None


async def test_base_adds_nothing() -> None:
    agent = builder(ScriptedModel([]), "Only instructions.").tool(add).build()
    context = await Engine().create(agent).harness(Harness.base()).inspect()
    assert context.tool_names == ("add",)
    assert context.system_prompt == "Only instructions."
    default = await Engine().create(agent).inspect()
    assert default == context


async def test_conversation_adds_a_prompt_section_and_the_clock() -> None:
    agent = builder(ScriptedModel([])).tool(add).capability("datetime").build()
    context = await Engine().create(agent).harness(Harness.conversation()).inspect()
    assert context.tool_names == ("datetime", "add")
    assert context.system_prompt is not None
    assert context.system_prompt.startswith("Be helpful.\n\n## Conversation\n")


async def test_worker_is_read_only_by_default() -> None:
    agent = builder(ScriptedModel([])).build()
    context = await Engine().create(agent).harness(Harness.worker()).inspect()
    assert context.tool_names == (*READ_TOOLS, *WORKER_TOOLS)
    prompt = context.system_prompt or ""
    assert "## Workspace" in prompt and "read-only" in prompt
    assert "## Tasks" in prompt and "## Budget" in prompt
    assert "## Skills" not in prompt and "shell" not in prompt


async def test_worker_with_a_writable_policy_adds_writes_and_needs_an_approver() -> None:
    writable = builder(ScriptedModel([])).workspace_policy(WorkspacePolicy.read_write())
    with pytest.raises(ApproverRequired, match="edit_file, write_file"):
        await Engine().create(writable.build()).harness(Harness.worker()).start()
    agent = writable.approver(ApproveAll()).build()
    context = await Engine().create(agent).harness(Harness.worker()).inspect()
    assert context.tool_names == (*READ_TOOLS, "write_file", "edit_file", *WORKER_TOOLS)
    assert "each write or edit asks for approval" in (context.system_prompt or "")


async def test_worker_offers_skills_through_load_skill() -> None:
    model = ScriptedModel([[Call("load_skill", {"name": "triage"})], [Say("labelled")]])
    agent = (
        builder(model)
        .skill("triage", "Sort incoming issues\n by severity.", "Label each issue P0-P3.")
        .skill("release", "Cut a release.", "Tag, build, publish.")
        .build()
    )
    async with Engine() as engine:
        session = await engine.create(agent).harness(Harness.worker()).start()
        context = await session.inspect()
        assert context.tool_names == (*READ_TOOLS, "load_skill", *WORKER_TOOLS)
        prompt = context.system_prompt or ""
        assert "## Skills" in prompt
        assert "- triage: Sort incoming issues by severity." in prompt
        assert "- release: Cut a release." in prompt
        _, events = await run_collecting(session, "triage these")
    assert outputs(events)[0].text == "# Skill: triage\n\nLabel each issue P0-P3."
    schema = context.tools[len(READ_TOOLS)].parameters
    assert schema["properties"]["name"]["enum"] == ["triage", "release"]
    conversation = await Engine().create(agent).harness(Harness.conversation()).inspect()
    assert "load_skill" not in conversation.tool_names


async def test_shell_worker_needs_a_writable_policy_and_an_approver() -> None:
    read_only = builder(ScriptedModel([])).approver(ApproveAll()).build()
    with pytest.raises(ShellNotAllowed):
        await Engine().create(read_only).harness(Harness.shell_worker()).start()
    no_approver = builder(ScriptedModel([])).workspace_policy(WorkspacePolicy.read_write())
    with pytest.raises(ApproverRequired, match="shell"):
        await Engine().create(no_approver.build()).harness(Harness.shell_worker()).start()


async def test_shell_worker_runs_approved_commands_in_the_workspace() -> None:
    approvals = ApproveAll()
    model = ScriptedModel([[Call("shell", {"command": "cat brief.md"})], [Say("read it")]])
    agent = (
        builder(model)
        .file("brief.md", "the brief")
        .workspace_policy(WorkspacePolicy.read_write())
        .approver(approvals)
        .build()
    )
    async with Engine() as engine:
        session = await engine.create(agent).harness(Harness.shell_worker()).start()
        assert session.tools == (
            *READ_TOOLS,
            "write_file",
            "edit_file",
            "shell",
            *WORKER_TOOLS,
        )
        prompt = (await session.inspect()).system_prompt or ""
        assert "A shell runs commands" in prompt
        _, events = await run_collecting(session, "read the brief")
    assert "the brief" in outputs(events)[0].text
    assert [c.call.name for c in approvals.asked] == ["shell"]


async def test_capabilities_add_built_ins_to_any_preset() -> None:
    agent = builder(ScriptedModel([])).capability("files").capability("datetime").build()
    base = await Engine().create(agent).inspect()
    assert base.tool_names == (*READ_TOOLS, "datetime")
    conversation = await Engine().create(agent).harness(Harness.conversation()).inspect()
    assert conversation.tool_names == (*READ_TOOLS, "datetime")
    fetching = builder(ScriptedModel([])).capability("web_fetch", response_bytes=1024).build()
    assert (await Engine().create(fetching).inspect()).tool_names == ("web_fetch",)


async def test_agent_tools_colliding_with_preset_built_ins_fail_to_start() -> None:
    async def handler(args: dict[str, Any]) -> str:
        return "mine"

    mine = FunctionTool("read_file", "My own reader.", {"type": "object"}, handler)
    agent = builder(ScriptedModel([])).tool(mine).build()
    assert (await Engine().create(agent).inspect()).tool_names == ("read_file",)
    with pytest.raises(NameCollision, match="read_file"):
        await Engine().create(agent).harness(Harness.worker()).start()


async def test_worker_sections_follow_the_other_built_in_sections() -> None:
    agent = builder(ScriptedModel([])).skill("triage", "Sort issues.", "Label them.").build()
    prompt = (await Engine().create(agent).harness(Harness.worker()).inspect()).system_prompt
    assert prompt is not None
    headings = [line for line in prompt.splitlines() if line.startswith("## ")]
    assert headings == ["## Workspace", "## Skills", "## Tasks", "## Budget"]
    assert "check_budget" in prompt and "read_tasks" in prompt


async def test_worker_budgets_cap_built_in_tool_output() -> None:
    agent = builder(ScriptedModel([])).build()
    small = await Engine().create(agent).harness(Harness.worker(context_tokens=2_000)).inspect()
    described = {tool.name: tool.description for tool in small.tools}
    assert "at most 4096 bytes" in described["read_file"]  # the 4 KiB floor
    assert "200 matching lines and 4096 bytes" in described["grep"]
    default = await Engine().create(agent).harness(Harness.worker()).inspect()
    assert "at most 32768 bytes" in {t.name: t.description for t in default.tools}["read_file"]
    unbudgeted = Harness.worker(context_tokens=None)
    plain = await Engine().create(agent).harness(unbudgeted).inspect()
    assert "at most 131072 bytes" in {t.name: t.description for t in plain.tools}["read_file"]
    assert "check_budget" in plain.tool_names  # usage is still counted and reported
    shell_agent = (
        builder(ScriptedModel([]))
        .workspace_policy(WorkspacePolicy.read_write())
        .approver(ApproveAll())
        .build()
    )
    for harness, kept in [
        (Harness.shell_worker(context_tokens=4_000), 2048),
        (Harness.shell_worker(), 16384),
        (Harness.shell_worker(context_tokens=None), 32768),
    ]:
        context = await Engine().create(shell_agent).harness(harness).inspect()
        shell = {t.name: t.description for t in context.tools}["shell"]
        assert f"first and last {kept} bytes" in shell
