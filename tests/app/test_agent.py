"""Agent.builder(): an immutable description, validated at build with typed errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
import pytest

from emelex import EmelexError
from emelex.app import (
    Agent,
    AppError,
    ApproverRequired,
    BlankInstructions,
    BuiltinCapability,
    CapabilityPackage,
    CapabilityRef,
    DuplicateCapability,
    DuplicateMcpServer,
    DuplicateProvider,
    DuplicateSkill,
    DuplicateTool,
    FunctionTool,
    InvalidAgent,
    InvalidAgentName,
    InvalidApprover,
    InvalidCapability,
    InvalidCapabilityConfig,
    InvalidFile,
    InvalidMcpServer,
    InvalidPlugin,
    InvalidPolicy,
    InvalidSkill,
    InvalidToolSchema,
    InvalidWorkspaceRoot,
    MissingModel,
    NameCollision,
    ShellNotAllowed,
    WorkspaceConflict,
    WorkspacePolicy,
    tool,
)
from emelex.model import Client
from emelex.testing import ApproveAll, Say, ScriptedModel

from .helpers import builder


def model() -> ScriptedModel:
    return ScriptedModel([[Say("hi")]])


@tool
async def add(left: int, right: int) -> int:
    """Add two integers."""
    return left + right


@tool(needs_approval=lambda args: "DROP" in args.sql)
async def run_sql(sql: str) -> str:
    """Run one SQL statement."""
    return sql


def echo_tool(name: str = "echo", schema: dict[str, Any] | None = None) -> FunctionTool:
    async def handler(args: dict[str, Any]) -> Any:
        return args

    return FunctionTool(name, "Echo.", schema or {"type": "object"}, handler)


@attrs.frozen
class Server:
    name: str
    url: str = "https://example.com/mcp"


def test_a_complete_agent_is_immutable_and_keeps_everything(tmp_path: Path) -> None:
    scripted = model()
    (tmp_path / "plugin").mkdir()  # build() checks that a plugin compiles
    (tmp_path / "plugin" / "plugin.toml").write_text('name = "p"\nentry = "main:register"\n')
    (tmp_path / "plugin" / "main.py").write_text("def register(plugin):\n    pass\n")
    package = CapabilityPackage("notes", tools=(echo_tool("note"),), prompt="Take notes.")
    agent = (
        Agent.builder()
        .name("researcher")
        .instructions("Research carefully.")
        .model(scripted)
        .tool(add)
        .file("brief.md", "Investigate.")
        .readonly_file("policy.md", b"Never expose secrets.")
        .mcp_server(Server("catalog"))
        .capability("datetime")
        .capability("shell", timeout_seconds=30)
        .capability(package)
        .capability(CapabilityRef("acme/crm@2", {"region": "eu"}))
        .plugin(tmp_path / "plugin")
        .skill("triage", "Sort incoming issues.", "Label by severity.")
        .workspace_policy(WorkspacePolicy.read_write().hide(".env"))
        .approver(ApproveAll())
        .build()
    )
    assert agent.name == "researcher"
    assert agent.client.model is scripted
    assert agent.tool_names == ("add",)
    assert [(f.path, f.content, f.readonly) for f in agent.files] == [
        ("brief.md", b"Investigate.", False),
        ("policy.md", b"Never expose secrets.", True),
    ]
    assert agent.mcp_servers == (Server("catalog"),)
    assert agent.plugins == (tmp_path / "plugin",)
    assert [c.id for c in agent.capabilities] == ["datetime", "shell", "notes", "acme/crm@2"]
    shell = agent.capability("shell")
    assert isinstance(shell, BuiltinCapability) and shell.options == {"timeout_seconds": 30.0}
    assert agent.workspace_policy.hidden == (".env",)
    assert agent.skills[0].name == "triage"
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        agent.name = "other"  # type: ignore[misc]


def test_client_and_model_are_alternatives() -> None:
    scripted = model()
    client = Client(scripted)
    agent = Agent.builder().instructions("x").client(client).build()
    assert agent.client is client
    assert Agent.builder().instructions("x").model(scripted).build().client.model is scripted


@pytest.mark.parametrize(
    ("configure", "error"),
    [
        (lambda b: b.instructions("   "), BlankInstructions),
        (lambda b: b.name(""), InvalidAgentName),
        (lambda b: b.name("has space"), InvalidAgentName),
        (lambda b: b.model(model()), DuplicateProvider),
        (lambda b: b.client(Client(model())), DuplicateProvider),
        (lambda b: b.tool(add).tool(add), DuplicateTool),
        (
            lambda b: b.tool(echo_tool(schema={"type": "object", "properties": 3})),
            InvalidToolSchema,
        ),
        (lambda b: b.tool(echo_tool(schema={"type": "array"})), InvalidToolSchema),
        (lambda b: b.tool(object()), InvalidToolSchema),
        (lambda b: b.capability("datetime").capability("datetime"), DuplicateCapability),
        (lambda b: b.capability("Files"), InvalidCapability),
        (lambda b: b.capability("teleport"), InvalidCapability),
        (lambda b: b.capability(42), InvalidCapability),
        (lambda b: b.capability(CapabilityRef("../up")), InvalidCapability),
        (lambda b: b.capability(CapabilityPackage("files")), InvalidCapability),
        (lambda b: b.capability("shell", colour="red"), InvalidCapabilityConfig),
        (lambda b: b.capability("shell", timeout_seconds=0), InvalidCapabilityConfig),
        (lambda b: b.capability("web_fetch", response_bytes=True), InvalidCapabilityConfig),
        (lambda b: b.capability("skills"), InvalidCapability),
        (lambda b: b.tool(echo_tool("read_file")).capability("files"), NameCollision),
        (
            lambda b: b.tool(echo_tool("x")).capability(CapabilityPackage("p", (echo_tool("x"),))),
            NameCollision,
        ),
        (
            lambda b: b.capability(CapabilityPackage("p", (echo_tool("x"), echo_tool("x")))),
            DuplicateTool,
        ),
        (lambda b: b.mcp_server(Server("a")).mcp_server(Server("a")), DuplicateMcpServer),
        (lambda b: b.mcp_server(object()), InvalidMcpServer),
        (lambda b: b.mcp_server(Server(" ")), InvalidMcpServer),
        (lambda b: b.plugin("p").plugin("p"), InvalidPlugin),
        (lambda b: b.plugin(""), InvalidPlugin),
        (lambda b: b.file("/etc/passwd", "x"), InvalidFile),
        (lambda b: b.file("../x", "x"), InvalidFile),
        (lambda b: b.file("a.md", "x").readonly_file("./a.md", "y"), InvalidFile),
        (lambda b: b.file("a", "x").file("a/b", "y"), InvalidFile),
        (lambda b: b.file("a", 3), InvalidFile),
        (lambda b: b.skill("Bad Name", "d", "i"), InvalidSkill),
        (lambda b: b.skill("ok", " ", "i"), InvalidSkill),
        (lambda b: b.skill("ok", "d", "i").skill("ok", "d", "i"), DuplicateSkill),
        (lambda b: b.tool(run_sql), ApproverRequired),
        (lambda b: b.approver(object()), InvalidApprover),
        (lambda b: b.capability("shell"), ShellNotAllowed),
        (
            lambda b: b.capability("shell").workspace_policy(WorkspacePolicy.read_write()),
            ApproverRequired,
        ),
        (
            lambda b: b.capability("files").workspace_policy(WorkspacePolicy.read_write()),
            ApproverRequired,
        ),
        (
            lambda b: b.capability(CapabilityPackage("p", (run_sql,))),
            ApproverRequired,
        ),
    ],
)
def test_build_rejects_each_mistake_with_its_own_error(configure: Any, error: type) -> None:
    with pytest.raises(error) as caught:
        configure(builder(model())).build()
    assert isinstance(caught.value, AppError)
    assert isinstance(caught.value, EmelexError)


def test_missing_model_and_missing_instructions() -> None:
    with pytest.raises(MissingModel):
        Agent.builder().instructions("x").build()
    with pytest.raises(MissingModel):
        Agent.builder().instructions("x").model(object()).build()  # type: ignore[arg-type]
    with pytest.raises(BlankInstructions):
        Agent.builder().model(model()).build()
    assert issubclass(BlankInstructions, InvalidAgent)


def test_gated_tools_build_with_an_approver() -> None:
    agent = builder(model()).tool(run_sql).approver(ApproveAll()).build()
    assert agent.tool_names == ("run_sql",)


def test_workspace_root_must_exist_and_excludes_seeded_files(tmp_path: Path) -> None:
    agent = builder(model()).workspace(tmp_path).build()
    assert agent.workspace == tmp_path.resolve()
    with pytest.raises(InvalidWorkspaceRoot):
        builder(model()).workspace(tmp_path / "missing").build()
    (tmp_path / "file").write_text("x")
    with pytest.raises(InvalidWorkspaceRoot):
        builder(model()).workspace(tmp_path / "file").build()
    with pytest.raises(WorkspaceConflict):
        builder(model()).workspace(tmp_path).file("a.md", "x").build()


def test_invalid_hidden_globs_are_refused() -> None:
    with pytest.raises(InvalidPolicy):
        WorkspacePolicy(hidden=("../up",))
    with pytest.raises(InvalidPolicy):
        WorkspacePolicy().hide("")
    assert WorkspacePolicy().hide("a", "b/**").hidden == ("a", "b/**")
    assert WorkspacePolicy.read_only() == WorkspacePolicy()
    assert WorkspacePolicy.read_write().write


def test_duck_typed_packages_are_frozen_into_capability_packages() -> None:
    class Notes:
        def __init__(self) -> None:
            self.id = "notes"
            self.tools = [echo_tool("note")]
            self.prompt = "Keep notes."

    agent = builder(model()).capability(Notes()).build()
    package = agent.capabilities[0]
    assert isinstance(package, CapabilityPackage)
    assert package.prompt == "Keep notes." and package.tools[0].definition.name == "note"


def test_builder_setters_do_not_validate_until_build() -> None:
    partial = Agent.builder().name("").capability("nope").file("/abs", "x")
    with pytest.raises(InvalidAgentName):
        partial.build()


async def test_the_agent_sets_the_turn_retry_budget() -> None:
    from emelex.agent import RetryBudgetExhausted
    from emelex.app import Engine
    from emelex.testing import Call, ScriptedModel

    model = ScriptedModel([[Call("nope", {})], [Call("nope", {})], [Call("nope", {})]])
    agent = Agent.builder().instructions("x").model(model).max_retries(1).build()
    assert agent.max_retries == 1
    with pytest.raises(ValueError, match="max_retries"):
        Agent.builder().max_retries(-1)
    async with Engine() as engine:
        session = await engine.create(agent).start()
        assert session.agent_session.max_retries == 1
        with pytest.raises(RetryBudgetExhausted):
            await session.send_and_wait("call a tool that does not exist")
