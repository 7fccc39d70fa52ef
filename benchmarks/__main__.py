"""``python -m benchmarks``: run every benchmark and print one table.

Columns: measure, emelex figure, anchor figure, ratio, goal, met. Each benchmark runs in a
child interpreter of its own (a fresh heap for the memory figures; a crash, a missing
model or a missing tool costs its rows, never the table). The children's own reports go
to stderr as they run; the table goes to stdout, as text, ``--markdown`` (the table of
``docs/performance.md``) or ``--json``.

    python -m benchmarks                      # everything, full counts (about 9 minutes on 2 cores)
    python -m benchmarks --quick              # smoke run (about a minute)
    python -m benchmarks --only runtime,llama
    python -m benchmarks --markdown > table.md
    python -m benchmarks --save run.json     # the text table, and the run as JSON
    python -m benchmarks --load run.json --markdown

Exit status: 0 when every benchmark ran (met or not: the table is a report), 1 when one
failed, 2 on a usage error.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import importlib
import importlib.metadata
import json
import math
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

try:
    from benchmarks._table import (
        Row,
        Section,
        Table,
        format_json,
        format_markdown,
        format_text,
        from_json_dict,
        rows_from_json,
        rows_to_json,
    )
except ModuleNotFoundError:  # run as a script: python benchmarks/__main__.py
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from benchmarks._table import (
        Row,
        Section,
        Table,
        format_json,
        format_markdown,
        format_text,
        from_json_dict,
        rows_from_json,
        rows_to_json,
    )

ROOT = Path(__file__).resolve().parent.parent
#: Every benchmark of the wave, in table order: name (the script's module) and what it is.
BENCHMARKS: dict[str, str] = {
    "harness": "per-turn overhead against agent frameworks, event throughput, "
    "cancellation latency, memory per session",
    "history": "a tool round at 1,000 messages of history against 0, and 1,000 sessions "
    "at once against one",
    "runtime": "actors, mailboxes and the dedicated worker against bare Trio",
    "workspace_grep": "grep and find_files on a generated tree against rg and find",
    "process_drain": "the shell runner draining output against cat and dd",
    "llama": "the native llama.cpp backend against llama-cpp-python and llama.cpp itself",
    "openai_stream": "the OpenAI backend's stream against a bare httpx reader (loopback)",
    "search_matcher": "the service's search matcher over generated history against rg -j1 -F",
    "service_git": "the Host's git_status on a 10,000-file repository against git status",
    "transport": "the Host over its socket (emelex serve) against bare hypercorn and in process",
    "drafts": "live drafts of a streaming answer to live watchers against none",
    "temporal": "a tool round as a Temporal turn workflow against a hand-written workflow "
    "running the same activities, and against openai-agents and pydantic-ai on Temporal",
}
#: Seconds a benchmark may run before it is stopped (and its rows marked failed).
TIMEOUT_FULL = 3_600.0
TIMEOUT_QUICK = 600.0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="Run emelex's benchmarks and print one table "
        "(measure, emelex, anchor, ratio, goal, met).",
    )
    parser.add_argument("--quick", action="store_true", help="each benchmark's smoke run")
    parser.add_argument(
        "--only", metavar="NAME[,NAME]", help=f"run only these ({', '.join(BENCHMARKS)})"
    )
    output = parser.add_mutually_exclusive_group()
    output.add_argument("--json", action="store_true", help="print the table as JSON")
    output.add_argument("--markdown", action="store_true", help="print a Markdown table")
    parser.add_argument(
        "--quiet", action="store_true", help="hide the benchmarks' own reports (stderr)"
    )
    parser.add_argument("--timeout", type=float, help="seconds per benchmark")
    parser.add_argument(
        "--save", metavar="FILE", help="also write the table as JSON to FILE (any output format)"
    )
    parser.add_argument(
        "--load", metavar="FILE", help="print a table saved with --save or --json; run nothing"
    )
    parser.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    # Internal: run one benchmark in this process and write its rows to a file.
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--emit", help=argparse.SUPPRESS)
    return parser


# -- the child: one benchmark in this process ---------------------------------------------
def _write(path: str, outcome: dict[str, Any]) -> None:
    Path(path).write_text(json.dumps(outcome, ensure_ascii=False))


def run_child(module: str, quick: bool, emit: str) -> int:
    """Import ``module``, call its ``rows(quick)`` and write the outcome to ``emit``:
    ``{"status": "ok", "rows": [...]}``, or ``skipped`` (the module cannot be imported
    here: a missing optional dependency) or ``failed``, with a ``reason``."""
    try:
        benchmark = importlib.import_module(module)
    except ImportError as exc:
        _write(emit, {"status": "skipped", "reason": f"cannot import {module}: {exc}"})
        return 0
    try:
        rows: list[Row] = benchmark.rows(quick)
    except Exception as exc:
        traceback.print_exc()
        _write(emit, {"status": "failed", "reason": f"{type(exc).__name__}: {exc}"})
        return 1
    _write(emit, {"status": "ok", "rows": json.loads(rows_to_json(rows))})
    return 0


# -- the parent: one child per benchmark --------------------------------------------------
def _stop(process: subprocess.Popen[bytes]) -> None:
    """End the child's process group (it may have started competitors or shells)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def _tail(path: Path) -> str:
    try:
        lines = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return lines[-1] if lines else ""


