"""Pins the public facade: removing or renaming a public name must be deliberate."""

from __future__ import annotations

import importlib

import pytest

import emelex

EXPECTED = {
    "emelex": {
        "AgentCancellation",
        "AgentError",
        "AgentEvent",
        "AgentModel",
        "AgentSession",
        "AgentSessionBuilder",
        "AgentTool",
        "AgentTurn",
        "ApprovalContext",
        "ApprovalDecision",
        "ApprovalPolicy",
        "Approve",
        "AudioPart",
        "Capabilities",
        "Client",
        "Deny",
        "DenyAll",
        "DetachedWorkError",
        "EmelexError",
        "GenerationOptions",
        "GenerationRequest",
        "ImagePart",
        "LimitExceeded",
        "Message",
        "ModelError",
        "Reasoning",
        "Response",
        "RetryBudgetExhausted",
        "RetryWithFeedback",
        "RoundLimitExceeded",
        "SerializationError",
        "Supervisor",
        "TextPart",
        "ToolCall",
        "ToolChoice",
        "ToolCancellationPolicy",
        "ToolDefinition",
        "ToolInvocation",
        "ToolOutput",
        "Usage",
        "VideoPart",
        "__version__",
        "open_supervisor",
        "Agent",
        "AppError",
        "Engine",
        "FunctionTool",
        "Harness",
        "Session",
        "SessionContext",
        "ToolCallContext",
        "ToolError",
        "WorkspacePolicy",
        "tool",
        # structured output and synchronous use
        "LoopAlreadyRunning",
        "McpServer",
        "OutputValidationError",
        "TypedTurn",
        "run_sync",
    },
    "emelex.app": {
        "Agent",
        "AgentBuilder",
        "AppError",
        "ApproverRequired",
        "CapabilityPackage",
        "CapabilityRef",
        "Contribution",
        "Engine",
        "EventStream",
        "EventsLagged",
        "FunctionTool",
        "Harness",
        "Integration",
        "IntegrationRequest",
        "InvalidAgent",
        "Session",
        "SessionContext",
        "SessionStarter",
        "ToolCallContext",
        "ToolError",
        "WorkspacePolicy",
        "tool",
        # worker tasks and budgets
        "BudgetExceeded",
        "BudgetUsage",
        "ContextBudget",
        "ContextBudgetExceeded",
        "InvalidBudget",
        "InvalidTaskList",
        "Task",
        "TaskList",
        "TaskStatus",
        "UsageBudget",
        "UsageBudgetExhausted",
        "fit_messages",
        "fit_request",
        "tasks_from_history",
        # structured output, streaming text, synchronous use
        "DEFAULT_OUTPUT_RETRIES",
        "InvalidOutputType",
        "LoopAlreadyRunning",
        "McpServer",
        "StreamNotOpen",
        "TextStream",
        "TypedTurn",
        "run_sync",
        # agent packages and skills
        "Change",
        "InvalidPackage",
        "LoadedPackage",
        "MissingBinding",
        "PackageError",
        "PackageInfo",
        "PackageProblem",
        "Skill",
        "SkillFile",
        "SkillTooLarge",
        "diff_packages",
        "export_agent",
        "load_agent",
        "load_package",
        "validate_package",
    },
    "emelex.tools.mcp": {
        "HttpTransport",
        "InvalidMcpConfig",
        "McpConnection",
        "McpConnectionFailed",
        "McpError",
        "McpProtocolError",
        "McpServer",
        "McpServerClosed",
        "McpServerInfo",
        "McpStdioDisabled",
        "McpTimeout",
        "McpTool",
        "McpToolNotFound",
        "McpUnavailable",
        "StdioTransport",
        "open_mcp_connection",
        "start_mcp_connection",
    },
    "emelex.tools": {
        "ToolsError",
        "schema_for",
        "conversion_error",
        "converter",
        "register_typeddict",
        "AgentTool",
        "ArgumentValidator",
        "FunctionTool",
        "RetryWithFeedback",
        "TOOL_NAME",
        "ToolCallContext",
        "ToolError",
        "tool",
        "tool_name_problem",
        "tool_schema_problem",
    },
    "emelex.store": {
        "directory_looser_than_private",
        "make_private_directory",
        "MAX_PAGE_ROWS",
        "SCHEMA_VERSION",
        "AppendResult",
        "NewEvent",
        "OperationConflict",
        "OperationRecord",
        "Position",
        "RowFields",
        "RowPage",
        "StoredCall",
        "StoredEvent",
        "StoredRow",
        "turn_events",
        "SessionExists",
        "SessionNotFound",
        "SessionSummary",
        "SqliteStore",
        "StoreCorrupt",
        "StoreError",
        "StoredSession",
        "open_sqlite_store",
    },
    "emelex.tools.workspace": {
        "AtomicRenameUnsupported",
        "ConcurrentModification",
        "DEFAULT_SKIP_DIRS",
        "DirEntry",
        "DirectoryListing",
        "EditMismatch",
        "EditResult",
        "FileContent",
        "FindResult",
        "Glob",
        "GrepLine",
        "GrepResult",
        "HiddenPath",
        "HiddenPaths",
        "InvalidArgument",
        "Leftover",
        "LeftoverListing",
        "MAX_NAME_BYTES",
        "MAX_PATH_BYTES",
        "MAX_WRITE_BYTES",
        "NotADirectory",
        "NotFound",
        "NotRegularFile",
        "NotTextFile",
        "OperationAborted",
        "OutsideWorkspace",
        "PathRejected",
        "PatternError",
        "PermissionDenied",
        "SECRET_RULES",
        "SecretPath",
        "SecretRule",
        "SymlinkRefused",
        "Target",
        "Workspace",
        "WorkspaceClosed",
        "WorkspaceError",
        "WorkspaceIOError",
        "WriteResult",
        "classify_path",
        "compile_glob",
        "edit_file",
        "find_files",
        "grep",
        "is_secret_path",
        "list_directory",
        "list_leftovers",
        "read_file",
        "secret_reason",
        "split_path",
        "write_file",
    },
    "emelex.runtime": {
        "DIAGNOSTICS_ENV",
        "open_unwrapping_nursery",
        "ActorInfo",
        "ActorKind",
        "ActorState",
        "ActorTree",
        "AgentCancellation",
        "CancellationPolicy",
        "DedicatedWorker",
        "DetachedWorkError",
        "Mailbox",
        "Supervisor",
        "open_dedicated_worker",
        "open_supervisor",
        "run_in_worker",
        "serve_diagnostics",
    },
    "emelex.agent": {
        "fit_rounds",
        "validate_history",
        "OutputValidationError",
        "RetryBudgetExhausted",
        "RetryWithFeedback",
        "DEFAULT_MAX_RETRIES",
        "DEFAULT_TOOL_RETRIES",
        "AgentSession",
        "AgentSessionBuilder",
        "AgentAuthoritySnapshot",
        "AgentCancellation",
        "AgentTurn",
        "ApprovalPolicy",
        "DenyAll",
        "Approve",
        "Deny",
        "ToolCancellationPolicy",
        "TurnStarted",
        "ModelStarted",
        "AnswerDelta",
        "ReasoningDelta",
        "ModelProgress",
        "ModelCompleted",
        "ToolProposed",
        "ApprovalRequested",
        "ApprovalResolved",
        "ToolStarted",
        "ToolProgress",
        "ToolCompleted",
        "TurnCompleted",
        "TurnFailed",
        "AgentError",
        "ToolUnavailable",
        "CapabilityMissing",
        "CeilingExceeded",
        "RoundLimitExceeded",
        "DEFAULT_MAX_ROUNDS",
        "MAX_ARGUMENT_DEPTH",
        "REFUSED_CALLS_KEPT",
        "DEFAULT_MAX_TOKENS",
        "InvalidHistory",
        "ProtocolViolation",
        "TurnCancelled",
        "EventConsumerError",
    },
    "emelex.model": {
        "Message",
        "TextPart",
        "ImagePart",
        "AudioPart",
        "VideoPart",
        "ToolCall",
        "ToolDefinition",
        "Reasoning",
        "ToolChoice",
        "GenerationOptions",
        "GenerationRequest",
        "TextDelta",
        "ReasoningDelta",
        "Progress",
        "Completed",
        "Response",
        "Usage",
        "Capabilities",
        "AgentModel",
        "Client",
        "to_json",
        "from_json",
    },
    "emelex.model.llama": {
        "EXTRA_BUFFERS_ENV",
        "probe_and_cache",
        "TINY_CHAT_TEMPLATE",
        "BufferProbeFailed",
        "BufferVerdict",
        "ChatTemplateError",
        "ChatTemplateMissing",
        "ContextOverflow",
        "ExtraBuffers",
        "GenerationFailed",
        "GenerationReport",
        "GgufMetadata",
        "GrammarError",
        "LlamaModel",
        "LlamaStream",
        "ModelLoadError",
        "ModelNotOpen",
        "NativeCrash",
        "OutputParser",
        "ParsedOutput",
        "Performance",
        "ProbeReport",
        "ToolChoice",
        "ToolGrammar",
        "UnsupportedContent",
        "choose_extra_buffers",
        "probe_extra_buffers",
        "read_gguf_metadata",
        "schema_grammar",
        "tool_call_grammar",
        "write_tiny_gguf",
    },
    "emelex.testing": {
        "ScriptedModel",
        "Say",
        "Think",
        "Call",
        "Wait",
        "Fail",
        "Progress",
        "Finish",
        "ScriptedTool",
        "ApproveAll",
        "ScriptedApprovals",
        "ContractOptionsError",
        "ContractReport",
        "RunRecord",
        "ToolAlwaysFails",
        "ToolContractError",
        "ToolContractViolation",
        "check_tool_contract",
        "check_tool_contract_async",
    },
    "emelex.aio": {
        "AsyncioLoopMissing",
        "AsyncioTaskCancelled",
        "asyncio_tool",
        "current_asyncio_loop",
        "from_asyncio",
        "open_asyncio_loop",
        "runs_on_asyncio",
    },
    "emelex.contracts": {
        "WIRE_STRINGS",
        "field_bounds",
        "is_union",
        "AgentConfig",
        "AgentList",
        "AgentName",
        "AgentWorker",
        "ApproveResponse",
        "AttachmentMeta",
        "Branch",
        "CauseCode",
        "ContextReport",
        "ContextRequest",
        "ContractError",
        "ContractLimitExceeded",
        "CreateSessionReceipt",
        "CreateSessionRequest",
        "DenyResponse",
        "Diagnostic",
        "DiagnosticCause",
        "DiagnosticId",
        "DiagnosticKind",
        "DiagnosticsPage",
        "DiagnosticsRequest",
        "DiagnosticsRevision",
        "Digest",
        "EventAddress",
        "ExecuteReceipt",
        "ExecuteRequest",
        "ExecuteResult",
        "ExecuteStatus",
        "ForkReceipt",
        "ForkReceiptRequest",
        "ForkRequest",
        "ForkWorker",
        "HarnessPreset",
        "Hello",
        "HistoryPage",
        "HistoryPageRequest",
        "HistoryReadRequest",
        "HistoryReadResult",
        "HistoryRow",
        "HistoryTarget",
        "Interaction",
        "InteractionId",
        "InteractionRequest",
        "InteractionResponse",
        "InteractionState",
        "InteractionsChanged",
        "InvocationId",
        "MAX_ATTACHMENTS",
        "MAX_ATTACHMENT_BYTES",
        "MAX_FIELD_CHARS",
        "MAX_ID_CHARS",
        "MAX_MESSAGE_CHARS",
        "MAX_NAME_CHARS",
        "MAX_PAGE_SIZE",
        "MAX_QUERY_CHARS",
        "MAX_QUEUE_ENTRIES",
        "MAX_SAFE_INTEGER",
        "MAX_SEARCH_HITS",
        "MAX_TEXT_CHARS",
        "MAX_TOOLS",
        "MAX_WORKERS",
        "ModelConfig",
        "OperationKind",
        "OperationReceipt",
        "OperationRef",
        "PendingInteractions",
        "PendingInteractionsRequest",
        "Position",
        "PreparedRequest",
        "Problem",
        "ProblemCode",
        "QueueChanged",
        "QueueEntry",
        "QueueSnapshot",
        "QueueState",
        "RequestState",
        "Resolution",
        "ResolutionOutcome",
        "ResolvedBy",
        "RespondReceipt",
        "RespondRequest",
        "Role",
        "RoleGroup",
        "RowAddress",
        "RowField",
        "RowsPublished",
        "SearchField",
        "SearchHit",
        "SearchPage",
        "SearchRequest",
        "SendReceipt",
        "SendRequest",
        "SessionId",
        "SessionInfo",
        "SessionState",
        "StartWorkerRequest",
        "StopOutcome",
        "StopReceipt",
        "StopRequest",
        "ToolCallInfo",
        "ToolSchema",
        "TurnId",
        "UNICODE_VERSION",
        "WIRE_CLASSES",
        "WIRE_UNIONS",
        "WIRE_VERSION",
        "WatchDiagnosticsRequest",
        "WatchEndReason",
        "WatchEnded",
        "WatchRequest",
        "WatchUpdate",
        "WorkHubRequest",
        "WorkHubSnapshot",
        "WorkKind",
        "WorkerOrigin",
        "WorkerReceipt",
        "WorkerState",
        "WorkerStatus",
        "WorkspaceConfig",
        "WorkspacePolicyName",
        "attachment_spans",
        "find_matches",
        "from_wire",
        "is_word_char",
        "json_schema",
        "schema_for",
        "simple_casefold",
        "to_wire",
        "trusted",
    },
    "emelex.testing.contract_strategies": {"wire_values"},
    "emelex.service.search": {
        "MAX_FIELD_CHARS",
        "MAX_QUERY_CHARS",
        "UNICODE_VERSION",
        "find_matches",
        "is_word_char",
        "simple_casefold",
    },
}


