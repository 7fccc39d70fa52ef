"""Usage is never silently zero: llama-cpp-python's server reports none while streaming,
so the backend counts it (bytes by default, the served model's tokenizer on request),
marks it estimated, and session token budgets hold on it."""

from __future__ import annotations

from pathlib import Path

import llama_cpp
import pytest
import trio

from emelex.agent import AgentError
from emelex.app import Agent, Engine, Harness, UsageBudget, UsageBudgetExhausted
from emelex.model import (
    Completed,
    GenerationOptions,
    GenerationRequest,
    Message,
    Response,
    Usage,
    estimate_usage,
)
from emelex.model.llama import write_tiny_gguf
from emelex.model.openai import OpenAIModel, ServerTokenCounter

GREEDY = GenerationOptions(max_tokens=12, temperature=0.0, seed=7)
REQUEST = GenerationRequest(
    [Message.system("You are terse."), Message.user("Say something.")], options=GREEDY
)


async def generate(model: OpenAIModel, request: GenerationRequest = REQUEST) -> Response:
    with trio.fail_after(60):
        async with model.generate(request) as stream:
            events = [event async for event in stream]
    assert not stream.usage_reported  # the premise: this server sends no usage
    last = events[-1]
    assert isinstance(last, Completed)
    return last.response


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory) -> llama_cpp.Llama:
    """The tiny model's own tokenizer, loaded here (the server loads the same file:
    write_tiny_gguf is deterministic)."""
    path = write_tiny_gguf(tmp_path_factory.mktemp("vocab") / "tiny.gguf")
    return llama_cpp.Llama(str(path), vocab_only=True, verbose=False)


def tokens(tokenizer: llama_cpp.Llama, text: str) -> int:
    # What the server's /extras/tokenize/count sees, minus the BOS it adds to every text.
    return len(tokenizer.tokenize(text.encode(), add_bos=False, special=True))


async def test_the_default_is_the_byte_estimate_marked_estimated(llama_server: str) -> None:
    async with OpenAIModel(llama_server, "tiny") as model:
        assert model.token_counter is None
        response = await generate(model)
    assert response.text
    assert response.usage.estimated
    assert response.usage == estimate_usage(REQUEST, response)
    assert response.usage.input_tokens > 0 and response.usage.output_tokens > 0


async def test_the_servers_tokenizer_counts_exactly(
    llama_server: str, tokenizer: llama_cpp.Llama
) -> None:
    async with OpenAIModel(llama_server, "tiny", token_counter="server") as model:
        assert isinstance(model.token_counter, ServerTokenCounter)
        response = await generate(model)
        again = await model.token_counter.count_tokens(response.text)
    assert response.usage.estimated
    assert response.usage.output_tokens == tokens(tokenizer, response.text) == again > 0
    # The prompt: each message's text, joined by newlines, plus 4 tokens per message.
    prompt = "You are terse.\nSay something."
    assert response.usage.input_tokens == tokens(tokenizer, prompt) + 2 * 4


async def test_a_token_budget_holds_on_estimated_usage(llama_server: str, tmp_path: Path) -> None:
    """The first turn's estimated tokens exhaust a 1-token budget: the second turn is
    refused before any model call."""
    async with OpenAIModel(llama_server, "tiny") as model:
        agent = Agent.builder().name("budgeted").instructions("Be terse.").model(model).build()
        harness = Harness("budgeted", usage_budget=UsageBudget(max_total_tokens=1))
        engine = Engine()
        async with engine:
            session = await engine.create(agent).harness(harness).start()
            with trio.fail_after(60):
                turn = await session.send_and_wait("Say something.")
            assert turn.usage.estimated and turn.usage.total_tokens > 1
            spent = session.usage
            assert spent is not None and spent.usage == turn.usage
            assert "; estimated" in spent.describe()
            with pytest.raises(AgentError) as caught:
                await session.send_and_wait("More.")
    assert isinstance(caught.value, UsageBudgetExhausted)
    assert caught.value.actual == turn.usage.total_tokens
    assert Usage(1, 1) + turn.usage == Usage(
        turn.usage.input_tokens + 1, turn.usage.output_tokens + 1, estimated=True
    )
