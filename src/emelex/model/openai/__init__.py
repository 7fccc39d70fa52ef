"""The OpenAI-compatible HTTP backend (chat completions over httpx, Trio-native).

:class:`OpenAIModel` talks to any server with an OpenAI-style ``/chat/completions``
endpoint (OpenAI, llama.cpp's and llama-cpp-python's servers, vLLM, ...): it streams
with Server-Sent Events, assembles tool-call deltas, reads ``reasoning_content``, asks
for usage, bounds every read, and maps every failure to a typed :class:`OpenAIError`.
``Client.openai(base_url=..., model=...)`` wraps one in a :class:`~emelex.Client`.

Decisions worth knowing:

* a remote model's :class:`~emelex.model.Capabilities` come from configuration and are
  unknown by default, so the agent harness defers to the server;
* tool-call arguments that are not a JSON object raise :class:`MalformedToolCall`
  (nothing is guessed or wrapped; a harness treats the round as failed);
* the ``Reasoning`` option maps to ``reasoning_effort`` (see
  :func:`reasoning_effort_fields`); ``extra_body`` and ``reasoning_fields`` adapt other
  servers' switches;
* video parts, and media outside user messages, raise :class:`UnsupportedContent`.
"""

from emelex._facade import fix_module_names
from emelex.model.openai._assembly import ChunkAssembler
from emelex.model.openai._errors import (
    ChunkTooLarge,
    ConnectionFailed,
    Disconnected,
    HTTPStatusError,
    MalformedChunk,
    MalformedToolCall,
    OpenAIError,
    RateLimited,
    ResponseTooLarge,
    StreamError,
    StreamStalled,
    TransportFailure,
    UnsupportedContent,
)
from emelex.model.openai._http import retry_after_seconds
from emelex.model.openai._mapping import (
    ReasoningFields,
    audio_format,
    reasoning_effort_fields,
    request_body,
)
from emelex.model.openai._model import (
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_MAX_LINE_BYTES,
    DEFAULT_MAX_RESPONSE_BYTES,
    DEFAULT_STALL_TIMEOUT,
    OpenAIModel,
    OpenAIStream,
)
from emelex.model.openai._sse import SSEEvent, SSEParser
from emelex.model.openai._tokens import LLAMA_CPP_PYTHON_COUNT_PATH, ServerTokenCounter

__all__ = [
    "DEFAULT_CONNECT_TIMEOUT",
    "DEFAULT_MAX_LINE_BYTES",
    "DEFAULT_MAX_RESPONSE_BYTES",
    "DEFAULT_STALL_TIMEOUT",
    "LLAMA_CPP_PYTHON_COUNT_PATH",
    "ChunkAssembler",
    "ChunkTooLarge",
    "ConnectionFailed",
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
    "ServerTokenCounter",
    "StreamError",
    "StreamStalled",
    "TransportFailure",
    "UnsupportedContent",
    "audio_format",
    "reasoning_effort_fields",
    "request_body",
    "retry_after_seconds",
]

fix_module_names(__name__, globals())
