"""The native backend end to end on a tiny generated model: streaming, cancellation,
worker lifecycle, caching, stops, reasoning budgets and grammar-constrained tool calls."""

from __future__ import annotations

import itertools
import linecache
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import trio
import trio.testing

from emelex.model import (
    AgentModel,
    Capabilities,
    Client,
    Completed,
    GenerationEvent,
    GenerationOptions,
    GenerationRequest,
    ImagePart,
    InvalidRequest,
    Message,
    ModelError,
    Progress,
    Reasoning,
    ReasoningDelta,
    TextDelta,
    ToolDefinition,
)
from emelex.model.llama import (
    ChatTemplateMissing,
    ContextOverflow,
    LlamaModel,
    LlamaStream,
    ModelLoadError,
    ModelNotOpen,
    OutputParser,
    UnsupportedContent,
)
from emelex.model.llama._grammar import ToolGrammar
from emelex.model.llama._native import AbortFlag, GenerationPlan, Sampling, run_generation
from emelex.model.llama._utf8 import Utf8Decoder
from emelex.model.templates import ToolCallFamily
from emelex.runtime import AgentCancellation, open_supervisor

from .conftest import reference_params, template_text

GREEDY = GenerationOptions(max_tokens=48, temperature=0.0, reasoning=Reasoning.OFF)
HELLO = GenerationRequest([Message.user("Hello there")], options=GREEDY)


def emelex_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("emelex-worker")]


def request(text: str = "Hello there", **options: Any) -> GenerationRequest:
    merged = {"max_tokens": 48, "temperature": 0.0, "reasoning": Reasoning.OFF, **options}
    return GenerationRequest([Message.user(text)], options=GenerationOptions(**merged))


async def collect(
    model: LlamaModel, req: GenerationRequest
) -> tuple[list[GenerationEvent], LlamaStream]:
    async with model.generate(req) as stream:
        events = [event async for event in stream]
    return events, stream


def completed(events: list[GenerationEvent]) -> Completed:
    assert isinstance(events[-1], Completed)
    assert sum(isinstance(e, Completed) for e in events) == 1
    return events[-1]


def check_contract(events: list[GenerationEvent]) -> None:
    response = completed(events).response
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == response.text
    assert "".join(e.text for e in events if isinstance(e, ReasoningDelta)) == (
        response.reasoning or ""
    )


@pytest.fixture
async def tiny(tiny_model: Path) -> Any:
    async with LlamaModel(tiny_model, n_threads=1, n_threads_batch=1) as model:
        yield model


# -- construction and lifecycle -----------------------------------------------------------
def test_capabilities_are_known_before_loading(tiny_model: Path) -> None:
    model = LlamaModel(tiny_model)
    assert model.capabilities == Capabilities.all_proven()
    assert model.chat_format.tool_family is ToolCallFamily.HERMES
    assert model.metadata.name == "emelex-tiny"
    assert model.context_size == 4096
    assert not model.is_open
    as_protocol: AgentModel = model  # checked statically by mypy, too
    assert isinstance(as_protocol, AgentModel)
    assert emelex_threads() == []


def test_a_model_without_template_says_how_to_supply_one(
    make_tiny_model: Callable[..., Path],
) -> None:
    path = make_tiny_model(chat_template=None)
    with pytest.raises(ChatTemplateMissing, match=r"chat_template=.*pathlib\.Path"):
        LlamaModel(path)
    override = LlamaModel(path, chat_template=template_text("chatml"))
    assert override.capabilities.tool_declarations is False
    from_file = LlamaModel(
        path, chat_template=Path(__file__).parents[2] / "fixtures/templates/qwen3.jinja"
    )
    assert from_file.capabilities.thinking_toggle is True


def test_unreadable_files_are_load_errors(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match="not found"):
        LlamaModel(tmp_path / "missing.gguf")
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"not a model at all")
    with pytest.raises(ModelLoadError, match="bad magic"):
        LlamaModel(junk)
    truncated = tmp_path / "cut.gguf"
    truncated.write_bytes(b"GGUF\x03\x00\x00\x00" + b"\x00" * 4)
    with pytest.raises(ModelLoadError):
        LlamaModel(truncated)


