"""emelex: a Trio-native, provider-independent LLM agent harness.

The top level re-exports the names most programs need; the subpackages hold the rest:
:mod:`emelex.model` (messages, requests, events, clients), :mod:`emelex.agent` (sessions,
turns, approvals), :mod:`emelex.tools` (the tool protocol and built-in tools),
:mod:`emelex.runtime` (actors and the supervisor), :mod:`emelex.app` (declarative agents,
the engine and harness presets) and :mod:`emelex.testing`.
"""

import logging as _logging

from emelex._errors import EmelexError, LimitExceeded, SerializationError
from emelex._version import __version__
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
    Session,
    SessionContext,
    ToolCallContext,
    ToolError,
    WorkspacePolicy,
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
    "Message",
    "ModelError",
    "Reasoning",
    "Response",
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
    "Usage",
    "VideoPart",
    "WorkspacePolicy",
    "open_supervisor",
    "tool",
    "__version__",
]

# A library stays silent unless the application configures logging (llama.cpp's own log
# is routed into "emelex.model.llama"): without this, Python's last-resort handler would
# print its warnings on stderr.
_logging.getLogger("emelex").addHandler(_logging.NullHandler())
