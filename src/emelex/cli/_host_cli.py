"""``emelex run|chat|sessions|attach --host ROOT|URL``: sessions on a running Host.

The Host does the work; these commands only send, watch and answer approvals through
:class:`emelex.service.HostClient`. Leaving them (Ctrl-C, a closed terminal, a killed
process) never stops anything on the Host: its turns run on and wait for an answer
from any client, and ``emelex attach`` picks the session up again.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import signal
import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import trio

from emelex._errors import EmelexError
from emelex._text import clip
from emelex.cli._approvals import StdinLines
from emelex.cli._host_connect import TOKEN_ENV, host_client, operation_ref
from emelex.cli._host_follow import Follower, invocation_gone
from emelex.cli._render import bold, dim, safe
from emelex.cli._run import EXIT_CONFIG, EXIT_INTERRUPTED, EXIT_OK, EXIT_TURN_FAILED
from emelex.contracts import QueueSnapshot

if TYPE_CHECKING:
    from emelex.service import HostClient

TITLE_WIDTH = 60
#: Options of a local run that mean nothing to a Host (it owns model, tools and store).
LOCAL_ONLY = {
    "model": "--model",
    "base_url": "--base-url",
    "no_shell": "--no-shell",
    "no_file_tools": "--no-file-tools",
    "allow_reads": "--allow-workspace-reads",
    "allow_tool": "--allow-tool",
    "json": "--json",
    "supervise": "--supervise",
    "trace": "--trace",
    "store": "--store",
    "max_tokens": "--max-tokens",
    "max_rounds": "--max-rounds",
}


def host_usage_problem(args: argparse.Namespace) -> str | None:
    """Why these arguments cannot drive a Host session, or None."""
    for name, flag in LOCAL_ONLY.items():
        if getattr(args, name, None) and not (name == "json" and args.command == "sessions"):
            return f"{flag} applies to local runs; the Host chooses its model, tools and store"
    if args.command == "sessions" and args.action != "list":
        return "with --host only 'list' is available"
    if args.command in ("run", "chat") and not (args.agent or getattr(args, "resume", None)):
        return "--host needs --agent NAME (one of the Host's agents) to start a session"
    return None


def _workspace(args: argparse.Namespace) -> str:
    # A path on the Host's machine; for a local root the current directory is shared.
    return os.path.abspath(args.workspace) if args.workspace else os.getcwd()


def _detached(session_id: str, spec: str) -> None:
    print(
        dim(
            f"\ndetached: the work goes on on the Host; "
            f"follow it with: emelex attach {safe(session_id)} --host {safe(spec)}"
        ),
        file=sys.stderr,
    )


async def _until_interrupt(work: Callable[[], Awaitable[int]]) -> int | None:
    """``work()``'s exit code, or None when Ctrl-C came first (the Host is untouched)."""
    result: int | None = None
    with trio.open_signal_receiver(signal.SIGINT) as signals:
        async with trio.open_nursery() as nursery:

            async def run() -> None:
                nonlocal result
                result = await work()
                nursery.cancel_scope.cancel()

            async def interrupt() -> None:
                async for _ in signals:
                    nursery.cancel_scope.cancel()
                    return

            nursery.start_soon(run)
            nursery.start_soon(interrupt)
    return result


async def _outcome(client: HostClient, session_id: str, invocation_id: str) -> int:
    """The exit code of a finished invocation: 1 when the Host recorded its failure."""
    page = await client.diagnostics(session_id, limit=20)
    for diagnostic in page.diagnostics:
        if diagnostic.invocation_id == invocation_id and diagnostic.kind != "title":
            cause = diagnostic.cause
            print(f"emelex: the turn failed ({cause.code}): {safe(cause.message)}", file=sys.stderr)
            return EXIT_TURN_FAILED
    return EXIT_OK


async def _turn(follower: Follower, text: str) -> int:
    """Send ``text`` and follow its invocation until it leaves the queue."""
    client, session_id = follower.client, follower.session_id
    sent = await client.send(session_id, text, operation=operation_ref())
    # Watching begins after the admission committed, so a snapshot without the
    # invocation means it has finished.
    ended = await follower.follow(invocation_gone(sent.invocation_id))
    if ended != "done":
        print(f"emelex: the Host ended the watch ({ended})", file=sys.stderr)
        return EXIT_CONFIG
    return await _outcome(client, session_id, sent.invocation_id)


async def _create(client: HostClient, args: argparse.Namespace) -> str:
    created = await client.create_session(args.agent, _workspace(args), operation=operation_ref())
    return created.session.id


