"""The search matcher over generated history text against ``rg -j1 -F`` on the same text.

Generates rows of history-like text (mostly ASCII, with Greek, German and accented
words), runs :func:`emelex.contracts.find_matches` on every row in-process, then writes
the same rows to files and times ``rg -j1 -F --count-matches`` (with ``-i``/``-w`` for the
same options) in the same run. Hit counts must agree. This is the matcher alone: the
Host's search adds store reads on top. The service goal is at most 3x ``rg -j1 -F``.

    .venv/bin/python benchmarks/search_matcher.py [--mib 100] [--repeat 3] [--quick]
"""

from __future__ import annotations

import argparse
import functools
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from emelex.contracts import find_matches, simple_casefold

try:
    from benchmarks._table import Row, met, ratio
except ModuleNotFoundError:  # run as a script: python benchmarks/search_matcher.py
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from benchmarks._table import Row, met, ratio

GOAL = 3.0
QUICK_MIB = 8
ROW_CHARS = 2_000
T = TypeVar("T")

WORDS = [
    "the",
    "value",
    "of",
    "request",
    "handler",
    "returns",
    "client",
    "token",
    "server",
    "result",
    "alpha",
    "beta",
    "gamma",
    "delta",
    "Straße",
    "naïve",
    "café",
    "ΟΔΟΣ",
    "λόγος",
    "résumé",
    "Über",
]


def generate(mib: int) -> list[str]:
    rng = random.Random(11)
    rows: list[str] = []
    size = 0
    while size < mib * 1024 * 1024:
        words = []
        length = 0
        while length < ROW_CHARS:
            word = rng.choice(WORDS)
            if rng.random() < 0.0005:
                word = "RareNeedle"
            words.append(word)
            length += len(word) + 1
        row = " ".join(words)
        rows.append(row)
        size += len(row.encode("utf-8")) + 1
    return rows


def timed(function: Callable[[], T], repeat: int) -> tuple[float, T]:
    samples = []
    outcome = function()  # warm: folding tables, page cache
    for _ in range(max(1, repeat)):
        started = time.perf_counter()
        outcome = function()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples), outcome


def export(rows: list[str], root: Path) -> None:
    per_file = 1_000
    for index in range(0, len(rows), per_file):
        text = "\n".join(rows[index : index + per_file]) + "\n"
        (root / f"rows{index // per_file:05d}.txt").write_text(text, encoding="utf-8")


def rg_count(rg: str, root: Path, query: str, flags: list[str]) -> int:
    argv = [rg, "-j1", "-F", "--no-filename", "--count-matches", *flags, "-e", query, "."]
    out = subprocess.run(argv, cwd=root, capture_output=True, check=False, text=True).stdout
    return sum(int(line) for line in out.split())


def measure(mib: int, repeat: int) -> list[Row]:
    rows = generate(mib)
    rg = shutil.which("rg")
    out: list[Row] = []
    cases: tuple[tuple[str, str, bool, bool, list[str]], ...] = (
        ("rare literal, case-sensitive", "RareNeedle", True, False, []),
        ("common word, case-insensitive", "handler", False, False, ["-i"]),
        ("common word, case-insensitive, whole word", "café", False, True, ["-i", "-w"]),
    )
    fold_time, _ = timed(lambda: [simple_casefold(row) for row in rows], repeat)
    print(f"simple_casefold over {mib} MiB: {fold_time * 1000:.0f} ms")
    with tempfile.TemporaryDirectory() as temp:
        root = Path(temp)
        export(rows, root)
        for label, query, case_sensitive, whole_word, flags in cases:

            def ours(query: str = query, cs: bool = case_sensitive, ww: bool = whole_word) -> int:
                return sum(
                    len(find_matches(row, query, case_sensitive=cs, whole_word=ww)) for row in rows
                )

            name = f"search {mib} MiB, {label} (median of {repeat})"
            our_time, our_hits = timed(ours, repeat)
            print(f"{label}: emelex {our_time * 1000:.0f} ms, {our_hits} hits")
            if rg is None:
                out.append(Row.skipped(name, "rg not installed", f"≤ {GOAL:g}x"))
                continue
            theirs = functools.partial(rg_count, rg, root, query, flags)
            rg_time, rg_hits = timed(theirs, repeat)
            times = our_time / rg_time
            print(f"  rg -j1 -F {rg_time * 1000:.0f} ms, {rg_hits} hits; ratio {times:.2f}")
            note = "" if rg_hits == our_hits else f"hits differ: emelex {our_hits}, rg {rg_hits}"
            out.append(
                Row(
                    name,
                    f"{our_time * 1000:,.0f} ms",
                    f"rg -j1 -F {rg_time * 1000:,.0f} ms",
                    ratio(times, 2, "time"),
                    f"≤ {GOAL:g}x",
                    met(times <= GOAL),
                    note,
                )
            )
    return out


def rows(quick: bool) -> list[Row]:
    return measure(QUICK_MIB if quick else 100, 1 if quick else 3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mib", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_MIB} MiB, one run")
    args = parser.parse_args()
    if args.quick:
        args.mib, args.repeat = QUICK_MIB, 1
    measure(args.mib, args.repeat)


if __name__ == "__main__":
    main()
