"""Agent: an immutable, validated description of an application's agent."""

from __future__ import annotations

import os
import pathlib
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, Literal, TypeVar, overload

import attrs

from emelex.agent import (
    DEFAULT_MAX_RETRIES,
    AgentTurn,
    ApprovalPolicy,
    Guardrails,
    Hook,
    InputGuardrail,
    OutputGuardrail,
    ToolCancellationPolicy,
    ToolGuardrail,
    check_max_retries,
)
from emelex.app._capabilities import (
    BUILTIN_TOOLS,
    BuiltinCapability,
    Capability,
    CapabilityPackage,
    to_capability,
)
from emelex.app._errors import (
    ApproverRequired,
    BlankInstructions,
    DuplicateCapability,
    DuplicateMcpServer,
    DuplicateProvider,
    DuplicateSkill,
    DuplicateTool,
    InvalidAgent,
    InvalidAgentName,
    InvalidApprover,
    InvalidCapability,
    InvalidFile,
    InvalidHook,
    InvalidMcpServer,
    InvalidPlugin,
    InvalidSkill,
    InvalidToolSchema,
    InvalidWorkspaceRoot,
    MissingModel,
    NameCollision,
    ShellNotAllowed,
    WorkspaceConflict,
)
from emelex.app._output import DEFAULT_OUTPUT_RETRIES, OutputSpec, TypedTurn, check_retries
from emelex.app._package_info import DEFAULTS, PackageInfo
from emelex.app._policy import WorkspacePolicy
from emelex.app._skill import Skill, skill_files
from emelex.model import AgentModel, Client, GenerationOptions
from emelex.tools import AgentTool, tool_name_problem, tool_schema_problem
from emelex.tools.workspace import PathRejected, split_path

if TYPE_CHECKING:
    from emelex.app._harness import Harness
    from emelex.app._subagent import SubAgentTool

T = TypeVar("T")

AGENT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
SKILL_NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,63}")
#: Longest component of a seeded file path, in bytes.
MAX_NAME_BYTES = 255


#: What a Host does with a turn its lost process left running.
RestartMode = Literal["resume", "settle"]
RESTART_MODES: Final = ("resume", "settle")


@attrs.frozen
class SeedFile:
    """A file copied into a session's private workspace when it starts."""

    path: str
    content: bytes
    readonly: bool = False

    @property
    def parts(self) -> tuple[str, ...]:
        return tuple(self.path.split("/"))


def _seed_path(path: Any) -> str:
    """A seeded file's path, split by the workspace's own rules (the file tools accept
    exactly what is seeded), then held to stricter ones: relative, names a file, no
    backslash (a package must mean the same on every system)."""
    if isinstance(path, os.PathLike):
        path = os.fspath(path)
    if not isinstance(path, str) or not path.strip():
        raise InvalidFile(f"a file path must be non-blank text, got {path!r}")
    if "\\" in path:
        raise InvalidFile(f"file path {path!r} contains a backslash")
    try:
        absolute, parts = split_path(path)
    except PathRejected as exc:
        raise InvalidFile(f"file path {path!r}: {exc.detail}") from exc
    if absolute:
        raise InvalidFile(f"file path {path!r} must be relative to the workspace")
    if not parts:
        raise InvalidFile(f"file path {path!r} names no file")
    return "/".join(parts)


def _content(path: str, content: Any) -> bytes:
    if isinstance(content, str):
        return content.encode("utf-8")
    if isinstance(content, bytes | bytearray | memoryview):
        return bytes(content)
    raise InvalidFile(f"file {path!r}: content must be str or bytes, not {type(content).__name__}")


def check_tool(tool: Any, where: str) -> str:
    """Check an AgentTool's declaration; return its name. Raises InvalidToolSchema."""
    if not isinstance(tool, AgentTool):
        raise InvalidToolSchema(f"{where}: {tool!r} does not implement the AgentTool protocol")
    definition = tool.definition
    name = getattr(definition, "name", None)
    problem = tool_name_problem(name)
    if problem is not None:
        raise InvalidToolSchema(f"{where}: {problem}")
    problem = tool_schema_problem(definition.parameters)
    if problem is not None:
        raise InvalidToolSchema(f"{where}: tool {name!r}: {problem}")
    assert isinstance(name, str)
    return name


