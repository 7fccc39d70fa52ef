"""The ``emelex`` command: run and chat with terminal approvals, stored sessions, the
live supervisor tree.

Exit codes: 0 success; 1 the turn failed; 2 usage error; 3 configuration error (model
spec, session build, authority drift, unknown session); 4 diagnostics unreachable;
130 interrupted (Ctrl-C); 141 stdout's reader went away (``| head``), quietly.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import trio

from emelex._version import __version__

STORE_HELP = (
    "session store: a SQLite file, or a directory holding sessions.db "
    "(default: ~/.local/share/emelex/sessions.db)"
)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="emelex", description="Trio-native agent harness: run agents, inspect them."
    )
    parser.add_argument("--version", action="version", version=f"emelex {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)

    def model_options(command: argparse.ArgumentParser) -> None:
        command.add_argument(
            "--model",
            help="llama:PATH, openai:MODEL or scripted:FILE (default: packaged Gemma 3 270M)",
        )
        command.add_argument("--base-url", help="server for openai:MODEL")
        command.add_argument("--workspace", help="workspace directory (default: current)")
        command.add_argument("--no-shell", action="store_true", help="do not offer the shell")
        command.add_argument("--no-file-tools", action="store_true", help="no file tools")
        command.add_argument(
            "--allow-workspace-reads",
            dest="allow_reads",
            action="store_true",
            help="approve read-only file tool calls inside the workspace this run "
            "(never likely-secret or outside paths: those still ask, or are denied)",
        )
        command.add_argument(  # the old name, kept as a deprecated alias
            "--allow-reads", dest="allow_reads_alias", action="store_true", help=argparse.SUPPRESS
        )
        command.add_argument(
            "--allow-tool", action="append", metavar="NAME", help="approve NAME this run"
        )
        command.add_argument("--json", action="store_true", help="print events as NDJSON")
        command.add_argument("--hide-reasoning", action="store_true")
        command.add_argument(
            "--verbose",
            action="store_true",
            help="log emelex's and llama.cpp's messages (INFO) on stderr, e.g. the "
            "CPU buffer types chosen",
        )
        # No argparse defaults: with --agent a package's own limits stay unless a flag
        # is given (the plain run fills in 256 and 16 itself, cli/_run.py).
        command.add_argument(
            "--max-tokens",
            type=_positive_int,
            help="most tokens per model round (default 256, or the --agent package's; "
            "base models never stop alone)",
        )
        command.add_argument(
            "--max-rounds",
            type=_positive_int,
            help="most model rounds per turn; a model still calling tools after them "
            "fails the turn (default 16, or the --agent package's)",
        )

    run = commands.add_parser("run", help="run one agent turn")
    model_options(run)
    run.add_argument("--supervise", action="store_true", help="show the turn's actor tree")
    run.add_argument(
        "--trace",
        metavar="FILE",
        help="write the run's OpenTelemetry spans to FILE as OTLP-JSON (extra 'tracing')",
    )
    run.add_argument(
        "--agent",
        dest="agent_dir",
        metavar="DIR",
        help="run the agent package in DIR (see actors/) instead of the plain session",
    )
    # One positional, always the prompt: extra words get a usage error, never a guess.
    run.add_argument("prompt", metavar="PROMPT", help="the prompt (quote it)")
    run.add_argument("extra", nargs="*", default=[], help=argparse.SUPPRESS)

    chat = commands.add_parser("chat", help="a multi-turn session, stored turn by turn")
    model_options(chat)
    chat.add_argument("--resume", metavar="ID", help="continue a stored session")
    chat.add_argument("--store", metavar="PATH", help=STORE_HELP)

    sessions = commands.add_parser("sessions", help="stored sessions")
    sessions.add_argument(
        "action", nargs="?", default="list", choices=["list", "show", "export", "delete"]
    )
    sessions.add_argument("id", nargs="?")
    sessions.add_argument("--store", metavar="PATH", help=STORE_HELP)
    sessions.add_argument("--json", action="store_true")

    supervise = commands.add_parser("supervise", help="show a process's live actor tree")
    supervise.add_argument("--socket", help="diagnostics socket of a running process")
    supervise.add_argument("--once", action="store_true", help="print one snapshot and exit")
    supervise.add_argument("--json", action="store_true")
    supervise.add_argument("--interval", type=float, default=0.5)
    supervise.add_argument("--startup-timeout", type=float, default=30.0)
    supervise.add_argument(
        "--split",
        action="store_true",
        help="keep the tree in rows reserved at the bottom of the terminal, below the "
        "program's output (the default when stdout is a terminal)",
    )
    supervise.add_argument(
        "--tree-file",
        metavar="PATH",
        help="draw the tree into PATH (another terminal, or a file it is appended to) and "
        "leave this terminal to the program",
    )
    supervise.add_argument(
        "--tree-lines", type=_positive_int, metavar="N", help="rows of the tree in --split"
    )
    supervise.add_argument("program", nargs=argparse.REMAINDER)

    demo = commands.add_parser(
        "demo",
        help="one guided agent turn on the packaged model: tool calls, an approval, an answer",
    )
    demo.add_argument("prompt", nargs="?", help="the prompt (default: asks about todo.txt)")
    demo.add_argument("--model", help="llama:PATH or openai:MODEL instead of the packaged Gemma")
    demo.add_argument("--base-url", help="server for openai:MODEL")
    demo.add_argument("--workspace", help="use this directory instead of a fresh demo folder")
    demo.add_argument(
        "--max-tokens", type=int, default=128, help="most tokens per tool-call round (default 128)"
    )
    demo.add_argument("--no-tree", action="store_true", help="do not print the actor tree")
    demo.add_argument(
        "--no-input", action="store_true", help="never ask on the terminal; approve with a note"
    )

    doctor = commands.add_parser("doctor", help="check this installation, line by line")
    doctor.add_argument("--json", action="store_true", help="print one JSON document")
    doctor.add_argument(
        "--workspace", help="directory to check for leftovers of killed writes (default: current)"
    )
    doctor.add_argument(
        "--probe",
        action="store_true",
        help="run llama.cpp's CPU buffer-type probe now (and cache its verdict)",
    )

    from emelex.cli._agents import add_agents_parser

    add_agents_parser(commands)
    from emelex.cli._host_args import add_host_arguments  # issue 15: sessions on a Host

    add_host_arguments(commands, run, chat, sessions)

    from emelex.cli._serve import add_serve_parser

    add_serve_parser(commands)
    return parser


def _host_main(args: argparse.Namespace) -> int:
    """``--host``: the command drives a session on a running Host (cli/_host_cli.py)."""
    from emelex.cli._host_cli import host_command, host_usage_problem

    if args.command == "run":
        if args.extra:
            print("emelex run: quote the prompt (one argument)", file=sys.stderr)
            return 2
        args.agent = args.agent_dir  # on a Host, --agent names one of its agents
    problem = host_usage_problem(args)
    if problem is not None:
        print(f"emelex {args.command}: {problem}", file=sys.stderr)
        return 2
    try:
        return trio.run(host_command, args)
    except KeyboardInterrupt:
        return 130


def _log_to_stderr() -> None:
    """--verbose: emelex's log (llama.cpp's warnings included) at INFO on stderr."""
    import logging

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("\x1b[2m%(name)s: %(message)s\x1b[0m"))
    root = logging.getLogger("emelex")
    root.addHandler(handler)
    root.setLevel(logging.INFO)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if getattr(args, "host", None) or args.command == "attach":
        return _host_main(args)
    if getattr(args, "agent", None) and args.command == "chat":
        print("emelex chat: --agent NAME needs --host", file=sys.stderr)
        return 2
    if args.command == "run":
        from emelex.cli._run import run_usage_problem

        problem = run_usage_problem(args.agent_dir, [args.prompt, *args.extra])
        if problem is not None:
            print(f"emelex run: {problem}", file=sys.stderr)
            return 2
    if args.command == "run" and args.trace:
        from emelex.cli._trace import trace_problem

        problem = trace_problem(args.trace)
        if problem is not None:
            print(f"emelex run: {problem}", file=sys.stderr)
            return 2
    if getattr(args, "program", None) and args.program[:1] == ["--"]:
        args.program = args.program[1:]
    if args.command == "sessions" and args.action != "list" and not args.id:
        print("emelex sessions: this action needs a session id", file=sys.stderr)
        return 2
    if getattr(args, "verbose", False):
        _log_to_stderr()
    from emelex.cli._errors import ModelSpecError
    from emelex.cli._render import safe
    from emelex.store import StoreCorrupt, StoreError

    try:
        if args.command == "doctor":
            from emelex.cli._doctor import doctor_command

            return trio.run(doctor_command, args)
        if args.command == "run":
            from emelex.cli._run import run_command

            return trio.run(run_command, args)
        if args.command == "chat":
            from emelex.cli._run import chat_command

            return trio.run(chat_command, args)
        if args.command == "sessions":
            from emelex.cli._sessions import sessions_command

            return trio.run(sessions_command, args)
        if args.command == "demo":
            from emelex.cli._demo import DEFAULT_PROMPT, demo_command

            args.prompt = args.prompt or DEFAULT_PROMPT
            return demo_command(args)
        if args.command == "agents":
            from emelex.cli._agents import agents_command

            return agents_command(args)
        if args.command == "serve":
            from emelex.cli._serve import serve_command

            return serve_command(args)
        from emelex.cli._supervise import supervise_command

        return trio.run(supervise_command, args)
    except (ModelSpecError, StoreError) as exc:
        line = " ".join(str(exc).split())
        if isinstance(exc, StoreCorrupt) and exc.session_id is not None:
            line += f" (emelex sessions delete {exc.session_id} removes that session)"
        print(f"emelex: {safe(line)}", file=sys.stderr)
        return 3
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader of our output went away (e.g. `| head`): stop quietly, with the
        # status a shell gives a filter ended by SIGPIPE.
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