@pytest.mark.parametrize("module_name", sorted(EXPECTED))
def test_public_names_exist(module_name: str) -> None:
    module = importlib.import_module(module_name)
    exported = set(module.__all__)
    missing = EXPECTED[module_name] - exported
    assert not missing, f"{module_name} lost public names: {sorted(missing)}"
    for name in exported:
        assert hasattr(module, name), f"{module_name}.__all__ lists missing {name}"


@pytest.mark.parametrize("module_name", sorted(EXPECTED))
def test_public_names_report_a_public_module(module_name: str) -> None:
    """As in trio: ``emelex.agent.AgentSession.__module__ == "emelex.agent"``, never the
    private module that defines it (methods included)."""
    import inspect

    module = importlib.import_module(module_name)
    for name in module.__all__:
        value = getattr(module, name)
        if not (inspect.isclass(value) or inspect.isfunction(value)):
            continue
        owner = value.__module__
        if not owner.startswith("emelex"):
            continue
        assert not any(part.startswith("_") for part in owner.split(".")), (
            f"{module_name}.{name}.__module__ is {owner!r}"
        )
        if inspect.isclass(value):
            for member_name, member in vars(value).items():
                if inspect.isfunction(member) and member.__module__.startswith(owner + "."):
                    raise AssertionError(
                        f"{name}.{member_name}.__module__ is {member.__module__!r}"
                    )