def tool_gated(tool: AgentTool) -> bool:
    """Whether a tool declares that some calls ask for approval (``FunctionTool.gated``)."""
    return bool(getattr(tool, "gated", False))


class _AppHooks:
    """Functions of app modules that build on Agent (the package reader and writer, the
    synchronous runner, the plugin check) and so cannot be imported here without an
    import circle: the ``emelex.app`` facade, always imported before this module, hands
    them in."""

    load: Callable[..., Agent]
    export: Callable[..., None]
    run_sync: Callable[..., Any]
    check_plugin: Callable[[pathlib.Path], None]


APP_HOOKS = _AppHooks()


@attrs.frozen
class Agent:
    """An immutable, validated application description; build one with
    :meth:`Agent.builder`, then start sessions with an :class:`~emelex.app.Engine`.

    ``mcp_servers`` (objects with a ``name``) and ``plugins`` (paths) are carried as
    given for engine integrations to connect or load; the agent does not interpret them.
    """

    name: str
    instructions: str
    client: Client
    tools: tuple[AgentTool, ...]
    approver: ApprovalPolicy | None
    files: tuple[SeedFile, ...]
    workspace: pathlib.Path | None
    workspace_policy: WorkspacePolicy
    mcp_servers: tuple[Any, ...]
    capabilities: tuple[Capability, ...]
    plugins: tuple[pathlib.Path, ...]
    skills: tuple[Skill, ...]
    options: GenerationOptions
    #: The type every turn's answer is converted to (``turn.output``), or None for
    #: plain text answers; see ``docs/app/structured-output.md``.
    output_type: Any = None
    #: Retry turns after an invalid structured answer.
    output_retries: int = DEFAULT_OUTPUT_RETRIES
    #: Rounds of a turn in which the model may get corrections (invalid arguments,
    #: ``RetryWithFeedback``); see ``docs/app/retries.md``.
    max_retries: int = DEFAULT_MAX_RETRIES
    #: The package metadata (description, version, model binding, harness preset) that
    #: :meth:`export` writes; :meth:`load` fills it from the manifest.
    package: PackageInfo = DEFAULTS
    #: Lifecycle hooks of every session (guardrails last, as one :class:`Guardrails`).
    hooks: tuple[Hook, ...] = ()
    #: What a Host does with a turn its lost process left running: ``"resume"`` it from
    #: its last progress record, or ``"settle"`` it (checkpoint or roll back, and end
    #: its invocation as interrupted); see ``docs/service/after-a-crash.md``.
    on_restart: RestartMode = "resume"

    @staticmethod
    def builder() -> AgentBuilder:
        return AgentBuilder()

    @staticmethod
    def load(
        path: str | os.PathLike[str],
        *,
        bindings: Mapping[str, Client | AgentModel] | None = None,
        approver: ApprovalPolicy | None = None,
        modules: Sequence[str] = (),
    ) -> Agent:
        """The agent of the package at ``path`` (see :func:`emelex.app.load_agent`;
        :func:`emelex.app.load_package` also keeps the package's metadata)."""
        return APP_HOOKS.load(path, bindings=bindings, approver=approver, modules=modules)

    def export(self, path: str | os.PathLike[str]) -> None:
        """Write this agent as a package at ``path``, with its own :attr:`package`
        metadata (see :func:`emelex.app.export_agent`, which can override it)."""
        APP_HOOKS.export(self, path)

    @overload
    def run_sync(
        self,
        text: str,
        *,
        output_type: type[T],
        options: GenerationOptions | None = None,
        harness: Harness | None = None,
    ) -> TypedTurn[T]: ...

    @overload
    def run_sync(
        self,
        text: str,
        *,
        output_type: Any = None,
        options: GenerationOptions | None = None,
        harness: Harness | None = None,
    ) -> AgentTurn: ...

    def run_sync(
        self,
        text: str,
        *,
        output_type: Any = None,
        options: GenerationOptions | None = None,
        harness: Harness | None = None,
    ) -> AgentTurn:
        """Run one turn from synchronous code (a script, a notebook without a running
        loop): starts Trio, an engine and a session (``harness``, default
        ``Harness.base()``), runs the turn, closes them and returns the turn (a
        :class:`~emelex.app.TypedTurn` when an output type applies). Raises
        :class:`~emelex.app.LoopAlreadyRunning` inside a running Trio or asyncio loop,
        and whatever the turn raises."""
        turn: AgentTurn = APP_HOOKS.run_sync(
            self, text, output_type=output_type, options=options, harness=harness
        )
        return turn

    def as_tool(
        self,
        *,
        name: str,
        description: str,
        harness: Harness | None = None,
        max_rounds: int | None = None,
        timeout: float | None = None,
        cancellation_policy: ToolCancellationPolicy = ToolCancellationPolicy.FINISH_ONCE_STARTED,
    ) -> SubAgentTool:
        """This agent as a tool of another (a sub-agent): each call runs one turn of it
        on the call's ``task``, within the parent session's authority, approvals and
        budget. See :class:`~emelex.app.SubAgentTool`; raises
        :class:`~emelex.app.InvalidSubAgent`."""
        from emelex.app._subagent import SubAgentTool

        return SubAgentTool(
            self,
            name=name,
            description=description,
            harness=harness,
            max_rounds=max_rounds,
            timeout=timeout,
            cancellation_policy=cancellation_policy,
        )

    def capability(self, capability_id: str) -> Capability | None:
        return next((c for c in self.capabilities if c.id == capability_id), None)

    @property
    def tool_names(self) -> tuple[str, ...]:
        return tuple(tool.definition.name for tool in self.tools)


