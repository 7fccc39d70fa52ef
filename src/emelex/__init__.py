"""emelex: a Trio-native, provider-independent LLM agent harness.

The top level re-exports the names most programs need; the subpackages hold the rest:
:mod:`emelex.model` (messages, requests, events, clients), :mod:`emelex.agent` (sessions,
turns, approvals), :mod:`emelex.tools` (the tool protocol and built-in tools),
:mod:`emelex.runtime` (actors and the supervisor), :mod:`emelex.app` (declarative agents,
the engine and harness presets) and :mod:`emelex.testing`.
"""

import importlib as _importlib
import logging as _logging
from typing import TYPE_CHECKING

from emelex._errors import EmelexError, LimitExceeded, SerializationError
from emelex._version import __version__

# The root errors are defined here in effect (emelex._facade would load attrs eagerly).
for _error in (EmelexError, LimitExceeded, SerializationError):
    _error.__module__ = __name__
    for _member in vars(_error).values():
        if hasattr(_member, "__code__"):
            _member.__module__ = __name__
del _error, _member

if TYPE_CHECKING:
    from emelex.agent import (
        AgentCancellation,
        AgentError,
        AgentEvent,
        AgentSession,
        AgentSessionBuilder,
        AgentTool,
        AgentTurn,
        ApprovalContext,
        ApprovalDecision,
        ApprovalPolicy,
        Approve,
        Deny,
        DenyAll,
        OutputValidationError,
        RetryBudgetExhausted,
        RoundLimitExceeded,
        ToolCancellationPolicy,
        ToolInvocation,
        ToolOutput,
    )
    from emelex.app import (
        Agent,
        AppError,
        Engine,
        FunctionTool,
        Harness,
        LoopAlreadyRunning,
        McpServer,
        Session,
        SessionContext,
        ToolCallContext,
        ToolError,
        TypedTurn,
        WorkspacePolicy,
        run_sync,
        tool,
    )
    from emelex.model import (
        AgentModel,
        AudioPart,
        Capabilities,
        Client,
        GenerationOptions,
        GenerationRequest,
        ImagePart,
        Message,
        ModelError,
        Reasoning,
        Response,
        TextPart,
        ToolCall,
        ToolChoice,
        ToolDefinition,
        Usage,
        VideoPart,
    )
    from emelex.runtime import DetachedWorkError, Supervisor, open_supervisor
    from emelex.tools import RetryWithFeedback

# The facade is lazy (PEP 562): `import emelex.contracts` must not load the engine or Trio,
# and importing any subpackage runs this module first. Each name is imported on first use.
_LAZY: dict[str, str] = {
    "AgentCancellation": "emelex.agent",
    "AgentError": "emelex.agent",
    "AgentEvent": "emelex.agent",
    "AgentSession": "emelex.agent",
    "AgentSessionBuilder": "emelex.agent",
    "AgentTool": "emelex.agent",
    "AgentTurn": "emelex.agent",
    "ApprovalContext": "emelex.agent",
    "ApprovalDecision": "emelex.agent",
    "ApprovalPolicy": "emelex.agent",
    "Approve": "emelex.agent",
    "Deny": "emelex.agent",
    "DenyAll": "emelex.agent",
    "OutputValidationError": "emelex.agent",
    "RetryBudgetExhausted": "emelex.agent",
    "RoundLimitExceeded": "emelex.agent",
    "ToolCancellationPolicy": "emelex.agent",
    "ToolInvocation": "emelex.agent",
    "ToolOutput": "emelex.agent",
    "Agent": "emelex.app",
    "AppError": "emelex.app",
    "Engine": "emelex.app",
    "FunctionTool": "emelex.app",
    "Harness": "emelex.app",
    "LoopAlreadyRunning": "emelex.app",
    "McpServer": "emelex.app",
    "Session": "emelex.app",
    "SessionContext": "emelex.app",
    "ToolCallContext": "emelex.app",
    "ToolError": "emelex.app",
    "TypedTurn": "emelex.app",
    "WorkspacePolicy": "emelex.app",
    "run_sync": "emelex.app",
    "tool": "emelex.app",
    "AgentModel": "emelex.model",
    "AudioPart": "emelex.model",
    "Capabilities": "emelex.model",
    "Client": "emelex.model",
    "GenerationOptions": "emelex.model",
    "GenerationRequest": "emelex.model",
    "ImagePart": "emelex.model",
    "Message": "emelex.model",
    "ModelError": "emelex.model",
    "Reasoning": "emelex.model",
    "Response": "emelex.model",
    "TextPart": "emelex.model",
    "ToolCall": "emelex.model",
    "ToolChoice": "emelex.model",
    "ToolDefinition": "emelex.model",
    "Usage": "emelex.model",
    "VideoPart": "emelex.model",
    "DetachedWorkError": "emelex.runtime",
    "Supervisor": "emelex.runtime",
    "open_supervisor": "emelex.runtime",
    "RetryWithFeedback": "emelex.tools",
}
_SUBPACKAGES = frozenset(
    {"agent", "app", "cli", "contracts", "model", "runtime", "service", "store", "testing", "tools"}
)


def __getattr__(name: str) -> object:
    if name in _SUBPACKAGES:
        return _importlib.import_module(f"emelex.{name}")
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'emelex' has no attribute {name!r}")
    value = getattr(_importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


__all__ = [
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
    "ToolChoice",
    "ToolCall",
    "ToolCallContext",
    "ToolCancellationPolicy",
    "ToolDefinition",
    "ToolError",
    "ToolInvocation",
    "ToolOutput",
    "TypedTurn",
    "Usage",
    "VideoPart",
    "WorkspacePolicy",
    "open_supervisor",
    "run_sync",
    "tool",
    "__version__",
]

# A library stays silent unless the application configures logging (llama.cpp's own log
# is routed into "emelex.model.llama"): without this, Python's last-resort handler would
# print its warnings on stderr.
_logging.getLogger("emelex").addHandler(_logging.NullHandler())
