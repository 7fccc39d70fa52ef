"""The model layer: conversation values, generation requests and events, and clients.

Everything here is provider-independent: a :class:`Client` wraps any
:class:`AgentModel`, and every value has a stable JSON form (:func:`to_json`,
:func:`from_json`).
"""

from emelex._facade import fix_module_names
from emelex.model._capabilities import Capabilities
from emelex.model._client import Client
from emelex.model._errors import (
    InvalidMessage,
    InvalidOptions,
    InvalidRequest,
    InvalidResponse,
    ModelError,
    ToolCallMissing,
)
from emelex.model._estimate import TokenCounter, count_usage, estimate_tokens, estimate_usage
from emelex.model._events import (
    Completed,
    FinishReason,
    GenerationEvent,
    Progress,
    ReasoningDelta,
    Response,
    TextDelta,
    Usage,
)
from emelex.model._messages import (
    AudioPart,
    ImagePart,
    Message,
    Part,
    Role,
    TextPart,
    ToolCall,
    VideoPart,
)
from emelex.model._options import (
    UNSET,
    GenerationOptions,
    Reasoning,
    ReasoningMode,
    ToolChoice,
    ToolChoiceMode,
    Unset,
)
from emelex.model._protocol import AgentModel, GenerationStream
from emelex.model._request import GenerationRequest, ToolDefinition
from emelex.model._wire import WIRE_VERSION, from_json, structure, to_json, unstructure

__all__ = [
    # messages
    "Role",
    "Message",
    "Part",
    "TextPart",
    "ImagePart",
    "AudioPart",
    "VideoPart",
    "ToolCall",
    "ToolDefinition",
    # options and requests
    "UNSET",
    "Unset",
    "Reasoning",
    "ReasoningMode",
    "ToolChoice",
    "ToolChoiceMode",
    "GenerationOptions",
    "GenerationRequest",
    # events and responses
    "GenerationEvent",
    "TextDelta",
    "ReasoningDelta",
    "Progress",
    "Completed",
    "Response",
    "Usage",
    "FinishReason",
    # usage estimates
    "TokenCounter",
    "count_usage",
    "estimate_tokens",
    "estimate_usage",
    # models
    "Capabilities",
    "AgentModel",
    "GenerationStream",
    "Client",
    # wire format
    "WIRE_VERSION",
    "to_json",
    "from_json",
    "unstructure",
    "structure",
    # errors
    "ModelError",
    "InvalidMessage",
    "InvalidOptions",
    "InvalidRequest",
    "InvalidResponse",
    "ToolCallMissing",
]

fix_module_names(__name__, globals())