def test_module_fixup_examples() -> None:
    from emelex import agent, app, tools
    from emelex.tools import mcp

    assert agent.AgentSession.__module__ == "emelex.agent"
    assert agent.AgentSession.run.__module__ == "emelex.agent"
    assert tools.FunctionTool.__module__ == "emelex.tools"
    # A re-export keeps its owner's name; a sub-facade claims its own classes.
    assert app.FunctionTool.__module__ == "emelex.tools"
    assert tools.McpServer.__module__ == mcp.McpServer.__module__ == "emelex.tools.mcp"
    assert repr(agent.AgentSession).startswith("<class 'emelex.agent.AgentSession'")


#: Classes only the library creates: ``@final`` and calling them raises TypeError
#: (sessions come from builders and engines, streams from sessions).
NO_PUBLIC_CONSTRUCTOR = {
    "emelex.agent": {"AgentSession"},
    "emelex.app": {"EventStream", "Session", "TextStream"},
}


@pytest.mark.parametrize(
    ("module_name", "name"),
    sorted((module, name) for module, names in NO_PUBLIC_CONSTRUCTOR.items() for name in names),
)
def test_final_with_no_public_constructor(module_name: str, name: str) -> None:
    cls = getattr(importlib.import_module(module_name), name)
    assert getattr(cls, "__final__", False), f"{name} is not @final"
    with pytest.raises(TypeError, match="no public constructor"):
        cls()
    with pytest.raises(TypeError):

        class Sub(cls):  # type: ignore[misc, valid-type]
            pass


