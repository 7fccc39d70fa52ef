"""The application layer: declarative agents, sessions from an engine, harness presets
(with the worker's task list and budgets) and workspace policy.

::

    agent = (
        Agent.builder()
        .name("helper")
        .instructions("Answer briefly.")
        .model(model)
        .tool(add)
        .build()
    )
    async with Engine() as engine:
        session = await engine.create(agent).harness(Harness.conversation()).start()
        turn = await session.send_and_wait("What is 2 + 3?")
"""

from emelex._facade import fix_module_names
from emelex.app import _agent as _agent_module
from emelex.app import _plugins as _plugins_module
from emelex.app import _sync as _sync_module
from emelex.app._agent import Agent, AgentBuilder, RestartMode, SeedFile
from emelex.app._budget import (
    DEFAULT_CONTEXT_TOKENS,
    MEDIA_PART_TOKENS,
    MESSAGE_OVERHEAD_TOKENS,
    BudgetUsage,
    ContextBudget,
    UsageBudget,
    fit_messages,
    fit_request,
)
from emelex.app._capabilities import (
    BUILTIN_OPTIONS,
    BUILTIN_TOOLS,
    BuiltinCapability,
    Capability,
    CapabilityPackage,
    CapabilityRef,
    CapabilityResolver,
)
from emelex.app._engine import (
    Contribution,
    Engine,
    Integration,
    IntegrationRequest,
    Session,
    SessionStarter,
)
from emelex.app._errors import (
    AppError,
    ApproverRequired,
    BlankInstructions,
    BudgetExceeded,
    ContextBudgetExceeded,
    DuplicateCapability,
    DuplicateMcpServer,
    DuplicateProvider,
    DuplicateSkill,
    DuplicateTool,
    EventsLagged,
    IntegrationMissing,
    InvalidAgent,
    InvalidAgentName,
    InvalidApprover,
    InvalidBudget,
    InvalidCapability,
    InvalidCapabilityConfig,
    InvalidFile,
    InvalidHook,
    InvalidMcpServer,
    InvalidOutputType,
    InvalidPackage,
    InvalidPlugin,
    InvalidPolicy,
    InvalidSkill,
    InvalidSubAgent,
    InvalidTaskList,
    InvalidToolSchema,
    InvalidWorkspaceRoot,
    LoopAlreadyRunning,
    MissingBinding,
    MissingModel,
    NameCollision,
    PackageError,
    PackageProblem,
    SessionNotStarted,
    ShellNotAllowed,
    SkillTooLarge,
    StreamNotOpen,
    SubAgentTooWide,
    UnboundModelError,
    UnresolvedCapability,
    UsageBudgetExhausted,
    WorkspaceConflict,
)
from emelex.app._events import DEFAULT_EVENT_BUFFER, EventStream
from emelex.app._harness import Harness
from emelex.app._inspect import SessionContext
from emelex.app._mcp import McpIntegration, ModelSampling
from emelex.app._output import DEFAULT_OUTPUT_RETRIES, TypedTurn
from emelex.app._package_diff import Change, diff_packages, find_packages
from emelex.app._package_format import (
    MAX_FILE_BYTES,
    MAX_FILES,
    MAX_PACKAGE_BYTES,
    LoadedPackage,
    PackageInfo,
    UnboundModel,
)
from emelex.app._package_read import load_agent, load_package, validate_package
from emelex.app._package_write import export_agent, manifest_text
from emelex.app._plugins import (
    LoadedPlugin,
    PluginError,
    PluginIntegration,
    PluginRegistry,
    PluginWarning,
    load_plugin,
)
from emelex.app._policy import WorkspacePolicy, recursive_delete_reason
from emelex.app._skill import (
    MAX_SKILL_BYTES,
    MAX_SKILL_DEPTH,
    MAX_SKILL_FILE_BYTES,
    MAX_SKILL_FILES,
    Skill,
    SkillFile,
)
from emelex.app._stream import TextStream
from emelex.app._subagent import SubAgentTool, SubAgentTranscript, TranscriptBook
from emelex.app._sync import run_sync
from emelex.app._tasks import (
    MAX_TASK_BYTES,
    MAX_TASKS,
    TASK_STATUSES,
    Task,
    TaskList,
    TaskStatus,
    tasks_from_history,
)
from emelex.tools import (
    ArgumentConversionError,
    FunctionTool,
    InvalidToolFunction,
    ToolCallContext,
    ToolError,
    UnsupportedAnnotation,
    tool,
)
from emelex.tools.mcp import McpServer

