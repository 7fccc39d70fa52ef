"""Shared timing loop for the competitor workloads (run in the benchmark venv, asyncio)."""
# mypy: ignore-errors
# (these scripts run only in the separate benchmark venv, whose packages the project's
# mypy cannot see; the module is typed loosely for readers.)

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import math
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=3_000)
    parser.add_argument("--warmup", type=int, default=200)
    return parser.parse_args()


async def time_turns(
    turn: Callable[[], Awaitable[Any]], turns: int, warmup: int
) -> tuple[list[float], float]:
    """Run ``warmup`` untimed turns, then ``turns`` timed ones: (wall seconds of each turn,
    process CPU seconds per turn), timed exactly as ``benchmarks/harness.py`` times emelex."""
    for _ in range(warmup):
        await turn()
    samples: list[float] = []
    gc.collect()
    cpu = time.process_time()
    for _ in range(turns):
        start = time.perf_counter()
        await turn()
        samples.append(time.perf_counter() - start)
    return samples, (time.process_time() - cpu) / turns


def report(framework: str, version: str, timing: tuple[list[float], float]) -> None:
    """Print the one JSON line the harness reads."""
    samples, cpu_per_turn = timing
    ordered = sorted(samples)
    line = {
        "framework": framework,
        "version": version,
        "us_per_turn": statistics.median(samples) * 1e6,
        "p90_us": ordered[max(0, math.ceil(0.9 * len(ordered)) - 1)] * 1e6,
        "cpu_us_per_turn": cpu_per_turn * 1e6,
        "turns": len(samples),
        "python": sys.version.split()[0],
    }
    print(json.dumps(line), flush=True)


def run(main: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(main())
