"""Drain throughput of the shell runner against a plain ``dd``-to-/dev/null baseline.

Runs ``head -c SIZE /dev/zero`` through :func:`emelex.tools._process.run_shell` (bounded
capture, subreaper, process-group cleanup) and, in the same run, the same producer piped
into ``cat >/dev/null`` and ``dd of=/dev/null`` by a plain shell. Prints MB/s for each, the
ratio runner/baseline, and the peak RSS growth of this process while draining.

    .venv/bin/python benchmarks/process_drain.py [--mib 1024] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import time

import trio

from emelex.tools._process import build_shell_environment, run_shell


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mib", type=int, default=1024, help="bytes to drain, in MiB")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--output-bytes", type=int, default=64 * 1024)
    args = parser.parse_args()
    size: int = args.mib * 1024 * 1024
    mb = size / 1e6

    cat = [_baseline(f"head -c {size} /dev/zero | cat >/dev/null") for _ in range(args.repeat)]
    dd = [
        _baseline(f"head -c {size} /dev/zero | dd of=/dev/null bs=1M status=none")
        for _ in range(args.repeat)
    ]
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    ours = [trio.run(_runner, size, args.output_bytes) for _ in range(args.repeat)]
    rss_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

    def rate(samples: list[float]) -> float:
        return mb / statistics.median(samples)

    print(f"drained {args.mib} MiB, median of {args.repeat} runs")
    print(f"  cat >/dev/null  : {rate(cat):8.0f} MB/s")
    print(f"  dd of=/dev/null : {rate(dd):8.0f} MB/s")
    print(f"  run_shell       : {rate(ours):8.0f} MB/s")
    print(f"  ratio run_shell/cat : {rate(ours) / rate(cat):.2f}")
    print(f"  ratio run_shell/dd  : {rate(ours) / rate(dd):.2f}")
    print(
        f"  peak RSS {rss_after / 1024:.1f} MiB (growth while draining: "
        f"{(rss_after - rss_before) / 1024:.1f} MiB)"
    )


if __name__ == "__main__":
    main()
