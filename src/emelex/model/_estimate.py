"""Token usage a backend counts itself when its provider reports none.

Two ways to count, both marked ``Usage(estimated=True)``:

* a :class:`TokenCounter` (the served model's own tokenizer, e.g. through the server):
  the prompt's text is counted in one call and the answer in another, and each
  message adds :data:`MESSAGE_OVERHEAD_TOKENS` for its framing (role markers and
  separators the chat template adds, which a plain tokenizer call does not see);
* otherwise the documented byte estimate: the UTF-8 bytes of the text divided by
  :data:`BYTES_PER_TOKEN`, rounded up, plus the same per-message overhead and
  :data:`MEDIA_PART_TOKENS` per image, audio or video part. Four bytes per token is
  close for English with common tokenizers; dense scripts and code run higher.

The prompt's text is every message's text, reasoning and tool calls (name and compact
JSON arguments) plus the tool declarations as compact JSON, the same parts the context
budget of :mod:`emelex.app` estimates.
"""

from __future__ import annotations

import json
from typing import Any, Final, Protocol, runtime_checkable

from emelex.model._errors import ModelError
from emelex.model._events import Response, Usage
from emelex.model._messages import Message, TextPart
from emelex.model._request import GenerationRequest

BYTES_PER_TOKEN: Final = 4
"""The byte estimate's ratio: UTF-8 bytes per token."""
MESSAGE_OVERHEAD_TOKENS: Final = 4
"""Tokens added per message (and per tool declaration) for its framing."""
MEDIA_PART_TOKENS: Final = 1_024
"""Tokens counted per image, audio or video part (its encoded size says little)."""


@runtime_checkable
class TokenCounter(Protocol):
    """Counts the tokens a model's tokenizer makes of a text.

    ``count_tokens`` returns a non-negative integer and raises a
    :class:`~emelex.model.ModelError` when it cannot count (the estimate then falls back
    to bytes). It must not hold the event loop: tokenize in a thread or over the network.
    """

    async def count_tokens(self, text: str) -> int: ...


def estimate_tokens(text: str) -> int:
    """The byte estimate of ``text``: UTF-8 bytes over :data:`BYTES_PER_TOKEN`, rounded up."""
    # surrogatepass: a lone surrogate from a sloppy server must not break the estimate.
    return -(-len(text.encode("utf-8", "surrogatepass")) // BYTES_PER_TOKEN)


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)


def _message_text(message: Message) -> tuple[str, int]:
    """The countable text of a message and its media part count."""
    pieces = []
    media = 0
    for part in message.content:
        if isinstance(part, TextPart):
            pieces.append(part.text)
        else:
            media += 1
    if message.reasoning:
        pieces.append(message.reasoning)
    for call in message.tool_calls:
        pieces.append(call.name)
        pieces.append(_compact(call.arguments))
    return "".join(pieces), media


def prompt_parts(request: GenerationRequest) -> tuple[list[str], int]:
    """The request's countable texts (one per message and tool declaration) and the
    fixed tokens added to their count (framing and media)."""
    texts = []
    fixed = 0
    for message in request.messages:
        text, media = _message_text(message)
        texts.append(text)
        fixed += MESSAGE_OVERHEAD_TOKENS + media * MEDIA_PART_TOKENS
    for tool in request.tools:
        texts.append(
            _compact(
                {"name": tool.name, "description": tool.description, "parameters": tool.parameters}
            )
        )
        fixed += MESSAGE_OVERHEAD_TOKENS
    return texts, fixed


def answer_text(response: Response) -> str:
    """The countable text of a response: answer, reasoning and tool calls."""
    text, _ = _message_text(response.to_message())
    return text


def estimate_usage(request: GenerationRequest, response: Response) -> Usage:
    """The byte estimate of one generation (no I/O)."""
    texts, fixed = prompt_parts(request)
    return Usage(
        fixed + sum(estimate_tokens(text) for text in texts),
        estimate_tokens(answer_text(response)),
        estimated=True,
    )


async def _count(counter: TokenCounter, text: str) -> int:
    count = await counter.count_tokens(text)
    if type(count) is not int or count < 0:
        raise ModelError(f"{counter!r} counted {count!r} tokens, not a non-negative integer")
    return count


async def count_usage(
    request: GenerationRequest, response: Response, counter: TokenCounter | None
) -> Usage:
    """The usage of one generation counted with ``counter``, each half falling back to
    the byte estimate when the counter raises a :class:`~emelex.model.ModelError`
    (``None``: the byte estimate alone)."""
    if counter is None:
        return estimate_usage(request, response)
    texts, fixed = prompt_parts(request)
    prompt = "\n".join(texts)
    try:
        input_tokens = fixed + await _count(counter, prompt)
    except ModelError:
        input_tokens = fixed + sum(estimate_tokens(text) for text in texts)
    answer = answer_text(response)
    try:
        output_tokens = await _count(counter, answer) if answer else 0
    except ModelError:
        output_tokens = estimate_tokens(answer)
    return Usage(input_tokens, output_tokens, estimated=True)
