"""Pins the public facades, trio style: the exact names each facade exports, that they
report the facade as their module, which classes are final with no public constructor,
and where errors live. Adding, removing or renaming a public name must be deliberate."""

from __future__ import annotations

import importlib

import pytest

import emelex

EXPECTED: dict[str, set[str]] = {
    "emelex": {
        "Agent",
        "AgentCancellation",
        "AgentError",
        "AgentEvent",
        "AgentModel",
        "AgentSession",
        "AgentSessionBuilder",
        "AgentTool",
        "AgentTurn",
        "AppError",
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
        "Engine",
        "FunctionTool",
        "GenerationOptions",
        "GenerationRequest",
        "Harness",
        "ImagePart",
        "LimitExceeded",
        "LoopAlreadyRunning",
        "McpServer",
        "Message",
        "ModelError",
        "OutputValidationError",
        "Reasoning",
        "Response",
        "RetryBudgetExhausted",
        "RetryWithFeedback",
        "RoundLimitExceeded",
        "SerializationError",
        "Session",
        "SessionContext",
        "Supervisor",
        "TextPart",
        "ToolCall",
        "ToolCallContext",
        "ToolCancellationPolicy",
        "ToolChoice",
        "ToolDefinition",
        "ToolError",
        "ToolInvocation",
        "ToolOutput",
        "TypedTurn",
        "Usage",
        "VideoPart",
        "WorkspacePolicy",
        "__version__",
        "open_supervisor",
        "run_sync",
        "tool",
    },
    "emelex.agent": {
        "AUTHORITY_VERSION",
        "AgentAuthoritySnapshot",
        "AgentCancellation",
        "AgentError",
        "AgentEvent",
        "AgentSession",
        "AgentSessionBuilder",
        "AgentTool",
        "AgentTurn",
        "AnswerDelta",
        "ApprovalContext",
        "ApprovalDecision",
        "ApprovalFailed",
        "ApprovalPolicy",
        "ApprovalRequested",
        "ApprovalResolved",
        "Approve",
        "BuiltinSettings",
        "CapabilityMissing",
        "CeilingExceeded",
        "ConfigurationConflict",
        "DEFAULT_MAX_RETRIES",
        "DEFAULT_MAX_ROUNDS",
        "DEFAULT_MAX_TOKENS",
        "DEFAULT_TOOL_RETRIES",
        "Deny",
        "DenyAll",
        "EventConsumer",
        "EventConsumerError",
        "InvalidHistory",
        "InvalidToolDeclaration",
        "InvalidTurnOptions",
        "InvalidWorkspace",
        "MAX_ARGUMENT_DEPTH",
        "MAX_SHELL_TIMEOUT_SECONDS",
        "ModelCompleted",
        "ModelFailed",
        "ModelProgress",
        "ModelStarted",
        "OutputValidationError",
        "ProtocolViolation",
        "REFUSED_CALLS_KEPT",
        "ReasoningDelta",
        "ResourceCeilings",
        "RetryBudgetExhausted",
        "RetryWithFeedback",
        "RoundLimitExceeded",
        "SessionClosed",
        "ToolAuthority",
        "ToolCancellationPolicy",
        "ToolCompleted",
        "ToolInvocation",
        "ToolOutput",
        "ToolProgress",
        "ToolProposed",
        "ToolStarted",
        "ToolUnavailable",
        "TurnCancelled",
        "TurnCompleted",
        "TurnCore",
        "TurnFailed",
        "TurnInProgress",
        "TurnPhase",
        "TurnResolution",
        "TurnStarted",
        "UnsupportedContent",
        "WebSearchProvider",
        "WebSearchResult",
        "WorkspaceIdentity",
        "fit_rounds",
        "validate_history",
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
    "emelex.app": {
        "Agent",
        "AgentBuilder",
        "AppError",
        "ApproverRequired",
        "ArgumentConversionError",
        "BUILTIN_OPTIONS",
        "BUILTIN_TOOLS",
        "BlankInstructions",
        "BudgetExceeded",
        "BudgetUsage",
        "BuiltinCapability",
        "Capability",
        "CapabilityPackage",
        "CapabilityRef",
        "CapabilityResolver",
        "Change",
        "ContextBudget",
        "ContextBudgetExceeded",
        "Contribution",
        "DEFAULT_CONTEXT_TOKENS",
        "DEFAULT_EVENT_BUFFER",
        "DEFAULT_OUTPUT_RETRIES",
        "DuplicateCapability",
        "DuplicateMcpServer",
        "DuplicateProvider",
        "DuplicateSkill",
        "DuplicateTool",
        "Engine",
        "EventStream",
        "EventsLagged",
        "FunctionTool",
        "Harness",
        "Integration",
        "IntegrationMissing",
        "IntegrationRequest",
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
        "InvalidToolFunction",
        "InvalidToolSchema",
        "InvalidWorkspaceRoot",
        "LoadedPackage",
        "LoadedPlugin",
        "LoopAlreadyRunning",
        "MAX_FILES",
        "MAX_FILE_BYTES",
        "MAX_PACKAGE_BYTES",
        "MAX_SKILL_BYTES",
        "MAX_SKILL_DEPTH",
        "MAX_SKILL_FILES",
        "MAX_SKILL_FILE_BYTES",
        "MAX_TASKS",
        "MAX_TASK_BYTES",
        "MEDIA_PART_TOKENS",
        "MESSAGE_OVERHEAD_TOKENS",
        "McpIntegration",
        "McpServer",
        "MissingBinding",
        "MissingModel",
        "NameCollision",
        "PackageError",
        "PackageInfo",
        "PackageProblem",
        "PluginError",
        "PluginIntegration",
        "PluginRegistry",
        "PluginWarning",
        "SeedFile",
        "Session",
        "SessionContext",
        "SessionNotStarted",
        "SessionStarter",
        "ShellNotAllowed",
        "Skill",
        "SkillFile",
        "SkillTooLarge",
        "StreamNotOpen",
        "TASK_STATUSES",
        "Task",
        "TaskList",
        "TaskStatus",
        "TextStream",
        "ToolCallContext",
        "ToolError",
        "TypedTurn",
        "UnboundModel",
        "UnboundModelError",
        "UnresolvedCapability",
        "UnsupportedAnnotation",
        "UsageBudget",
        "UsageBudgetExhausted",
        "WorkspaceConflict",
        "WorkspacePolicy",
        "diff_packages",
        "export_agent",
        "find_packages",
        "fit_messages",
        "fit_request",
        "load_agent",
        "load_package",
        "load_plugin",
        "manifest_text",
        "recursive_delete_reason",
        "run_sync",
        "tasks_from_history",
        "tool",
        "validate_package",
    },
    "emelex.contracts": {
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
        "WIRE_STRINGS",
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
        "field_bounds",
        "find_matches",
        "from_wire",
        "is_union",
        "is_word_char",
        "json_schema",
        "schema_for",
        "simple_casefold",
        "to_wire",
        "trusted",
    },
    "emelex.model": {
        "AgentModel",
        "AudioPart",
        "Capabilities",
        "Client",
        "Completed",
        "FinishReason",
        "GenerationEvent",
        "GenerationOptions",
        "GenerationRequest",
        "GenerationStream",
        "ImagePart",
        "InvalidMessage",
        "InvalidOptions",
        "InvalidRequest",
        "InvalidResponse",
        "Message",
        "ModelError",
        "Part",
        "Progress",
        "Reasoning",
        "ReasoningDelta",
        "ReasoningMode",
        "Response",
        "Role",
        "TextDelta",
        "TextPart",
        "ToolCall",
        "ToolChoice",
        "ToolChoiceMode",
        "ToolDefinition",
        "UNSET",
        "Unset",
        "Usage",
        "VideoPart",
        "WIRE_VERSION",
        "from_json",
        "structure",
        "to_json",
        "unstructure",
    },
    "emelex.model.llama": {
        "BufferProbeFailed",
        "BufferVerdict",
        "ChatTemplateError",
        "ChatTemplateMissing",
        "ContextOverflow",
        "EXTRA_BUFFERS_ENV",
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
        "TINY_CHAT_TEMPLATE",
        "ToolChoice",
        "ToolGrammar",
        "UnsupportedContent",
        "choose_extra_buffers",
        "probe_and_cache",
        "probe_extra_buffers",
        "read_gguf_metadata",
        "schema_grammar",
        "tool_call_grammar",
        "write_tiny_gguf",
    },
    "emelex.model.openai": {
        "ChunkAssembler",
        "ChunkTooLarge",
        "ConnectionFailed",
        "DEFAULT_CONNECT_TIMEOUT",
        "DEFAULT_MAX_LINE_BYTES",
        "DEFAULT_MAX_RESPONSE_BYTES",
        "DEFAULT_STALL_TIMEOUT",
        "Disconnected",
        "HTTPStatusError",
        "MalformedChunk",
        "MalformedToolCall",
        "OpenAIError",
        "OpenAIModel",
        "OpenAIStream",
        "RateLimited",
        "ReasoningFields",
        "ResponseTooLarge",
        "SSEEvent",
        "SSEParser",
        "StreamError",
        "StreamStalled",
        "TransportFailure",
        "UnsupportedContent",
        "audio_format",
        "reasoning_effort_fields",
        "request_body",
        "retry_after_seconds",
    },
    "emelex.model.templates": {
        "ChatFormat",
        "ChatTemplate",
        "ChatTemplateError",
        "ChatTemplateMissing",
        "RenderStyle",
        "RenderedPrompt",
        "ThinkMarkers",
        "ToolCallFamily",
        "UnsupportedContent",
        "message_dicts",
        "probe_chat_template",
        "short_call_id",
        "tool_dicts",
    },
    "emelex.runtime": {
        "Actor",
        "ActorCall",
        "ActorContext",
        "ActorDropped",
        "ActorError",
        "ActorHandle",
        "ActorInfo",
        "ActorKind",
        "ActorNursery",
        "ActorStartupError",
        "ActorState",
        "ActorTree",
        "AgentCancellation",
        "CURRENT",
        "CancellationPolicy",
        "DIAGNOSTICS_ENV",
        "DedicatedWorker",
        "DetachedWorkError",
        "MAX_MAILBOX_CAPACITY",
        "Mailbox",
        "MailboxClosed",
        "MailboxFull",
        "MailboxStatistics",
        "Supervisor",
        "WorkerBusy",
        "WorkerClosed",
        "WorkerJob",
        "WorkerJobAborted",
        "current_actor",
        "open_dedicated_worker",
        "open_supervisor",
        "open_unwrapping_nursery",
        "run_in_worker",
        "serve_diagnostics",
    },
    "emelex.service": {
        "Host",
        "HostClosed",
        "InteractionSettled",
        "OperationConflict",
        "QueueFull",
        "ServiceError",
        "UnknownAgent",
        "UnknownInteraction",
        "UnknownInvocation",
        "UnknownSession",
    },
    "emelex.service.search": {
        "MAX_FIELD_CHARS",
        "MAX_QUERY_CHARS",
        "UNICODE_VERSION",
        "find_matches",
        "is_word_char",
        "simple_casefold",
    },
    "emelex.store": {
        "AppendResult",
        "MAX_PAGE_ROWS",
        "NewEvent",
        "OperationConflict",
        "OperationRecord",
        "Position",
        "RowFields",
        "RowPage",
        "SCHEMA_VERSION",
        "SessionExists",
        "SessionNotFound",
        "SessionSummary",
        "SqliteStore",
        "StoreCorrupt",
        "StoreError",
        "StoredCall",
        "StoredEvent",
        "StoredRow",
        "StoredSession",
        "directory_looser_than_private",
        "make_private_directory",
        "open_sqlite_store",
        "turn_events",
    },
    "emelex.testing": {
        "ApproveAll",
        "Call",
        "ContractOptionsError",
        "ContractReport",
        "Fail",
        "Finish",
        "InvalidScript",
        "Progress",
        "RunRecord",
        "Say",
        "ScriptExhausted",
        "ScriptedApprovals",
        "ScriptedModel",
        "ScriptedTool",
        "Step",
        "Think",
        "ToolAlwaysFails",
        "ToolBehaviourError",
        "ToolContractError",
        "ToolContractViolation",
        "Wait",
        "check_tool_contract",
        "check_tool_contract_async",
    },
    "emelex.testing.contract_strategies": {
        "wire_values",
    },
    "emelex.testing.strategies": {
        "assistant_messages",
        "audio_parts",
        "capabilities",
        "completed_events",
        "finish_reasons",
        "generation_events",
        "generation_options",
        "generation_requests",
        "image_parts",
        "json_objects",
        "json_schemas",
        "json_values",
        "messages",
        "parts",
        "progress_events",
        "reasoning_deltas",
        "reasonings",
        "responses",
        "roles",
        "system_messages",
        "text_deltas",
        "text_parts",
        "tool_calls",
        "tool_definitions",
        "tool_messages",
        "usages",
        "user_messages",
        "video_parts",
    },
    "emelex.tools": {
        "AgentTool",
        "ArgumentConversionError",
        "ArgumentValidator",
        "BuiltinSettings",
        "FunctionTool",
        "InvalidToolFunction",
        "MAX_PROGRESS_CHARS",
        "McpConnection",
        "McpError",
        "McpServer",
        "McpTool",
        "RetryWithFeedback",
        "TOOL_NAME",
        "ToolCallContext",
        "ToolCancellationPolicy",
        "ToolError",
        "ToolInvocation",
        "ToolOutput",
        "ToolsError",
        "UnsupportedAnnotation",
        "conversion_error",
        "converter",
        "open_mcp_connection",
        "register_typeddict",
        "schema_for",
        "start_mcp_connection",
        "tool",
        "tool_name_problem",
        "tool_schema_problem",
    },
    "emelex.tools.builtin": {
        "BUILTIN_TOOL_NAMES",
        "DateTimeTool",
        "EditFileTool",
        "FindFilesTool",
        "GREP_BYTES",
        "GrepTool",
        "InvalidSearchResult",
        "ListDirectoryTool",
        "READ_BYTES",
        "ReadFileTool",
        "ShellTool",
        "WebFetchTool",
        "WebSearchProvider",
        "WebSearchResult",
        "WebSearchTool",
        "WriteFileTool",
        "address_refusal",
        "builtin_tools",
    },
    "emelex.tools.mcp": {
        "ACTOR_KIND",
        "DEFAULT_CALL_TIMEOUT",
        "DEFAULT_CONNECT_TIMEOUT",
        "DEFAULT_LIVENESS_TIMEOUT",
        "DEFAULT_MAX_RESULT_BYTES",
        "DEFAULT_MAX_TOOLS",
        "DEFAULT_SHUTDOWN_TIMEOUT",
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
        "Transport",
        "open_mcp_connection",
        "start_mcp_connection",
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
}


def test_every_facade_is_pinned() -> None:
    import pkgutil

    facades = {
        info.name
        for info in pkgutil.walk_packages(emelex.__path__, "emelex.")
        if info.ispkg
        and not any(part.startswith("_") for part in info.name.split("."))
        and hasattr(importlib.import_module(info.name), "__all__")
    }
    assert facades <= set(EXPECTED), f"facades not pinned: {sorted(facades - set(EXPECTED))}"


@pytest.mark.parametrize("module_name", sorted(EXPECTED))
def test_public_names_exist(module_name: str) -> None:
    module = importlib.import_module(module_name)
    exported = set(module.__all__)
    assert len(exported) == len(module.__all__), f"{module_name}.__all__ repeats a name"
    missing = EXPECTED[module_name] - exported
    assert not missing, f"{module_name} lost public names: {sorted(missing)}"
    added = exported - EXPECTED[module_name]
    assert not added, f"{module_name} exports names not pinned here: {sorted(added)}"
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
