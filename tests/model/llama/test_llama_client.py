"""Client.llama: the native backend behind the provider-independent Client."""

from __future__ import annotations

import threading
from pathlib import Path

from emelex.model import Client, Completed, GenerationOptions, GenerationRequest, Message, TextDelta
from emelex.model.llama import LlamaModel
from emelex.testing import ScriptedModel


async def test_client_llama_opens_generates_and_closes(tiny_model: Path) -> None:
    client = Client.llama(tiny_model, n_ctx=512, n_threads=1)
    assert isinstance(client.model, LlamaModel)
    assert client.capabilities == client.model.capabilities
    request = GenerationRequest(
        [Message.user("hi")], options=GenerationOptions(max_tokens=8, temperature=0.0)
    )
    async with client:
        assert client.model.is_open
        async with client.generate(request) as stream:
            events = [event async for event in stream]
    assert not client.model.is_open
    assert not [t for t in threading.enumerate() if t.name.startswith("emelex-worker")]
    final = events[-1]
    assert isinstance(final, Completed)
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == final.response.text


async def test_entering_a_client_without_lifetime_is_harmless() -> None:
    async with Client(ScriptedModel([])) as client:
        assert isinstance(client.model, ScriptedModel)
