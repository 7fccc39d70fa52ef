"""Integration with a real model: Gemma 3 270M (base, Q4_K_M) from its PyPI package.

The file embeds no chat template, so these tests also cover the override path. They
fail, never skip, when the model package is missing (see ``conftest.gemma_model``).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import trio

from emelex.model import (
    Capabilities,
    Completed,
    GenerationEvent,
    GenerationOptions,
    GenerationRequest,
    Message,
    Progress,
    TextDelta,
)
from emelex.model.llama import ChatTemplateMissing, LlamaModel

from .conftest import TEMPLATES, reference_params

PROMPT = GenerationRequest(
    [Message.user("Name three colours of the rainbow.")],
    options=GenerationOptions(max_tokens=24, temperature=0.0),
)


@pytest.fixture(scope="module")
def gemma_path(gemma_model: Path) -> Path:
    return gemma_model


def test_gemma_has_no_template_and_says_how_to_supply_one(gemma_path: Path) -> None:
    with pytest.raises(ChatTemplateMissing, match="chat_template="):
        LlamaModel(gemma_path)


def test_gemma_capabilities_from_the_gemma_template(gemma_path: Path) -> None:
    model = LlamaModel(gemma_path, chat_template=TEMPLATES / "gemma3.jinja")
    assert model.metadata.architecture == "gemma3"
    assert model.metadata.bos_token == "<bos>"
    assert model.capabilities == Capabilities(
        system_prompt=True,
        tool_declarations=False,
        tool_history=False,
        thinking_toggle=False,
        reasoning_history=False,
    )


async def test_gemma_streams_the_same_tokens_as_llama_cpp(gemma_path: Path) -> None:
    model = LlamaModel(gemma_path, chat_template=TEMPLATES / "gemma3.jinja", n_ctx=512)
    async with model:
        async with model.generate(PROMPT) as stream:
            events: list[GenerationEvent] = [event async for event in stream]
    assert isinstance(events[0], Progress)
    final = events[-1]
    assert isinstance(final, Completed)
    text = "".join(e.text for e in events if isinstance(e, TextDelta))
    assert text == final.response.text and text
    report = stream.report
    assert report is not None and report.generated_tokens <= 24

    import llama_cpp

    prompt = model.chat_format.render(PROMPT.messages).text
    assert prompt.startswith("<bos><start_of_turn>user\n")
    threads = max(1, (os.cpu_count() or 2) // 2)
    with reference_params(model.buffer_verdict):
        llm = llama_cpp.Llama(
            str(gemma_path), n_ctx=512, n_threads=threads, flash_attn=True, verbose=False
        )
    try:
        # The template renders <bos> itself; the backend must not add a second one.
        tokens = llm.tokenize(prompt.encode(), add_bos=False, special=True)
        assert tokens[:2] == [llm.token_bos(), 105]
        assert len(tokens) == report.prompt_tokens
        reference: list[int] = []
        for token in llm.generate(tokens, temp=0.0, top_k=1, repeat_penalty=1.0):
            if llama_cpp.llama_vocab_is_eog(llm._model.vocab, token) or len(reference) == 24:
                break
            reference.append(token)
    finally:
        llm.close()
    assert list(report.tokens) == reference


async def test_gemma_cancellation_stops_within_a_token(gemma_path: Path) -> None:
    model = LlamaModel(gemma_path, chat_template=TEMPLATES / "gemma3.jinja", n_ctx=512)
    request = GenerationRequest(
        [Message.user("Write a long story about a lighthouse.")],
        options=GenerationOptions(max_tokens=300, temperature=0.0),
    )
    async with model:
        with trio.fail_after(30):
            async with model.generate(request) as stream:
                async for event in stream:
                    if isinstance(event, TextDelta):
                        break
        report = await stream._job.result()
    assert report.finish == "cancelled"
    # The first piece reached Trio while the worker decoded the next token; the abort
    # flag stopped that decode (or the loop before the one after it).
    assert report.generated_tokens <= 2