class AgentBuilder:
    """Collects an agent's description; :meth:`build` validates all of it at once.

    Every setter returns the builder. Nothing is checked before :meth:`build`, which
    raises one :class:`~emelex.app.InvalidAgent` subclass (or
    :class:`~emelex.app.ApproverRequired` / :class:`~emelex.app.ShellNotAllowed`).
    """

    def __init__(self) -> None:
        self._name: Any = "agent"
        self._instructions: Any = None
        self._models: list[Client] = []
        self._model_error: str | None = None
        self._tools: list[Any] = []
        self._approver: ApprovalPolicy | None = None
        self._files: list[tuple[Any, Any, bool]] = []
        self._workspace: Any = None
        self._policy = WorkspacePolicy()
        self._mcp: list[Any] = []
        self._capabilities: list[tuple[Any, dict[str, Any]]] = []
        self._plugins: list[Any] = []
        self._skills: list[Skill] = []
        self._options = GenerationOptions()
        self._output_type: Any = None
        self._output_retries: Any = DEFAULT_OUTPUT_RETRIES
        self._max_retries = DEFAULT_MAX_RETRIES
        self._on_restart: RestartMode = "resume"
        self._package: Any = PackageInfo()
        self._hooks: list[Any] = []
        self._guardrails: dict[str, list[Any]] = {"input": [], "output": [], "tool": []}

    def name(self, name: str) -> AgentBuilder:
        self._name = name
        return self

    def instructions(self, text: str) -> AgentBuilder:
        self._instructions = text
        return self

    def client(self, client: Client | AgentModel) -> AgentBuilder:
        """The model to use, as a :class:`Client` (or any AgentModel)."""
        return self._model(client)

    def model(self, model: AgentModel | Client) -> AgentBuilder:
        """The model to use, as any AgentModel (e.g. ``ScriptedModel`` for tests)."""
        return self._model(model)

    def _model(self, value: Any) -> AgentBuilder:
        if isinstance(value, Client):
            self._models.append(value)
        elif isinstance(value, AgentModel):
            self._models.append(Client(value))
        else:
            self._model_error = f"{value!r} is neither a Client nor an AgentModel"
        return self

    def tool(self, tool: AgentTool) -> AgentBuilder:
        self._tools.append(tool)
        return self

    def tools(self, tools: Iterable[AgentTool]) -> AgentBuilder:
        self._tools.extend(tools)
        return self

    def hook(self, hook: Hook) -> AgentBuilder:
        """A lifecycle hook of every session, run in the order added (see
        :class:`~emelex.agent.Hook`)."""
        self._hooks.append(hook)
        return self

    def input_guardrail(self, guardrail: InputGuardrail) -> AgentBuilder:
        """Check each turn's user message before the first model request."""
        self._guardrails["input"].append(guardrail)
        return self

    def output_guardrail(self, guardrail: OutputGuardrail) -> AgentBuilder:
        """Check each turn's final answer before it commits."""
        self._guardrails["output"].append(guardrail)
        return self

    def tool_guardrail(self, guardrail: ToolGuardrail) -> AgentBuilder:
        """Check each tool call before approval and its result before the model."""
        self._guardrails["tool"].append(guardrail)
        return self

    def approver(self, approver: ApprovalPolicy) -> AgentBuilder:
        """The approval policy asked before gated calls (``decide(ApprovalContext)``:
        session id, turn id, the call with its id and arguments, the tool's definition
        and a sentence naming the action)."""
        self._approver = approver
        return self

    def file(self, path: str | os.PathLike[str], content: str | bytes) -> AgentBuilder:
        """Seed an editable file into the session's private workspace."""
        self._files.append((path, content, False))
        return self

    def readonly_file(self, path: str | os.PathLike[str], content: str | bytes) -> AgentBuilder:
        """Seed a file the agent may read but not change (mode 0444, writes refused)."""
        self._files.append((path, content, True))
        return self

    def workspace(self, root: str | os.PathLike[str]) -> AgentBuilder:
        """Expose one trusted real directory as the workspace (instead of a private
        temporary one). Choose it from trusted configuration, never from model output."""
        self._workspace = root
        return self

    def workspace_policy(self, policy: WorkspacePolicy) -> AgentBuilder:
        self._policy = policy
        return self

    def mcp_server(self, server: Any) -> AgentBuilder:
        """An MCP server configuration (any object with a ``name``), for an engine
        integration to connect."""
        self._mcp.append(server)
        return self

    def capability(self, capability: Any, **options: Any) -> AgentBuilder:
        """A built-in id with options, a code-defined package, or a CapabilityRef."""
        self._capabilities.append((capability, options))
        return self

    def plugin(self, path: str | os.PathLike[str]) -> AgentBuilder:
        """A local plugin directory, for an engine integration to load."""
        self._plugins.append(path)
        return self

    def skill(
        self,
        name: str,
        description: str,
        instructions: str,
        *,
        files: Mapping[str, str | bytes] | None = None,
    ) -> AgentBuilder:
        """Add a skill; ``files`` (path -> text or bytes) are its other files, which the
        model reads through ``load_skill``. Bad file paths and bounds raise here."""
        self._skills.append(Skill(name, description, instructions, skill_files(name, files)))
        return self

    def options(self, options: GenerationOptions) -> AgentBuilder:
        self._options = options
        return self

    def output_type(
        self, output_type: Any, *, retries: int = DEFAULT_OUTPUT_RETRIES
    ) -> AgentBuilder:
        """Convert every turn's answer to ``output_type`` (``turn.output``), retrying an
        invalid answer ``retries`` times; see ``docs/app/structured-output.md``."""
        self._output_type = output_type
        self._output_retries = retries
        return self

    def max_retries(self, n: int) -> AgentBuilder:
        """Rounds of each turn in which the model may get corrections (default 6); the
        next one fails the turn with ``RetryBudgetExhausted``. Each tool keeps its own
        budget (``@tool(max_retries=...)``)."""
        check_max_retries(n)
        self._max_retries = n
        return self

    def on_restart(self, mode: RestartMode) -> AgentBuilder:
        """What a Host does with a turn its lost process left running (default
        ``"resume"``; ``"settle"`` ends it by the checkpoint rule). Raises InvalidAgent."""
        if mode not in RESTART_MODES:
            raise InvalidAgent(f"on_restart must be one of {RESTART_MODES}, got {mode!r}")
        self._on_restart = mode
        return self

    def package(self, info: PackageInfo) -> AgentBuilder:
        """The package metadata :meth:`Agent.export` writes (description, version, model
        binding, harness preset); checked when the agent is exported."""
        self._package = info
        return self

    # -- validation -----------------------------------------------------------------------
    def build(self) -> Agent:
        name = self._name
        if not isinstance(name, str) or not AGENT_NAME.fullmatch(name):
            raise InvalidAgentName(
                f"agent name {name!r} must be 1-64 letters, digits, _ . - (starting with a "
                "letter or digit)"
            )
        instructions = self._instructions
        if not isinstance(instructions, str) or not instructions.strip():
            raise BlankInstructions("the agent needs non-blank instructions")
        if self._model_error is not None:
            raise MissingModel(self._model_error)
        if not self._models:
            raise MissingModel("the agent needs a model: call client(...) or model(...)")
        if len(self._models) > 1:
            raise DuplicateProvider("the model was given more than once (client/model)")
        if not isinstance(self._policy, WorkspacePolicy):
            raise InvalidCapability(f"{self._policy!r} is not a WorkspacePolicy")
        if self._approver is not None and not isinstance(self._approver, ApprovalPolicy):
            raise InvalidApprover(
                f"{self._approver!r} is not an ApprovalPolicy (async decide(context))"
            )
        tools = self._check_tools()
        capabilities = self._check_capabilities(tools)
        files = self._check_files()
        workspace = self._check_workspace(files)
        skills = self._check_skills(capabilities)
        mcp_servers = self._check_mcp()
        plugins = self._check_plugins()
        self._check_approvals(tools, capabilities)
        retries = check_retries(self._output_retries)
        if self._output_type is not None:
            OutputSpec.of(self._output_type)  # raises InvalidOutputType
        if not isinstance(self._package, PackageInfo):
            raise InvalidAgent(f"package metadata {self._package!r} is not a PackageInfo")
        return Agent(
            name=name,
            instructions=instructions,
            client=self._models[0],
            tools=tuple(tools),
            approver=self._approver,
            files=files,
            workspace=workspace,
            workspace_policy=self._policy,
            mcp_servers=mcp_servers,
            capabilities=capabilities,
            plugins=plugins,
            skills=skills,
            options=self._options,
            output_type=self._output_type,
            output_retries=retries,
            max_retries=self._max_retries,
            on_restart=self._on_restart,
            package=self._package,
            hooks=self._check_hooks(),
        )

    def _check_hooks(self) -> tuple[Hook, ...]:
        for hook in self._hooks:
            if not isinstance(hook, Hook):
                raise InvalidHook(f"{hook!r} is not a Hook (subclass emelex.agent.Hook)")
        hooks = list(self._hooks)
        if any(self._guardrails.values()):
            try:
                hooks.append(Guardrails(**self._guardrails))
            except TypeError as exc:
                raise InvalidHook(str(exc)) from exc
        return tuple(hooks)

    def _check_tools(self) -> list[AgentTool]:
        seen: set[str] = set()
        for tool in self._tools:
            name = check_tool(tool, "tool")
            if name in seen:
                raise DuplicateTool(f"two tools are named {name!r}")
            seen.add(name)
        return list(self._tools)

    def _check_capabilities(self, tools: Sequence[AgentTool]) -> tuple[Capability, ...]:
        capabilities: list[Capability] = []
        owner: dict[str, str] = {tool.definition.name: "the agent's tools" for tool in tools}
        for spec, options in self._capabilities:
            capability = to_capability(spec, options)
            if any(c.id == capability.id for c in capabilities):
                raise DuplicateCapability(f"capability {capability.id!r} was added twice")
            names: Sequence[str] = ()
            if isinstance(capability, BuiltinCapability):
                names = BUILTIN_TOOLS[capability.id]
            elif isinstance(capability, CapabilityPackage):
                seen: set[str] = set()
                for tool in capability.tools:
                    name = check_tool(tool, f"capability {capability.id!r}")
                    if name in seen:
                        raise DuplicateTool(
                            f"capability {capability.id!r} has two tools named {name!r}"
                        )
                    seen.add(name)
                names = tuple(seen)
            source = f"capability {capability.id!r}"
            for name in names:
                if name in owner:
                    raise NameCollision(f"tool {name!r} is provided by {owner[name]} and {source}")
                owner[name] = source
            capabilities.append(capability)
        return tuple(capabilities)

    def _check_files(self) -> tuple[SeedFile, ...]:
        files: list[SeedFile] = []
        paths: set[str] = set()
        for path, content, readonly in self._files:
            normal = _seed_path(path)
            if normal in paths:
                raise InvalidFile(f"file {normal!r} was given twice")
            paths.add(normal)
            files.append(SeedFile(normal, _content(normal, content), readonly))
        for seeded in files:
            parts = seeded.parts
            for depth in range(1, len(parts)):
                if "/".join(parts[:depth]) in paths:
                    raise InvalidFile(
                        f"file {'/'.join(parts[:depth])!r} is also a directory of {seeded.path!r}"
                    )
        return tuple(files)

    def _check_workspace(self, files: Sequence[SeedFile]) -> pathlib.Path | None:
        if self._workspace is None:
            return None
        try:
            root = pathlib.Path(os.fspath(self._workspace)).resolve(strict=True)
        except (OSError, TypeError) as exc:
            raise InvalidWorkspaceRoot(f"workspace {self._workspace!r}: {exc}") from exc
        if not root.is_dir():
            raise InvalidWorkspaceRoot(f"workspace {str(root)!r} is not a directory")
        if files:
            raise WorkspaceConflict(
                "files are seeded only into a session's private workspace; with "
                "workspace(root), put the files in the root yourself"
            )
        return root

    def _check_skills(self, capabilities: Sequence[Capability]) -> tuple[Skill, ...]:
        names: set[str] = set()
        for skill in self._skills:
            if not isinstance(skill.name, str) or not SKILL_NAME.fullmatch(skill.name):
                raise InvalidSkill(
                    f"skill name {skill.name!r} must be 1-64 lowercase letters, digits and -"
                )
            for field in ("description", "instructions"):
                value = getattr(skill, field)
                if not isinstance(value, str) or not value.strip():
                    raise InvalidSkill(f"skill {skill.name!r} needs non-blank {field}")
            if skill.name in names:
                raise DuplicateSkill(f"two skills are named {skill.name!r}")
            names.add(skill.name)
        if any(c.id == "skills" for c in capabilities) and not self._skills:
            raise InvalidCapability("the skills capability needs at least one skill(...)")
        return tuple(self._skills)

    def _check_mcp(self) -> tuple[Any, ...]:
        names: set[str] = set()
        for server in self._mcp:
            name = getattr(server, "name", None)
            if not isinstance(name, str) or not name.strip():
                raise InvalidMcpServer(f"MCP server {server!r} has no non-blank name")
            if name in names:
                raise DuplicateMcpServer(f"two MCP servers are named {name!r}")
            names.add(name)
        return tuple(self._mcp)

    def _check_plugins(self) -> tuple[pathlib.Path, ...]:
        plugins: list[pathlib.Path] = []
        for path in self._plugins:
            try:
                text = os.fspath(path)
            except TypeError as exc:
                raise InvalidPlugin(f"plugin {path!r} is not a path") from exc
            if not isinstance(text, str) or not text.strip():
                raise InvalidPlugin(f"plugin path {path!r} is blank")
            plugin = pathlib.Path(text)
            if plugin in plugins:
                raise InvalidPlugin(f"plugin {text!r} was added twice")
            APP_HOOKS.check_plugin(plugin)  # PluginError (an InvalidPlugin): manifest, syntax
            plugins.append(plugin)
        return tuple(plugins)

    def _check_approvals(
        self, tools: Sequence[AgentTool], capabilities: Sequence[Capability]
    ) -> None:
        ids = {c.id for c in capabilities}
        if "shell" in ids and not self._policy.write:
            raise ShellNotAllowed(
                "the shell capability needs a writable workspace: select "
                "workspace_policy(WorkspacePolicy.read_write())"
            )
        if self._approver is not None:
            return
        gated = [tool.definition.name for tool in tools if tool_gated(tool)]
        for capability in capabilities:
            if isinstance(capability, CapabilityPackage):
                gated.extend(t.definition.name for t in capability.tools if tool_gated(t))
        if "shell" in ids:
            gated.append("shell")
        if "files" in ids and self._policy.write:
            gated.extend(("write_file", "edit_file"))
        if gated:
            raise ApproverRequired(
                f"tools {', '.join(sorted(set(gated)))} ask for approval but the agent has "
                "no approver(...)"
            )


__all__ = ["Agent", "AgentBuilder", "SeedFile", "Skill", "check_tool", "tool_gated"]
