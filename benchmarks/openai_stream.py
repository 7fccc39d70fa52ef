"""OpenAI-compatible backend benchmark: streamed chunks through OpenAIModel against a bare
httpx reader of the same stream (``aiter_lines`` + ``json.loads``), plus the pure
parse cost (SSE parser + chunk assembler, no I/O).

Run by hand: ``python benchmarks/openai_stream.py [--quick]`` (needs ``hypercorn``, a
dev dependency). The server is
hypercorn under Trio on loopback in the same process, so both readers share the CPU with
it; read the ratios, not the absolute times.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import httpx
import trio
from hypercorn.config import Config
from hypercorn.trio import serve

from emelex.model import Completed, GenerationRequest, Message
from emelex.model.openai import ChunkAssembler, OpenAIModel, SSEParser

try:
    from benchmarks._table import Row, met, ratio
except ModuleNotFoundError:  # run as a script: python benchmarks/openai_stream.py
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from benchmarks._table import Row, met, ratio

T = TypeVar("T")

CHUNKS = 4_000
#: OpenAIModel's stream over the bare httpx reader's time (issue 17).
STREAM_GOAL = 1.1
REPEATS = 9
QUICK_REPEATS = 2


def _chunk(index: int) -> bytes:
    body = {
        "id": "chatcmpl-bench",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "bench",
        "choices": [{"index": 0, "delta": {"content": f"tok{index} "}, "finish_reason": None}],
    }
    return b"data: " + json.dumps(body).encode() + b"\n\n"


STREAM = b"".join(_chunk(i) for i in range(CHUNKS)) + b"data: [DONE]\n\n"
PIECES = [STREAM[i : i + 1400] for i in range(0, len(STREAM), 1400)]  # about one TCP segment


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            else:
                await send({"type": "lifespan.shutdown.complete"})
                return
    while (await receive()).get("more_body"):
        pass
    headers = [(b"content-type", b"text/event-stream")]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    for piece in PIECES:
        await send({"type": "http.response.body", "body": piece, "more_body": True})
    await send({"type": "http.response.body", "body": b"", "more_body": False})


async def with_server(measure: Callable[[str], Awaitable[T]]) -> T:
    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.accesslog = None
    config.errorlog = None
    shutdown = trio.Event()
    async with trio.open_nursery() as nursery:
        server = partial(serve, app, config, shutdown_trigger=shutdown.wait)  # type: ignore[arg-type]
        binds = await nursery.start(server)
        try:
            return await measure(binds[0] + "/v1")
        finally:
            shutdown.set()


async def bare_httpx(base_url: str) -> tuple[float, float]:
    """(wall, CPU) seconds of reading the stream."""
    async with httpx.AsyncClient() as client:
        start, cpu = time.perf_counter(), time.process_time()
        text = []
        async with client.stream("POST", base_url + "/chat/completions", json={}) as response:
            async for line in response.aiter_lines():
                if line.startswith("data: ") and line != "data: [DONE]":
                    delta = json.loads(line[6:])["choices"][0]["delta"]
                    text.append(delta.get("content") or "")
        # Like OpenAIModel, which hands the whole answer over at the end.
        assert "".join(text).count("tok") == CHUNKS
        return time.perf_counter() - start, time.process_time() - cpu


async def emelex_stream(base_url: str) -> tuple[float, float]:
    """(wall, CPU) seconds of reading the stream through OpenAIModel."""
    request = GenerationRequest([Message.user("go")])
    async with OpenAIModel(base_url, "bench") as model:
        start, cpu = time.perf_counter(), time.process_time()
        count = 0
        async with model.generate(request) as stream:
            async for event in stream:
                count += 1
                if isinstance(event, Completed):
                    assert event.response.text.count("tok") == CHUNKS
        assert count == CHUNKS + 1
        return time.perf_counter() - start, time.process_time() - cpu


def parse_only() -> float:
    start = time.perf_counter()
    parser, assembler = SSEParser(1 << 20), ChunkAssembler()
    for piece in PIECES:
        for event in parser.feed(piece):
            if event.data != "[DONE]":
                assembler.feed_data(event.data)
    assembler.response()
    return time.perf_counter() - start


def median(fn: Callable[[], float], repeats: int) -> float:
    return statistics.median(fn() for _ in range(repeats))


def measure(repeats: int) -> tuple[float, float, float, float, float]:
    """(bare httpx, OpenAIModel, parse only) seconds, medians of ``repeats``, and the
    medians of the per-pair ratios of wall and of CPU time; prints them.

    The two readers run in interleaved pairs, the order alternating from pair to pair,
    so a change in the machine's load between them shows up in one pair's ratio rather
    than in every run of one side. The server shares the process, so CPU time counts
    its work too, the same for both readers.
    """
    bares: list[tuple[float, float]] = []
    ourses: list[tuple[float, float]] = []
    for index in range(repeats):
        order = (bare_httpx, emelex_stream) if index % 2 == 0 else (emelex_stream, bare_httpx)
        for reader in order:
            timing = trio.run(with_server, reader)
            (bares if reader is bare_httpx else ourses).append(timing)
    bare = statistics.median(wall for wall, _ in bares)
    ours = statistics.median(wall for wall, _ in ourses)
    pairs = list(zip(ourses, bares, strict=True))
    paired = statistics.median(o[0] / b[0] for o, b in pairs)
    paired_cpu = statistics.median(o[1] / b[1] for o, b in pairs)
    parse = median(parse_only, repeats)
    print(f"{CHUNKS} chunks, {len(STREAM) / 1e6:.2f} MB, {len(PIECES)} body pieces")
    print(f"bare httpx lines+json : {bare * 1e3:8.1f} ms  {CHUNKS / bare:10.0f} chunks/s")
    print(f"OpenAIModel stream    : {ours * 1e3:8.1f} ms  {CHUNKS / ours:10.0f} chunks/s")
    print(f"  ratio (ours / bare) : {paired:8.2f} (median of {repeats} interleaved pairs)")
    print(f"  CPU time ratio      : {paired_cpu:8.2f} (same pairs)")
    print(f"parse only (no I/O)   : {parse * 1e3:8.1f} ms  {CHUNKS / parse:10.0f} chunks/s")
    return bare, ours, parse, paired, paired_cpu


def rows(quick: bool) -> list[Row]:
    repeats = QUICK_REPEATS if quick else REPEATS
    bare, ours, parse, paired, paired_cpu = measure(repeats)
    return [
        Row(
            f"{CHUNKS:,} SSE chunks from a loopback server, ms (median of {repeats})",
            f"{ours * 1e3:,.1f} ms",
            f"bare httpx aiter_lines + json.loads {bare * 1e3:,.1f} ms",
            ratio(paired, 2, "time"),
            f"≤ {STREAM_GOAL:g}x",
            met(paired <= STREAM_GOAL),
            note=f"ratio: median over {repeats} interleaved pairs (order alternating); "
            f"CPU time {paired_cpu:.2f}x in the same pairs; "
            f"OpenAIModel's own parsing (SSE parser + chunk assembler, no I/O): "
            f"{parse * 1e3:,.1f} ms",
        )
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_REPEATS} repeats")
    args = parser.parse_args()
    measure(QUICK_REPEATS if args.quick else REPEATS)


if __name__ == "__main__":
    main()
