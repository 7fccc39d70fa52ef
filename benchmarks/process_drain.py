"""Drain throughput of the shell runner against a plain ``dd``-to-/dev/null baseline.

Runs ``head -c SIZE /dev/zero`` through :func:`emelex.tools._process.run_shell` (bounded
capture, subreaper, process-group cleanup) and, in the same run, the same producer piped
into ``cat >/dev/null`` and ``dd of=/dev/null`` by a plain shell. Prints MB/s for each, the
ratio runner/baseline, and the peak RSS growth of this process while draining.

    .venv/bin/python benchmarks/process_drain.py [--mib 1024] [--repeat 3] [--quick]

The goals: at least :data:`CAT_GOAL` of ``cat``'s rate, and bounded memory: the runner
keeps at most ``--output-bytes`` of the output, so the peak RSS may grow by at most
:data:`RSS_GROWTH_GOAL_MIB` while draining, whatever the size.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import trio

from emelex.tools._process import build_shell_environment, run_shell

try:
    from benchmarks._table import Row, ratio
except ModuleNotFoundError:  # run as a script: python benchmarks/process_drain.py
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from benchmarks._table import Row, ratio

RSS_GROWTH_GOAL_MIB = 16
#: The runner's drain rate over ``cat >/dev/null``'s on the same producer (issue 17).
CAT_GOAL = 0.5
QUICK_MIB = 256


def _baseline(command: str) -> float:
    started = time.perf_counter()
    subprocess.run(["/bin/sh", "-c", command], check=True)
    return time.perf_counter() - started


async def _runner(size: int, output_bytes: int) -> float:
    env = build_shell_environment(os.environ.get("PATH"), os.environ.get("HOME"))
    started = time.perf_counter()
    result = await run_shell(
        f"head -c {size} /dev/zero",
        cwd="/tmp",
        env=env,
        timeout=600,
        output_bytes=output_bytes,
    )
    elapsed = time.perf_counter() - started
    assert result.exit_code == 0, result
    assert result.stdout.total_bytes == size
    return elapsed


@dataclass
class Drain:
    """MB/s (median of the runs) of each reader, and the peak RSS growth while draining."""

    mib: int
    repeat: int
    cat: float
    dd: float
    ours: float
    rss_mib: float
    rss_growth_mib: float


def measure(mib: int, repeat: int, output_bytes: int) -> Drain:
    size = mib * 1024 * 1024
    mb = size / 1e6
    cat = [_baseline(f"head -c {size} /dev/zero | cat >/dev/null") for _ in range(repeat)]
    dd = [
        _baseline(f"head -c {size} /dev/zero | dd of=/dev/null bs=1M status=none")
        for _ in range(repeat)
    ]
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    ours = [trio.run(_runner, size, output_bytes) for _ in range(repeat)]
    rss_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

    def rate(samples: list[float]) -> float:
        return mb / statistics.median(samples)

    return Drain(
        mib,
        repeat,
        rate(cat),
        rate(dd),
        rate(ours),
        rss_after / 1024,
        (rss_after - rss_before) / 1024,
    )


def report(drain: Drain) -> None:
    print(f"drained {drain.mib} MiB, median of {drain.repeat} runs")
    print(f"  cat >/dev/null  : {drain.cat:8.0f} MB/s")
    print(f"  dd of=/dev/null : {drain.dd:8.0f} MB/s")
    print(f"  run_shell       : {drain.ours:8.0f} MB/s")
    print(f"  ratio run_shell/cat : {drain.ours / drain.cat:.2f}")
    print(f"  ratio run_shell/dd  : {drain.ours / drain.dd:.2f}")
    print(
        f"  peak RSS {drain.rss_mib:.1f} MiB (growth while draining: "
        f"{drain.rss_growth_mib:.1f} MiB)"
    )


def drain_rows(drain: Drain) -> list[Row]:
    label = f"shell drain of {drain.mib:,} MiB, MB/s (median of {drain.repeat})"
    return [
        Row(
            f"{label} vs cat",
            f"{drain.ours:,.0f}",
            f"cat >/dev/null {drain.cat:,.0f}",
            ratio(drain.ours / drain.cat, 2, "speed"),
            f"≥ {CAT_GOAL:g}x",
            "yes" if drain.ours >= CAT_GOAL * drain.cat else "no",
        ),
        Row(
            f"{label} vs dd",
            f"{drain.ours:,.0f}",
            f"dd of=/dev/null {drain.dd:,.0f}",
            ratio(drain.ours / drain.dd, 2, "speed"),
        ),
        Row(
            f"shell drain of {drain.mib:,} MiB, peak RSS growth",
            f"+{drain.rss_growth_mib:.1f} MiB",
            goal=f"≤ {RSS_GROWTH_GOAL_MIB} MiB (bounded)",
            met="yes" if drain.rss_growth_mib <= RSS_GROWTH_GOAL_MIB else "no",
        ),
    ]


def rows(quick: bool) -> list[Row]:
    drain = measure(QUICK_MIB if quick else 1024, 1 if quick else 3, 64 * 1024)
    report(drain)
    return drain_rows(drain)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mib", type=int, default=1024, help="bytes to drain, in MiB")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--output-bytes", type=int, default=64 * 1024)
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_MIB} MiB, one run")
    args = parser.parse_args()
    if args.quick:
        args.mib, args.repeat = QUICK_MIB, 1
    report(measure(args.mib, args.repeat, args.output_bytes))


if __name__ == "__main__":
    main()