async def host_command(args: argparse.Namespace) -> int:
    """Entry point of every ``--host`` command; Host errors become exit code 3."""
    from emelex.service import Unauthorized

    try:
        async with host_client(args.host, args.token_file) as client:
            if args.command == "sessions":
                return await _sessions(client, args)
            async with StdinLines() as lines:
                if args.command == "run":
                    return await _run(client, args, lines)
                if args.command == "chat":
                    return await _chat(client, args, lines)
                return await _attach(client, args, lines)
    except Unauthorized:
        print(f"emelex: {_refused(args.host, args.token_file)}", file=sys.stderr)
        return EXIT_CONFIG
    except EmelexError as exc:
        print(f"emelex: {safe(' '.join(str(exc).split()))}", file=sys.stderr)
        return EXIT_CONFIG


def _refused(spec: str, token_file: str | None) -> str:
    """Why a Host URL refused us, naming where the command reads the token from."""
    host = safe(spec)
    if token_file is not None:
        return f"the Host at {host} refused the token in {safe(token_file)}"
    if os.environ.get(TOKEN_ENV):
        return f"the Host at {host} refused the token in ${TOKEN_ENV}"
    return (
        f"the Host at {host} needs its bearer token: give --token-file PATH "
        f"(the Host writes it to ROOT/.emelex/token) or set ${TOKEN_ENV}"
    )


async def _sessions(client: HostClient, args: argparse.Namespace) -> int:
    sessions = await client.sessions()
    if args.json:
        from emelex.contracts import to_wire

        for info in sessions:
            print(json.dumps(to_wire(info)))
        return EXIT_OK
    if not sessions:
        print("no sessions on this Host", file=sys.stderr)
    for info in sessions:
        title = safe(clip(info.title or "", TITLE_WIDTH))
        print(f"{safe(info.id)}  {safe(info.agent)}  {info.state:7}  {title}")
    return EXIT_OK


async def _run(client: HostClient, args: argparse.Namespace, lines: StdinLines) -> int:
    session_id = await _create(client, args)
    print(dim(f"session {safe(session_id)}"), file=sys.stderr)
    follower = Follower(client, session_id, lines, hide_reasoning=args.hide_reasoning)
    code = await _until_interrupt(lambda: _turn(follower, args.prompt))
    if code is None:
        _detached(session_id, args.host)
        return EXIT_INTERRUPTED
    return code


async def _chat(client: HostClient, args: argparse.Namespace, lines: StdinLines) -> int:
    if args.resume:
        session_id = args.resume
        follower = Follower(client, session_id, lines, hide_reasoning=args.hide_reasoning)
        await follower.skip_to_end(keep=0)
    else:
        session_id = await _create(client, args)
        follower = Follower(client, session_id, lines, hide_reasoning=args.hide_reasoning)
    print(dim(f"session {safe(session_id)} on the Host (/exit to leave)"), file=sys.stderr)
    while True:
        print(bold("you>") + " ", end="", file=sys.stderr, flush=True)
        line: str | None = None

        async def read() -> int:
            nonlocal line
            line = await lines.readline()
            return EXIT_OK

        if await _until_interrupt(read) is None:
            print(file=sys.stderr)
            return EXIT_INTERRUPTED
        if line is None or line.strip() in ("/exit", "/quit"):
            return EXIT_OK
        if not line.strip():
            continue
        code = await _until_interrupt(functools.partial(_turn, follower, line))
        if code is None:
            _detached(session_id, args.host)
            return EXIT_INTERRUPTED
        if code == EXIT_CONFIG:
            return code


def _queue_line(queue: QueueSnapshot) -> str:
    running = [e.invocation_id for e in queue.entries if e.state == "running"]
    queued = sum(e.state == "queued" for e in queue.entries)
    if not queue.entries:
        return "queue: idle"
    now = f"running {safe(running[0])}" if running else "nothing running"
    return f"queue: {now}, {queued} queued"


async def _attach(client: HostClient, args: argparse.Namespace, lines: StdinLines) -> int:
    follower = Follower(
        client,
        args.session,
        None if args.no_input else lines,
        show_user=True,
        hide_reasoning=args.hide_reasoning,
    )
    await follower.skip_to_end(keep=args.last)
    last_line = ""

    def on_queue(queue: QueueSnapshot) -> None:
        nonlocal last_line
        line = _queue_line(queue)
        if line != last_line:
            last_line = line
            print(dim(line), file=sys.stderr, flush=True)

    def idle(queue: QueueSnapshot) -> bool:
        return bool(args.until_idle) and not queue.entries

    async def follow() -> int:
        ended = await follower.follow(idle, on_queue)
        if ended == "sessionDeleted":
            print("emelex: the session was deleted", file=sys.stderr)
            return EXIT_CONFIG
        if ended == "closed":
            print(dim("the Host closed the watch"), file=sys.stderr)
        return EXIT_OK

    code = await _until_interrupt(follow)
    if code is None:
        _detached(args.session, args.host)
        return EXIT_INTERRUPTED
    return code
