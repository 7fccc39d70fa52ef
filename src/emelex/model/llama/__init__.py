"""The native llama.cpp backend (extra ``local``).

:class:`LlamaModel` runs a GGUF model in-process: one dedicated worker thread owns the
loaded model, generations queue to it, and tokens reach Trio in batches. The chat
template (embedded or supplied) is probed for :class:`~emelex.model.Capabilities`;
reasoning and tool calls are parsed from the output, and tool calls can be constrained
by a grammar built from the tools' JSON Schemas. ``Client.llama(path, ...)`` wraps one
in a :class:`~emelex.Client`.

:func:`write_tiny_gguf` writes a tiny random-weight model for tests and examples.
"""

from emelex.model._options import ToolChoice
from emelex.model.llama._errors import (
    ContextOverflow,
    GenerationFailed,
    GrammarError,
    ModelLoadError,
    ModelNotOpen,
)
from emelex.model.llama._grammar import ToolGrammar, schema_grammar, tool_call_grammar
from emelex.model.llama._metadata import GgufMetadata, read_gguf_metadata
from emelex.model.llama._model import LlamaModel, LlamaStream
from emelex.model.llama._native import GenerationReport, Performance
from emelex.model.llama._output import OutputParser, ParsedOutput
from emelex.model.llama._tiny import TINY_CHAT_TEMPLATE, write_tiny_gguf
from emelex.model.templates import ChatTemplateError, ChatTemplateMissing, UnsupportedContent

__all__ = [
    "TINY_CHAT_TEMPLATE",
    "ChatTemplateError",
    "ChatTemplateMissing",
    "ContextOverflow",
    "GenerationFailed",
    "GenerationReport",
    "GgufMetadata",
    "GrammarError",
    "LlamaModel",
    "LlamaStream",
    "ModelLoadError",
    "ModelNotOpen",
    "OutputParser",
    "ParsedOutput",
    "Performance",
    "ToolChoice",
    "ToolGrammar",
    "UnsupportedContent",
    "read_gguf_metadata",
    "schema_grammar",
    "tool_call_grammar",
    "write_tiny_gguf",
]