def test_top_level_facade_is_exact() -> None:
    assert set(emelex.__all__) == EXPECTED["emelex"]


def test_error_tree_is_rooted() -> None:
    from emelex import agent, app, contracts, model, runtime, store, tools
    from emelex.tools import mcp, workspace

    for tools_error in (tools.ToolError, mcp.McpError, workspace.WorkspaceError):
        assert issubclass(tools_error, tools.ToolsError)

    for error in (
        agent.AgentError,
        app.AppError,
        model.ModelError,
        runtime.ActorError,
        workspace.WorkspaceError,
        mcp.McpError,
        tools.ToolsError,
        emelex.LimitExceeded,
        emelex.SerializationError,
        contracts.ContractError,
        contracts.ContractLimitExceeded,
        store.StoreError,
        store.StoreCorrupt,
    ):
        assert issubclass(error, emelex.EmelexError)


def _exception_names() -> set[str]:
    """Names of every exception class emelex defines, plus the builtin ones."""
    import builtins
    import inspect
    import pkgutil

    names = {
        n for n, v in vars(builtins).items() if isinstance(v, type) and issubclass(v, BaseException)
    }
    for info in pkgutil.walk_packages(emelex.__path__, "emelex."):
        if info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        for name, value in vars(module).items():
            if inspect.isclass(value) and issubclass(value, BaseException):
                names.add(name)
                if value.__module__.startswith("emelex") and not name.startswith("_"):
                    assert issubclass(value, emelex.EmelexError), f"{name} is not rooted"
    return names


def test_errors_live_in_errors_modules() -> None:
    """Every public exception class is defined in its layer's ``_errors.py`` (read from the
    source, since facades rewrite ``__module__``); private control-flow signals are exempt."""
    import ast
    import pathlib

    exceptions = _exception_names()
    root = pathlib.Path(emelex.__file__).parent
    misplaced: list[str] = []
    for path in sorted(root.rglob("*.py")):
        if path.name == "_errors.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ClassDef) or node.name.startswith("_"):
                continue
            bases = {
                b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases
            }
            if bases & exceptions:
                misplaced.append(f"{path.relative_to(root)}: {node.name}")
    assert not misplaced, f"error classes outside an _errors.py: {misplaced}"


def test_importing_emelex_loads_no_engine_module() -> None:
    # The facade is lazy so `import emelex.contracts` stays free of the engine and Trio.
    import subprocess
    import sys

    probe = (
        "import sys, emelex; "
        "print(sorted(m for m in sys.modules if m.startswith(('emelex.', 'trio'))))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "['emelex._errors', 'emelex._version']"


def test_version_is_the_package_version() -> None:
    from importlib.metadata import version

    assert emelex.__version__ == version("emelex")