async def test_generate_before_open_is_a_typed_error(tiny_model: Path) -> None:
    model = LlamaModel(tiny_model)
    with pytest.raises(ModelNotOpen, match="async with model"):
        async with model.generate(HELLO):
            pass


async def test_open_runs_one_registered_worker_thread_and_close_joins_it(tiny_model: Path) -> None:
    async with open_supervisor("s") as supervisor:
        model = LlamaModel(tiny_model, n_threads=1)
        async with model:
            assert model.is_open
            assert [t.name for t in emelex_threads()] == ["emelex-worker:llama:tiny.gguf"]
            names = [info.name for info in supervisor.snapshot().walk()]
            assert "llama:tiny.gguf" in names
            with pytest.raises(ModelError, match="already open"):
                await model.__aenter__()
            events, _ = await collect(model, HELLO)
            check_contract(events)
        assert not model.is_open
        assert emelex_threads() == []
        async with model:  # a closed model can be opened again
            events_again, _ = await collect(model, HELLO)
        assert completed(events_again).response == completed(events).response


async def test_load_progress_reports_rising_fractions_on_the_worker(tiny_model: Path) -> None:
    seen: list[tuple[float, str]] = []
    model = LlamaModel(
        tiny_model,
        n_threads=1,
        load_progress=lambda fraction: seen.append((fraction, threading.current_thread().name)),
    )
    with trio.fail_after(60):
        async with model:
            loaded = list(seen)
            events, _ = await collect(model, HELLO)
    fractions = [fraction for fraction, _ in loaded]
    assert len(fractions) >= 2 and fractions == sorted(fractions)
    assert fractions[0] < 1.0 and fractions[-1] == 1.0
    assert {name for _, name in loaded} == {"emelex-worker:llama:tiny.gguf"}
    assert seen == loaded  # loading only: generating reports nothing here
    check_contract(events)


async def test_a_raising_load_progress_stops_the_load(tiny_model: Path) -> None:
    def refuse(fraction: float) -> None:
        raise ValueError(f"stop at {fraction}")

    model = LlamaModel(tiny_model, n_threads=1, load_progress=refuse)
    with trio.fail_after(60), pytest.raises(ModelLoadError, match="progress callback") as info:
        await model.__aenter__()
    assert isinstance(info.value.__cause__, ValueError)
    assert not model.is_open and emelex_threads() == []


async def test_client_wraps_the_model(tiny: LlamaModel) -> None:
    client = Client(tiny)
    assert client.capabilities == tiny.capabilities
    async with client.generate(HELLO) as stream:
        events = [event async for event in stream]
    check_contract(events)


# -- streaming ------------------------------------------------------------------------------
async def test_stream_matches_llama_cpp_greedy_decoding(tiny: LlamaModel, tiny_model: Path) -> None:
    events, stream = await collect(tiny, HELLO)
    check_contract(events)
    response = completed(events).response
    report = stream.report
    assert report is not None
    assert response.finish_reason == "length"
    assert response.usage.output_tokens == report.generated_tokens == 48
    assert response.usage.input_tokens == report.prompt_tokens
    assert isinstance(events[0], Progress)

    # The same greedy continuation through llama-cpp-python's own generator.
    import llama_cpp

    prompt = tiny.chat_format.render(HELLO.messages, reasoning=Reasoning.OFF).text
    with reference_params(tiny.buffer_verdict):
        llm = llama_cpp.Llama(
            str(tiny_model), n_ctx=512, n_threads=1, flash_attn=True, verbose=False
        )
    try:
        tokens = llm.tokenize(prompt.encode(), add_bos=True, special=True)
        assert len(tokens) == report.prompt_tokens
        reference = []
        for token in llm.generate(tokens, temp=0.0, top_k=1, repeat_penalty=1.0):
            reference.append(token)
            if len(reference) == 48:
                break
        text = llm.detokenize(reference, special=True).decode("utf-8", "replace")
    finally:
        llm.close()
    assert list(report.tokens) == reference
    parser = OutputParser(think=tiny.chat_format.think)
    parser.feed(text)
    assert parser.finish()[1].text == response.text