def run_benchmark(
    name: str,
    *,
    quick: bool,
    timeout: float,
    quiet: bool,
    module: str | None = None,
) -> Section:
    """Run benchmark ``name`` (module ``benchmarks.<name>`` unless given) in a child
    interpreter; its rows, or one skipped/failed row saying why."""
    module = module or f"benchmarks.{name}"
    command = [sys.executable, "-m", "benchmarks", "--child", module]
    command += ["--quick"] if quick else []
    status: Literal["ok", "skipped", "failed"]
    with tempfile.TemporaryDirectory(prefix="emelex-benchmarks-") as temp:
        emit = Path(temp) / "rows.json"
        log = Path(temp) / "output.log"
        started = time.perf_counter()
        with open(log, "wb") as sink:
            output = sink if quiet else sys.stderr.fileno()
            sys.stderr.flush()
            process = subprocess.Popen(
                [*command, "--emit", str(emit)],
                cwd=ROOT,
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=output,
                start_new_session=True,
            )
            try:
                code = process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                _stop(process)
                code = None
            except BaseException:
                _stop(process)
                raise
        seconds = time.perf_counter() - started
        outcome: dict[str, Any] = {}
        if emit.exists():
            outcome = json.loads(emit.read_text())
        if code is None:
            status, reason = "failed", f"stopped after the {timeout:.0f} s timeout"
        elif outcome.get("status") == "ok":
            rows = rows_from_json(json.dumps(outcome["rows"]))
            return Section(name, tuple(rows), seconds)
        elif outcome.get("status") == "skipped":
            status, reason = "skipped", str(outcome["reason"])
        else:
            status = "failed"
            reason = str(outcome.get("reason") or f"exit status {code}")
            tail = _tail(log) if quiet else ""
            if tail and tail not in reason:
                reason += f" ({tail})"
    if status == "skipped":
        row = Row.skipped("every measure", reason)
    else:
        row = Row.failed("every measure", reason)
    return Section(name, (row,), seconds, status, reason)


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def machine_description(quick: bool) -> dict[str, Any]:
    machine: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "run": "quick" if quick else "full",
        "CPUs": os.cpu_count(),
        "Python": platform.python_version(),
    }
    for distribution in ("emelex", "trio", "llama-cpp-python"):
        version = _version(distribution)
        if version is not None:
            machine[distribution] = version
    machine["load average at start"] = f"{os.getloadavg()[0]:.2f}"
    return machine


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.child:
        if not args.emit:
            _say("--child needs --emit")
            return 2
        return run_child(args.child, bool(args.quick), args.emit)
    if args.list:
        for name, description in BENCHMARKS.items():
            print(f"{name:16} {description}")
        return 0
    if args.load:
        table = from_json_dict(json.loads(Path(args.load).read_text()))
        _print(table, args)
        return 0
    names = list(BENCHMARKS)
    if args.only:
        names = [name.strip() for name in args.only.split(",") if name.strip()]
        unknown = [name for name in names if name not in BENCHMARKS]
        if unknown or not names:
            _say(
                f"python -m benchmarks: unknown benchmark {', '.join(unknown) or '(none)'}; "
                f"choose from {', '.join(BENCHMARKS)}"
            )
            return 2
    quick = bool(args.quick)
    timeout = args.timeout or (TIMEOUT_QUICK if quick else TIMEOUT_FULL)
    machine = machine_description(quick)
    sections: list[Section] = []
    started = time.perf_counter()
    for index, name in enumerate(names, 1):
        _say(f"== [{index}/{len(names)}] {name} ({'quick' if quick else 'full'}) ==")
        section = run_benchmark(name, quick=quick, timeout=timeout, quiet=bool(args.quiet))
        _say(
            f"== {name}: {section.status}, {len(section.rows)} rows, {section.seconds:.0f} s"
            + (f": {section.detail}" if section.detail else "")
        )
        sections.append(section)
    machine["load average at end"] = f"{os.getloadavg()[0]:.2f}"
    machine["duration"] = f"{math.ceil(time.perf_counter() - started)} s"
    table = Table(tuple(sections), machine)
    if args.save:
        Path(args.save).write_text(format_json(table))
    _print(table, args)
    return 1 if any(section.status == "failed" for section in sections) else 0


def _print(table: Table, args: argparse.Namespace) -> None:
    if args.json:
        sys.stdout.write(format_json(table))
    elif args.markdown:
        sys.stdout.write(format_markdown(table))
    else:
        sys.stdout.write(format_text(table))
    sys.stdout.flush()


if __name__ == "__main__":
    raise SystemExit(main())
