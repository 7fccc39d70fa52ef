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
        "RoundLimitExceeded",
        "SerializationError",
        "Supervisor",
        "TextPart",
        "ToolCall",
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
        "McpTimeout",
        "McpTool",
        "McpToolNotFound",
        "McpUnavailable",
        "StdioTransport",
        "open_mcp_connection",
        "start_mcp_connection",
    },
    "emelex.tools": {"AgentTool", "FunctionTool", "ToolCallContext", "ToolError", "tool"},
    "emelex.runtime": {
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


def test_top_level_facade_is_exact() -> None:
    assert set(emelex.__all__) == EXPECTED["emelex"]


def test_error_tree_is_rooted() -> None:
    from emelex import agent, app, model, runtime
    from emelex.tools import mcp, workspace

    for error in (
        agent.AgentError,
        app.AppError,
        model.ModelError,
        runtime.ActorError,
        workspace.WorkspaceError,
        mcp.McpError,
        emelex.LimitExceeded,
        emelex.SerializationError,
    ):
        assert issubclass(error, emelex.EmelexError)


def test_version_is_the_package_version() -> None:
    from importlib.metadata import version

    assert emelex.__version__ == version("emelex")
