"""A tiny random-weight GGUF model for tests and examples.

The file it writes is a complete llama.cpp model (llama architecture, two layers, 64-wide
embeddings) with a byte-level SentencePiece-style vocabulary and an embedded ChatML chat
template that declares tools (Hermes ``<tool_call>`` markup) and has an
``enable_thinking`` toggle. Its output is gibberish, but it is deterministic for a given
seed, which is what pipeline tests need: streaming, cancellation, grammars and worker
lifecycle all run for real, in milliseconds.
"""

from __future__ import annotations

from os import PathLike
from pathlib import Path
from typing import Any, Final

TINY_CHAT_TEMPLATE: Final = """\
{%- if tools %}
{{- '<|im_start|>system\\n' }}
{%- if messages[0].role == 'system' %}{{- messages[0].content + '\\n\\n' }}{%- endif %}
{{- '# Tools\\n\\nYou may call functions. Signatures inside <tools></tools>:\\n<tools>' }}
{%- for tool in tools %}{{- '\\n' + (tool | tojson) }}{%- endfor %}
{{- '\\n</tools>\\n\\nReturn each call as <tool_call>\\n{"name": <function-name>, \
"arguments": <args-json-object>}\\n</tool_call><|im_end|>\\n' }}
{%- elif messages[0].role == 'system' %}
{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}
{%- endif %}
{%- for message in messages %}
{%- if message.role == 'user' or (message.role == 'system' and not loop.first) %}
{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}
{%- elif message.role == 'assistant' %}
{{- '<|im_start|>assistant\\n' }}
{%- if message.reasoning_content %}
{{- '<think>\\n' + message.reasoning_content + '\\n</think>\\n\\n' }}
{%- endif %}
{%- if message.content %}{{- message.content }}{%- endif %}
{%- for call in message.tool_calls or [] %}
{{- '\\n<tool_call>\\n{"name": "' + call.function.name + '", "arguments": ' }}
{{- (call.function.arguments | tojson) + '}\\n</tool_call>' }}
{%- endfor %}
{{- '<|im_end|>\\n' }}
{%- elif message.role == 'tool' %}
{%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}
{{- '<|im_start|>user' }}
{%- endif %}
{{- '\\n<tool_response>\\n' + message.content + '\\n</tool_response>' }}
{%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}
{{- '<|im_end|>\\n' }}
{%- endif %}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
{{- '<|im_start|>assistant\\n' }}
{%- if enable_thinking is defined and enable_thinking %}{{- '<think>\\n' }}{%- endif %}
{%- endif %}
"""
"""The ChatML chat template embedded in the tiny model (tools, thinking toggle,
reasoning kept in history)."""

_SPECIAL_CONTROL: Final = ("<|im_start|>", "<|im_end|>")
_SPECIAL_USER: Final = (
    "<tool_call>",
    "</tool_call>",
    "<think>",
    "</think>",
    "<tool_response>",
    "</tool_response>",
)
_WORDS: Final = (
    "\u2581the",
    "\u2581a",
    "\u2581is",
    "\u2581and",
    "\u2581of",
    "\u2581to",
    "name",
    "arguments",
    "\u2581true",
    "\u2581false",
    "\u2581null",
    '":',
    '",',
    '{"',
)

# GGUF token types (gguf.TokenType), spelled out so this module reads on its own.
_NORMAL: Final = 1
_UNKNOWN: Final = 2
_CONTROL: Final = 3
_USER_DEFINED: Final = 4
_BYTE: Final = 6


def tiny_vocabulary() -> tuple[list[str], list[float], list[int]]:
    """The tiny model's tokens, scores and token types (SentencePiece conventions)."""
    tokens = ["<unk>", "<s>", "</s>"]
    types = [_UNKNOWN, _CONTROL, _CONTROL]
    tokens += [f"<0x{value:02X}>" for value in range(256)]
    types += [_BYTE] * 256
    tokens += list(_SPECIAL_CONTROL)
    types += [_CONTROL] * len(_SPECIAL_CONTROL)
    tokens += list(_SPECIAL_USER)
    types += [_USER_DEFINED] * len(_SPECIAL_USER)
    # Single printable characters (space is spelled U+2581 in SentencePiece), then words.
    chars = ["\u2581"] + [chr(code) for code in range(0x21, 0x7F)]
    tokens += chars
    types += [_NORMAL] * len(chars)
    tokens += list(_WORDS)
    types += [_NORMAL] * len(_WORDS)
    # Longer pieces score higher, so the tokenizer prefers them over single characters.
    scores = [
        float(len(token)) - 10.0 if kind == _NORMAL else 0.0
        for token, kind in zip(tokens, types, strict=True)
    ]
    return tokens, scores, types


def write_tiny_gguf(
    path: str | PathLike[str],
    *,
    seed: int = 0,
    chat_template: str | None = TINY_CHAT_TEMPLATE,
    context_length: int = 4096,
    n_layers: int = 2,
    n_embd: int = 64,
    n_ff: int = 128,
    n_head: int = 4,
) -> Path:
    """Write a tiny random-weight llama-architecture GGUF model to ``path`` and return it.

    The same ``seed`` always gives the same weights. ``chat_template=None`` leaves the
    template out (to test models that have none). Needs the ``gguf`` and ``numpy``
    packages; raises :class:`ImportError` without them. Blocking (writes well under a
    megabyte); call it from a thread or before starting Trio.
    """
    import gguf
    import numpy as np

    target = Path(path)
    rng = np.random.default_rng(seed)
    tokens, scores, types = tiny_vocabulary()
    n_vocab = len(tokens)
    head_dim = n_embd // n_head

    def weights(*shape: int, scale: float) -> Any:
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    writer = gguf.GGUFWriter(str(target), "llama")
    writer.add_name("emelex-tiny")
    writer.add_context_length(context_length)
    writer.add_embedding_length(n_embd)
    writer.add_block_count(n_layers)
    writer.add_feed_forward_length(n_ff)
    writer.add_head_count(n_head)
    writer.add_head_count_kv(n_head)
    writer.add_rope_dimension_count(head_dim)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_unk_token_id(0)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(tokens.index("<|im_end|>"))
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(False)
    writer.add_add_space_prefix(False)
    if chat_template is not None:
        writer.add_chat_template(chat_template)

    writer.add_tensor("token_embd.weight", weights(n_vocab, n_embd, scale=1.0))
    for layer in range(n_layers):
        prefix = f"blk.{layer}"
        writer.add_tensor(f"{prefix}.attn_norm.weight", np.ones(n_embd, dtype=np.float32))
        for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
            writer.add_tensor(f"{prefix}.{name}.weight", weights(n_embd, n_embd, scale=0.2))
        writer.add_tensor(f"{prefix}.ffn_norm.weight", np.ones(n_embd, dtype=np.float32))
        writer.add_tensor(f"{prefix}.ffn_gate.weight", weights(n_ff, n_embd, scale=0.2))
        writer.add_tensor(f"{prefix}.ffn_up.weight", weights(n_ff, n_embd, scale=0.2))
        writer.add_tensor(f"{prefix}.ffn_down.weight", weights(n_embd, n_ff, scale=0.2))
    writer.add_tensor("output_norm.weight", np.ones(n_embd, dtype=np.float32))
    writer.add_tensor("output.weight", weights(n_vocab, n_embd, scale=0.5))

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return target