async def test_utf8_split_across_tokens_is_emitted_whole(tiny: LlamaModel) -> None:
    # The tiny vocabulary has no multi-byte pieces: these characters are 2-4 byte tokens
    # each. A grammar makes the model spell them out.
    target = "é✓🙂 ok"
    grammar = ToolGrammar(f'root ::= "{target}"\n', ())
    plan = GenerationPlan(
        prompt="<|im_start|>user\nx<|im_end|>\n<|im_start|>assistant\n",
        sampling=Sampling(temperature=0.0),
        abort=AbortFlag(),
        max_tokens=32,
        grammar=grammar,
    )
    worker = tiny._require_open()
    async with worker.job(run_generation, plan) as job:
        pieces = [item async for batch in job.batches() for item in batch if isinstance(item, str)]
        report = await job.result()
    assert "".join(pieces) == target
    assert report.generated_tokens == len(target.encode())  # one byte token per byte
    assert len(pieces) < report.generated_tokens
    assert all("\ufffd" not in piece for piece in pieces)


async def test_progress_events_cover_the_prompt_in_chunks(tiny_model: Path) -> None:
    long_text = "the quick brown fox jumps over the lazy dog " * 8
    async with LlamaModel(tiny_model, n_batch=32, n_threads=1) as model:
        events, stream = await collect(model, request(long_text, max_tokens=4))
    progress = [e for e in events if isinstance(e, Progress)]
    first_text = next(i for i, e in enumerate(events) if not isinstance(e, Progress))
    assert events[:first_text] == progress
    assert stream.report is not None
    total = stream.report.prompt_tokens
    assert all(p.stage == "prompt" and p.total == total for p in progress)
    steps = [p.completed for p in progress]
    assert steps[0] == 0 and steps[-1] == total
    assert steps == sorted(steps)
    assert all(b - a <= 32 for a, b in itertools.pairwise(steps))
    assert len(steps) == 1 + -(-total // 32)


async def test_the_cached_prefix_is_reused(tiny: LlamaModel) -> None:
    first_events, first = await collect(tiny, HELLO)
    again_events, again = await collect(tiny, HELLO)
    assert first.report is not None and again.report is not None
    assert again.report.cached_tokens == again.report.prompt_tokens - 1
    assert isinstance(again_events[0], Progress)
    assert again_events[0].completed == again.report.cached_tokens
    assert completed(again_events).response == completed(first_events).response

    longer = GenerationRequest(
        [Message.user("Hello there"), Message.assistant("Hi"), Message.user("More")],
        options=GREEDY,
    )
    _, extended = await collect(tiny, longer)
    assert extended.report is not None
    prompt = tiny.chat_format.render(HELLO.messages, reasoning=Reasoning.OFF).text
    common = prompt.removesuffix("<|im_start|>assistant\n")
    assert extended.report.cached_tokens >= len(common) // 4  # the shared turns at least
    await tiny.clear_cache()
    _, cleared = await collect(tiny, HELLO)
    assert cleared.report is not None and cleared.report.cached_tokens == 0


async def test_stop_strings_end_the_answer(tiny: LlamaModel) -> None:
    events, _ = await collect(tiny, HELLO)
    text = completed(events).response.text
    stop = text[12:15]
    stopped_events, stopped = await collect(tiny, request(stop=stop))
    check_contract(stopped_events)
    response = completed(stopped_events).response
    assert response.text == text[: text.index(stop)].rstrip()
    assert response.finish_reason == "stop"
    assert stopped.report is not None and stopped.report.generated_tokens < 48


async def test_context_overflow_is_raised_and_the_model_stays_usable(tiny_model: Path) -> None:
    async with LlamaModel(tiny_model, n_ctx=256, n_threads=1) as model:
        assert model.context_size == 256
        with pytest.raises(ContextOverflow, match="context holds 256") as caught:
            await collect(model, request("word " * 80))
        assert caught.value.context_size == 256
        events, stream = await collect(model, request("hi", max_tokens=500))
        assert completed(events).response.finish_reason == "length"
        assert stream.report is not None
        assert stream.report.prompt_tokens + stream.report.generated_tokens == 256


async def test_unsupported_content_is_refused_on_entry(tiny: LlamaModel) -> None:
    image = GenerationRequest([Message.user(["see", ImagePart(b"\x89PNG", "image/png")])])
    with pytest.raises(UnsupportedContent):
        async with tiny.generate(image):
            pass


async def test_reasoning_budget_closes_the_think_block(tiny: LlamaModel) -> None:
    req = request("think first", max_tokens=40, reasoning=Reasoning.budget(8))
    events, stream = await collect(tiny, req)
    check_contract(events)
    response = completed(events).response
    assert response.reasoning and response.text
    kinds = [type(e) for e in events if not isinstance(e, Progress | Completed)]
    assert kinds.index(TextDelta) > 0 and ReasoningDelta not in kinds[kinds.index(TextDelta) :]
    report = stream.report
    assert report is not None

    def first_pieces(job: Any, count: int) -> bytes:
        return b"".join(job.resource.piece(token) for token in report.tokens[:count])

    raw = await tiny._require_open().run(first_pieces, 8)
    # The reasoning is exactly what the first 8 generated tokens spell.
    assert response.reasoning == Utf8Decoder().decode(raw, final=True).strip()


async def test_reasoning_off_does_not_open_a_think_block(tiny: LlamaModel) -> None:
    events, _ = await collect(tiny, request(reasoning=Reasoning.OFF))
    assert completed(events).response.reasoning is None


# -- cancellation ---------------------------------------------------------------------------
async def test_cancelling_the_callers_scope_mid_generation(tiny: LlamaModel) -> None:
    req = request(max_tokens=4000)
    seen: list[GenerationEvent] = []
    stream_ref: list[LlamaStream] = []
    with trio.fail_after(10):
        with trio.CancelScope() as scope:
            async with tiny.generate(req) as stream:
                stream_ref.append(stream)
                async for event in stream:
                    seen.append(event)
                    if isinstance(event, TextDelta):
                        scope.cancel()
        assert scope.cancelled_caught
    job = stream_ref[0]._job
    assert job.left_worker
    assert tiny._require_open().outstanding == 0
    report = await job.result()
    assert report.finish == "cancelled"
    assert report.generated_tokens < 4000 // 2
    events, _ = await collect(tiny, HELLO)  # the model is still fine
    check_contract(events)


async def test_leaving_the_stream_early_stops_the_job(tiny: LlamaModel) -> None:
    with trio.fail_after(10):
        async with tiny.generate(request(max_tokens=4000)) as stream:
            async for event in stream:
                if isinstance(event, TextDelta):
                    break
        assert stream._job.left_worker
        report = await stream._job.result()
    assert report.finish == "cancelled" and report.generated_tokens < 2000


async def test_agent_cancellation_ends_the_stream_with_what_was_produced(tiny: LlamaModel) -> None:
    cancellation = AgentCancellation()
    events: list[GenerationEvent] = []
    with trio.fail_after(10):
        async with tiny.generate(request(max_tokens=4000), cancellation=cancellation) as stream:
            async for event in stream:
                events.append(event)
                if isinstance(event, TextDelta):
                    cancellation.cancel()
    check_contract(events)
    response = completed(events).response
    assert response.finish_reason == "cancelled"
    assert response.text
    assert 0 < response.usage.output_tokens < 2000
    assert stream.report is not None and stream.report.finish == "cancelled"


async def test_agent_cancellation_before_entry_completes_empty(tiny: LlamaModel) -> None:
    cancellation = AgentCancellation()
    cancellation.cancel()
    async with tiny.generate(HELLO, cancellation=cancellation) as stream:
        events = [event async for event in stream]
    assert completed(events).response.finish_reason == "cancelled"
    assert completed(events).response.text == ""


def worker_is_decoding() -> bool:
    """Whether the model's worker thread is inside ``llama_decode`` for a prompt chunk."""
    frames = sys._current_frames()
    for thread in emelex_threads():
        frame = frames.get(thread.ident or -1)
        if frame is not None and frame.f_code.co_name == "_generate":
            line = linecache.getline(frame.f_code.co_filename, frame.f_lineno)
            return "llama_decode" in line
    return False


async def test_cancellation_during_prompt_processing_aborts_the_decode(tiny_model: Path) -> None:
    long_text = "alpha beta gamma delta " * 160  # ~3,500 tokens decoded in one call
    async with LlamaModel(tiny_model, n_batch=4096, n_threads=1, n_threads_batch=1) as model:
        with trio.fail_after(20):
            async with model.generate(request(long_text, max_tokens=8)) as stream:
                async for event in stream:
                    assert isinstance(event, Progress) and event.completed == 0
                    # Wait until the worker is inside the decode (a state of another
                    # thread: no event to wait on, so poll it).
                    while not worker_is_decoding():  # noqa: ASYNC110
                        await trio.sleep(0.0005)
                    break
        report = await stream._job.result()
        assert report.finish == "cancelled"
        assert report.aborted_in_decode  # stopped by llama.cpp's abort callback
        perf = await model.performance()
        assert perf.prompt_tokens < report.prompt_tokens

        # The cache was trimmed to what the KV memory really holds: generating from the
        # same prompt now gives what a cleared model gives.
        events, _ = await collect(model, request(long_text, max_tokens=8))
        await model.clear_cache()
        fresh_events, _ = await collect(model, request(long_text, max_tokens=8))
    assert completed(events).response == completed(fresh_events).response


async def test_a_set_abort_flag_stops_llama_decode(tiny: LlamaModel) -> None:
    """The abort callback reads the flag from C: a decode with the flag set returns 2."""

    def decode_with(job: Any, flag: AbortFlag) -> int:
        import llama_cpp

        loaded = job.resource
        loaded.truncate_cache(0)
        loaded.install_abort(flag)
        try:
            loaded.fill_batch(list(range(3, 67)), 0, logits_last=True)
            return int(llama_cpp.llama_decode(loaded.context, loaded.batch))
        finally:
            loaded.install_abort(loaded._idle_flag)
            loaded.resync_cache([])

    worker = tiny._require_open()
    stopped = AbortFlag()
    stopped.set()
    assert stopped.is_set
    assert await worker.run(decode_with, stopped) == 2
    assert await worker.run(decode_with, AbortFlag()) == 0


async def test_closing_the_model_stops_a_running_generation(tiny: LlamaModel) -> None:
    errors: list[BaseException] = []

    async def consume(started: trio.Event) -> None:
        try:
            async with tiny.generate(request(max_tokens=4000)) as stream:
                async for event in stream:
                    if isinstance(event, TextDelta):
                        started.set()
        except ModelNotOpen as exc:
            errors.append(exc)

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            started = trio.Event()
            nursery.start_soon(consume, started)
            await started.wait()
            await tiny.aclose()
    assert emelex_threads() == []
    assert len(errors) == 1 and "closed during" in str(errors[0])


async def test_closing_the_model_fails_a_generation_waiting_for_the_queue(
    tiny_model: Path,
) -> None:
    errors: list[BaseException] = []
    model = LlamaModel(tiny_model, n_threads=1, queue_capacity=1, emit_capacity=4)

    async def second() -> None:
        try:
            async with model.generate(HELLO):
                pass
        except ModelNotOpen as exc:
            errors.append(exc)

    with trio.fail_after(10):
        async with model:
            # The first job fills its small buffer and holds the only queue slot.
            async with model.generate(request(max_tokens=4000)) as first:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(second)
                    await trio.testing.wait_all_tasks_blocked()
                    assert not first._job.left_worker
                    await model.aclose()
    assert len(errors) == 1 and "closed while this generation waited" in str(errors[0])
    assert emelex_threads() == []


def test_options_are_checked(tiny_model: Path) -> None:
    for options in (
        {"n_batch": 0},
        {"queue_capacity": 0},
        {"n_ctx": 8},
        {"tool_choice": "always"},
        {"batch_interval": -1},
        {"batch_interval": True},
    ):
        with pytest.raises(InvalidRequest):
            LlamaModel(tiny_model, **options)


async def test_jobs_queue_to_the_single_worker(tiny_model: Path) -> None:
    async with LlamaModel(tiny_model, n_threads=1, queue_capacity=1) as model:
        async with model.generate(request(max_tokens=16)) as first:
            async with model.generate(request("second", max_tokens=16)) as second:
                # Entering the second waited for the first job to leave the worker.
                assert first._job.left_worker
                second_events = [event async for event in second]
            first_events = [event async for event in first]
    check_contract(first_events)
    check_contract(second_events)


# -- grammar-constrained tool calls ------------------------------------------------------------
TOOLS = [
    ToolDefinition(
        "get_weather",
        "Weather for a city",
        {
            "type": "object",
            "properties": {
                "city": {"type": "string", "maxLength": 6},
                "unit": {"enum": ["celsius", "fahrenheit"]},
                "days": {"type": "integer", "minimum": 1},
            },
            "required": ["city"],
        },
    ),
    ToolDefinition(
        "plan",
        "Make a plan",
        {
            "type": "object",
            "properties": {
                "steps": {
                    "type": "array",
                    "items": {"$ref": "#/$defs/step"},
                    "minItems": 1,
                    "maxItems": 2,
                },
                "urgent": {"type": "boolean"},
                "note": {"type": ["string", "null"], "maxLength": 4},
                "version": {"const": 2},
            },
            "required": ["steps", "version"],
            "$defs": {
                "step": {
                    "type": "object",
                    "properties": {
                        "what": {"type": "string", "minLength": 1, "maxLength": 3},
                        "cost": {"type": "number", "minimum": 0},
                        "kind": {"anyOf": [{"type": "integer", "minimum": 0}, {"const": "x"}]},
                    },
                    "required": ["what"],
                }
            },
        },
    ),
    ToolDefinition(
        "ping", "No arguments", {"type": "object", "properties": {}, "additionalProperties": False}
    ),
]
VALIDATORS = {tool.name: jsonschema.Draft202012Validator(tool.parameters) for tool in TOOLS}


def assert_valid_calls(events: list[GenerationEvent]) -> int:
    response = completed(events).response
    for call in response.tool_calls:
        VALIDATORS[call.name].validate(call.arguments)
    return len(response.tool_calls)


@pytest.mark.parametrize("family_template", ["tiny", "llama3.1", "mistral-v0.3"])
async def test_required_tool_calls_are_schema_valid_by_construction(
    tiny_model: Path, family_template: str
) -> None:
    # A random model writes whatever the grammar allows; every call it completes must
    # satisfy its tool's schema (an answer cut off by max_tokens keeps complete calls).
    template = None if family_template == "tiny" else template_text(family_template)
    model = LlamaModel(
        tiny_model, chat_template=template, tool_choice="required", n_threads=1, n_threads_batch=1
    )
    finished = 0
    async with model:
        for seed in range(6):
            req = GenerationRequest(
                [Message.user("Use a tool")],
                tools=TOOLS,
                options=GenerationOptions(
                    max_tokens=300, temperature=1.0, seed=seed, reasoning=Reasoning.OFF
                ),
            )
            events, _ = await collect(model, req)
            check_contract(events)
            response = completed(events).response
            count = assert_valid_calls(events)
            if response.finish_reason == "tool_calls":
                assert count >= 1 and response.text == ""
                finished += 1
            else:
                assert response.finish_reason == "length"
    assert finished >= 2


async def test_free_text_stays_possible_and_triggered_calls_are_valid(tiny: LlamaModel) -> None:
    texts = calls = 0
    for seed in range(16):
        req = GenerationRequest(
            [Message.user("Answer or call")],
            tools=TOOLS,
            options=GenerationOptions(
                max_tokens=160, temperature=1.0, seed=seed, reasoning=Reasoning.OFF
            ),
        )
        events, _ = await collect(tiny, req)
        check_contract(events)
        calls += assert_valid_calls(events)
        texts += bool(completed(events).response.text)
    assert texts > 0
    assert calls > 0


async def test_without_the_grammar_calls_are_only_parsed(tiny_model: Path) -> None:
    async with LlamaModel(tiny_model, tool_grammar=False, n_threads=1) as model:
        req = GenerationRequest([Message.user("x")], tools=TOOLS, options=GREEDY)
        events, _ = await collect(model, req)
    check_contract(events)
