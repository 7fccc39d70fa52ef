"""The Host's ``git_status`` on a generated 10,000-file repository against ``git status``.

Builds a repository with the real git binary in a temporary directory (100 directories x
100 files, committed), then times, in the same run and interleaved, the Host's status
(``emelex.service.workspace._git.status_sync``: what ``Host.git_status`` runs on its worker
thread) and ``git status --porcelain=v2 --untracked-files=all``, which answers the same
question in one process. Each measure is the median wall time of the repeats; the CPU
time of each side (the best repeat, git's child time included) is printed beside it,
since the wall times of a shared machine move a lot. The Host and git must agree
(entry counts are checked). The goal is at most 3x git's time on the clean repository.

    .venv/bin/python benchmarks/service_git.py [--files 10000] [--repeat 9] [--quick]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from emelex.service.workspace._git import status_sync
from emelex.service.workspace._gitrepo import _INDEX_CACHE, _INDEX_CACHE_LOCK

try:
    from benchmarks._table import Row, met, ratio
except ModuleNotFoundError:  # run as a script: python benchmarks/service_git.py
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from benchmarks._table import Row, met, ratio

GOAL = 3.0
QUICK_FILES = 2_000
ENV = {
    **os.environ,
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_AUTHOR_NAME": "bench",
    "GIT_AUTHOR_EMAIL": "bench@example.com",
    "GIT_COMMITTER_NAME": "bench",
    "GIT_COMMITTER_EMAIL": "bench@example.com",
}


def git(root: Path, *args: str) -> bytes:
    return subprocess.run(
        ["git", "-C", str(root), *args], capture_output=True, check=True, env=ENV
    ).stdout


def generate(root: Path, files: int) -> None:
    git(root, "init", "-q", "-b", "main")
    per_dir = 100
    for index in range(files):
        directory = root / f"pkg{index // per_dir:03d}"
        directory.mkdir(exist_ok=True)
        (directory / f"f{index:05d}.txt").write_text(f"file {index}\n" * 20)
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "generated")


def edit(root: Path, files: int, count: int) -> None:
    """Modify ``count`` tracked files and add ``count`` untracked ones."""
    step = max(1, files // count)
    for index in range(0, files, step)[:count]:
        path = root / f"pkg{index // 100:03d}" / f"f{index:05d}.txt"
        path.write_text(f"edited {index}\n")
        (path.parent / f"new{index:05d}.txt").write_text("untracked\n")


def git_status(root: Path) -> int:
    out = git(root, "status", "--porcelain=v2", "--untracked-files=all", "-z")
    return sum(1 for record in out.split(b"\0") if record)


def ours(root: Path) -> int:
    found = status_sync(str(root))
    assert found is not None
    return len(found.staged) + len(found.worktree) + len(found.untracked)


def clear_index_cache() -> None:
    with _INDEX_CACHE_LOCK:
        _INDEX_CACHE.clear()


def child_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(function: Callable[[], int], cpu: Callable[[], float]) -> tuple[float, float, int]:
    cpu_before, started = cpu(), time.perf_counter()
    count = function()
    return time.perf_counter() - started, cpu() - cpu_before, count


def compare(
    label: str, root: Path, repeat: int, goal: bool, before: Callable[[], None] = lambda: None
) -> Row:
    walls: tuple[list[float], list[float]] = ([], [])
    cpus: tuple[list[float], list[float]] = ([], [])
    counts: tuple[set[int], set[int]] = (set(), set())
    git_status(root)  # git refreshes its index once; both sides then read the same one
    for _ in range(repeat):
        before()
        wall, cpu, count = timed(lambda: ours(root), time.process_time)
        walls[0].append(wall)
        cpus[0].append(cpu)
        counts[0].add(count)
        wall, cpu, count = timed(lambda: git_status(root), child_cpu)
        walls[1].append(wall)
        cpus[1].append(cpu)
        counts[1].add(count)
    wall_ours, wall_git = statistics.median(walls[0]), statistics.median(walls[1])
    cpu_ours, cpu_git = min(cpus[0]), min(cpus[1])
    times = wall_ours / wall_git
    print(
        f"{label}: emelex {wall_ours * 1000:.1f} ms (cpu {cpu_ours * 1000:.1f} ms),"
        f" git {wall_git * 1000:.1f} ms (cpu {cpu_git * 1000:.1f} ms);"
        f" wall ratio {times:.2f}, cpu ratio {cpu_ours / cpu_git:.2f}; entries {counts}"
    )
    note = f"cpu {cpu_ours * 1000:.0f} ms vs {cpu_git * 1000:.0f} ms ({cpu_ours / cpu_git:.2f}x)"
    if counts[0] != counts[1]:
        note += f"; entry counts differ: emelex {counts[0]}, git {counts[1]}"
    return Row(
        f"{label} (median of {repeat})",
        f"{wall_ours * 1000:,.1f} ms",
        f"git status {wall_git * 1000:,.1f} ms",
        ratio(times, 2, "time"),
        f"≤ {GOAL:g}x" if goal else "—",
        met(times <= GOAL) if goal else "n/a",
        note,
    )


def measure(files: int, repeat: int) -> list[Row]:
    if shutil.which("git") is None:
        return [Row.skipped("git_status vs git status", "git not installed", f"≤ {GOAL:g}x")]
    with tempfile.TemporaryDirectory() as temp:
        root = Path(temp) / "repo"
        root.mkdir()
        generate(root, files)
        rows = [
            compare(f"git_status, clean, {files:,} files", root, repeat, True),
            compare(
                f"git_status, clean, {files:,} files, index not cached",
                root,
                repeat,
                False,
                clear_index_cache,
            ),
        ]
        edit(root, files, 100)
        rows.append(
            compare(f"git_status, {files:,} files, 100 edited + 100 untracked", root, repeat, False)
        )
    return rows


def rows(quick: bool) -> list[Row]:
    return measure(QUICK_FILES if quick else 10_000, 3 if quick else 9)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=9)
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_FILES:,} files, 3 runs")
    args = parser.parse_args()
    if args.quick:
        args.files, args.repeat = QUICK_FILES, 3
    for row in measure(args.files, args.repeat):
        print(" | ".join(str(value) for value in vars(row).values()))


if __name__ == "__main__":
    main()