__all__ = [
    "BUILTIN_OPTIONS",
    "BUILTIN_TOOLS",
    "DEFAULT_EVENT_BUFFER",
    # agents
    "Agent",
    "AgentBuilder",
    "MAX_SKILL_BYTES",
    "MAX_SKILL_DEPTH",
    "MAX_SKILL_FILES",
    "MAX_SKILL_FILE_BYTES",
    "SeedFile",
    "RestartMode",
    "Skill",
    "SkillFile",
    # capabilities
    "BuiltinCapability",
    "Capability",
    "CapabilityPackage",
    "CapabilityRef",
    "CapabilityResolver",
    # engine and sessions
    "Contribution",
    "Engine",
    "EventStream",
    "EventsLagged",
    "Harness",
    "Integration",
    "IntegrationRequest",
    "Session",
    "SessionContext",
    "SessionStarter",
    # structured output, streaming text, synchronous use
    "DEFAULT_OUTPUT_RETRIES",
    "TextStream",
    "TypedTurn",
    "run_sync",
    # worker tasks and budgets
    "DEFAULT_CONTEXT_TOKENS",
    "MAX_TASKS",
    "MAX_TASK_BYTES",
    "MEDIA_PART_TOKENS",
    "MESSAGE_OVERHEAD_TOKENS",
    "TASK_STATUSES",
    "BudgetUsage",
    "ContextBudget",
    "Task",
    "TaskList",
    "TaskStatus",
    "UsageBudget",
    "fit_messages",
    "fit_request",
    "tasks_from_history",
    # agent packages
    "MAX_FILES",
    "MAX_FILE_BYTES",
    "MAX_PACKAGE_BYTES",
    "Change",
    "LoadedPackage",
    "PackageInfo",
    "PackageProblem",
    "UnboundModel",
    "diff_packages",
    "export_agent",
    "find_packages",
    "load_agent",
    "load_package",
    "manifest_text",
    "validate_package",
    # plugins
    "LoadedPlugin",
    "McpIntegration",
    "ModelSampling",
    "McpServer",
    "PluginIntegration",
    "PluginRegistry",
    "PluginWarning",
    "load_plugin",
    # workspace policy
    "WorkspacePolicy",
    "recursive_delete_reason",
    # function tools
    "ArgumentConversionError",
    "FunctionTool",
    "InvalidToolFunction",
    "ToolCallContext",
    "ToolError",
    "UnsupportedAnnotation",
    "tool",
    # errors
    "AppError",
    "ApproverRequired",
    "BlankInstructions",
    "BudgetExceeded",
    "ContextBudgetExceeded",
    "DuplicateCapability",
    "DuplicateMcpServer",
    "DuplicateProvider",
    "DuplicateSkill",
    "DuplicateTool",
    "IntegrationMissing",
    "InvalidAgent",
    "InvalidAgentName",
    "InvalidApprover",
    "InvalidBudget",
    "InvalidCapability",
    "InvalidCapabilityConfig",
    "InvalidFile",
    "InvalidMcpServer",
    "InvalidOutputType",
    "InvalidPackage",
    "InvalidPlugin",
    "InvalidPolicy",
    "InvalidSkill",
    "InvalidTaskList",
    "InvalidToolSchema",
    "InvalidWorkspaceRoot",
    "LoopAlreadyRunning",
    "MissingBinding",
    "MissingModel",
    "NameCollision",
    "PackageError",
    "PluginError",
    "SessionNotStarted",
    "ShellNotAllowed",
    "SkillTooLarge",
    "StreamNotOpen",
    "UnboundModelError",
    "UnresolvedCapability",
    "UsageBudgetExhausted",
    "WorkspaceConflict",
    "InvalidHook",
    "InvalidSubAgent",
    "SubAgentTooWide",
    "SubAgentTool",
    "SubAgentTranscript",
    "TranscriptBook",
]

# Agent methods that build on later app modules (see app/_agent.APP_HOOKS).
_agent_module.APP_HOOKS.load = load_agent
_agent_module.APP_HOOKS.export = export_agent
_agent_module.APP_HOOKS.run_sync = _sync_module.run_agent_sync
_agent_module.APP_HOOKS.check_plugin = _plugins_module.check_plugin
fix_module_names(__name__, globals())
