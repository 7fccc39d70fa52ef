"""The native llama.cpp backend (extra ``local``).

:class:`LlamaModel` runs a GGUF model in-process: one dedicated worker thread owns the
loaded model, generations queue to it, and tokens reach Trio in batches. The chat
template (embedded or supplied) is probed for :class:`~emelex.model.Capabilities`;
reasoning and tool calls are parsed from the output, and tool calls can be constrained
by a grammar built from the tools' JSON Schemas. ``Client.llama(path, ...)`` wraps one
in a :class:`~emelex.Client`.

:func:`write_tiny_gguf` writes a tiny random-weight model for tests and examples.

CPU buffer types: ``LlamaModel(extra_buffers="auto"|"on"|"off")``. In ``"auto"`` mode
:func:`choose_extra_buffers` decides from ``EMELEX_LLAMA_EXTRA_BUFFERS``, a cached verdict
or :func:`probe_extra_buffers`, which tries llama.cpp's extra buffer types in a child
process (a crash there becomes :class:`NativeCrash`, never a dead program).
"""

from emelex._facade import fix_module_names
from emelex.model._options import ToolChoice
from emelex.model.llama._buffers import (
    EXTRA_BUFFERS_ENV,
    BufferVerdict,
    ExtraBuffers,
    ProbeReport,
    choose_extra_buffers,
    probe_and_cache,
    probe_extra_buffers,
)
from emelex.model.llama._errors import (
    BufferProbeFailed,
    ContextOverflow,
    GenerationFailed,
    GrammarError,
    ModelLoadError,
    ModelNotOpen,
    NativeCrash,
)
from emelex.model.llama._grammar import ToolGrammar, schema_grammar, tool_call_grammar
from emelex.model.llama._metadata import GgufMetadata, read_gguf_metadata
from emelex.model.llama._model import LlamaModel, LlamaStream
from emelex.model.llama._native import GenerationReport, Performance
from emelex.model.llama._output import OutputParser, ParsedOutput
from emelex.model.llama._tiny import TINY_CHAT_TEMPLATE, write_tiny_gguf
from emelex.model.templates import ChatTemplateError, ChatTemplateMissing, UnsupportedContent

__all__ = [
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
]

fix_module_names(__name__, globals())
