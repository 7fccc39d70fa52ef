"""Command-line options of the commands that drive a running Host (``--host``)."""

from __future__ import annotations

import argparse

from emelex.cli._host_connect import HOST_HELP

TOKEN_FILE_HELP = "file holding the bearer token of a Host URL (e.g. ROOT/.emelex/token)"


def _host_options(command: argparse.ArgumentParser, *, required: bool = False) -> None:
    command.add_argument("--host", metavar="ROOT|URL", required=required, help=HOST_HELP)
    command.add_argument("--token-file", metavar="PATH", help=TOKEN_FILE_HELP)


def add_host_arguments(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    run: argparse.ArgumentParser,
    chat: argparse.ArgumentParser,
    sessions: argparse.ArgumentParser,
) -> None:
    """``--host`` on run, chat and sessions, and the ``attach`` command."""
    _host_options(run)
    _host_options(chat)
    chat.add_argument(
        "--agent", metavar="NAME", help="with --host: the Host's agent to start a session of"
    )
    _host_options(sessions)

    attach = commands.add_parser(
        "attach",
        help="watch a session on a Host (rows, queue, approvals) and answer its approvals",
    )
    attach.add_argument("session", metavar="SESSION", help="the session id")
    _host_options(attach, required=True)
    attach.add_argument(
        "--last", type=int, default=10, metavar="N", help="rows of history to show first (10)"
    )
    attach.add_argument(
        "--until-idle", action="store_true", help="leave once the session's queue is empty"
    )
    attach.add_argument(
        "--no-input", action="store_true", help="never ask: show approvals, let others answer"
    )
    attach.add_argument("--hide-reasoning", action="store_true")
