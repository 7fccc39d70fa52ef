"""``emelex run`` and ``emelex chat``: agent turns in the terminal."""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import signal
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

import attrs
import trio

from emelex._ids import new_id
from emelex.agent import (
    DEFAULT_MAX_ROUNDS,
    AgentCancellation,
    AgentError,
    AgentEvent,
    AgentSession,
    AgentSessionBuilder,
    ApprovalPolicy,
    ModelStarted,
    ToolStarted,
    TurnCancelled,
)
from emelex.cli._approvals import StdinLines, policy_for
from emelex.cli._models import LoadedModel, open_model
from emelex.cli._render import TerminalRenderer, event_json, render_tree
from emelex.model import GenerationOptions, Message
from emelex.runtime import Supervisor, open_supervisor
from emelex.store import SessionNotFound, SqliteStore, open_sqlite_store

if TYPE_CHECKING:
    from emelex.app import Agent

EXIT_OK = 0
EXIT_TURN_FAILED = 1
EXIT_USAGE = 2
EXIT_CONFIG = 3
EXIT_INTERRUPTED = 130


def default_store_path() -> str:
    home = os.environ.get("EMELEX_HOME") or os.path.join(
        os.environ.get("XDG_DATA_HOME") or os.path.expanduser("~/.local/share"), "emelex"
    )
    os.makedirs(home, exist_ok=True)
    return os.path.join(home, "sessions.db")


def _policy(args: argparse.Namespace, lines: StdinLines | None) -> ApprovalPolicy:
    if getattr(args, "allow_reads_alias", False):
        print(
            "emelex: --allow-reads is deprecated; it means --allow-workspace-reads",
            file=sys.stderr,
        )
    reads = bool(args.allow_reads or getattr(args, "allow_reads_alias", False))
    return policy_for(args.allow_tool or (), reads, lines)


def _builder(
    args: argparse.Namespace, loaded: LoadedModel, policy: ApprovalPolicy
) -> AgentSessionBuilder:
    builder = AgentSession.builder(loaded.client, args.workspace or os.getcwd())
    builder.approval_policy(policy)
    builder.options(GenerationOptions(max_tokens=args.max_tokens))
    builder.max_rounds(getattr(args, "max_rounds", None) or DEFAULT_MAX_ROUNDS)
    if args.no_shell:
        builder.include_shell_tool(False)
    if args.no_file_tools:
        builder.include_file_tools(False)
    return builder


def _consumer(args: argparse.Namespace) -> Callable[[AgentEvent], None]:
    if args.json:

        def emit(event: AgentEvent) -> None:
            print(event_json(event), flush=True)

        return emit
    renderer = TerminalRenderer(reasoning=not args.hide_reasoning)
    if not getattr(args, "supervise", False):
        return renderer

    def with_tree(event: AgentEvent) -> None:
        renderer(event)
        if isinstance(event, ModelStarted | ToolStarted):
            tree = Supervisor.current().snapshot().to_json_dict()
            tree["pid"] = os.getpid()
            print(render_tree(tree), file=sys.stderr, flush=True)

    return with_tree


async def _watch_interrupts(
    cancellation: AgentCancellation, interrupted: list[bool], *, task_status: trio.TaskStatus[None]
) -> None:
    with trio.open_signal_receiver(signal.SIGINT) as signals:
        task_status.started()
        async for _ in signals:
            interrupted.append(True)
            cancellation.cancel()
            return


async def _one_turn(
    session: AgentSession, prompt: str, consume: Callable[[AgentEvent], None]
) -> tuple[int, object]:
    """Run one turn with Ctrl-C mapped to a clean cancellation. Returns (exit, result)."""
    cancellation = AgentCancellation()
    interrupted: list[bool] = []
    async with trio.open_nursery() as nursery:
        await nursery.start(_watch_interrupts, cancellation, interrupted)
        try:
            turn = await session.run_turn(prompt, cancellation, consume)
        except TurnCancelled as exc:
            code = EXIT_INTERRUPTED if interrupted else EXIT_TURN_FAILED
            return code, exc
        except AgentError as exc:
            print(f"emelex: turn failed: {exc}", file=sys.stderr)
            return EXIT_TURN_FAILED, exc
        finally:
            nursery.cancel_scope.cancel()
    return EXIT_OK, turn


def _bind_workspace(agent: Agent, directory: str) -> Agent:
    """``agent`` with the real directory ``directory`` as its workspace instead of the
    private one seeded from the package (what ``Agent.builder().workspace(root)`` gives:
    the root resolved, no seeded files). The package's workspace policy (read-only or
    read-write, hidden paths) applies to the directory. Raises InvalidWorkspaceRoot."""
    from emelex.app import InvalidWorkspaceRoot

    try:
        root = pathlib.Path(directory).resolve(strict=True)
    except (OSError, RuntimeError) as exc:
        raise InvalidWorkspaceRoot(f"workspace {directory!r}: {exc}") from exc
    if not root.is_dir():
        raise InvalidWorkspaceRoot(f"workspace {str(root)!r} is not a directory")
    if agent.files:
        # Never written into a real directory: say what the agent will not find there.
        names = ", ".join(seeded.path for seeded in agent.files)
        print(
            f"emelex: workspace {root}: the package's seeded files are not copied there ({names})",
            file=sys.stderr,
        )
    return attrs.evolve(agent, workspace=root, files=())


async def _run_package(
    args: argparse.Namespace, loaded: LoadedModel, policy: ApprovalPolicy
) -> int:
    """One turn of an agent package through the Engine (its preset, policy and skills),
    events consumed concurrently from the session's bounded stream. ``--workspace``
    binds the session to that directory instead of the package's private workspace."""
    from emelex.app import Engine, McpIntegration, PluginIntegration
    from emelex.app._package import load_agent, package_harness, package_info

    probe = load_agent(args.agent_dir)
    info = package_info(probe)
    binding = info.binding if info is not None else "default"
    agent = load_agent(args.agent_dir, bindings={binding: loaded.client}, approver=policy)
    harness = package_harness(agent)
    if args.workspace:
        agent = _bind_workspace(agent, args.workspace)
    consume = _consumer(args)
    engine = Engine(integrations=[McpIntegration(), PluginIntegration()])
    session = await engine.create(agent).harness(harness).start()
    async with session:
        cancellation = AgentCancellation()
        interrupted: list[bool] = []
        failure: str | None = None
        code = EXIT_OK
        async with trio.open_nursery() as nursery:
            stream = session.events()
            pumped = trio.Event()

            async def pump() -> None:
                async with stream:
                    async for event in stream:
                        consume(event)
                pumped.set()

            nursery.start_soon(pump)
            await nursery.start(_watch_interrupts, cancellation, interrupted)
            try:
                await session.send_and_wait(args.prompt, cancellation=cancellation)
            except TurnCancelled:
                code = EXIT_INTERRUPTED if interrupted else EXIT_TURN_FAILED
            except AgentError as exc:
                failure = f"emelex: turn failed: {exc}"
                code = EXIT_TURN_FAILED
            # send_and_wait returns once the turn's events are in the stream's channel,
            # not once they are shown. One turn only: closing the session ends the
            # stream after those events, so the pump shows every one (the answer too).
            await session.close()
            await pumped.wait()
            nursery.cancel_scope.cancel()
    if failure is not None:
        print(failure, file=sys.stderr)
    return code


async def run_command(args: argparse.Namespace) -> int:
    lines = StdinLines() if sys.stdin.isatty() and not args.json else None
    async with open_supervisor("emelex run"):
        if not args.json:
            print(f"\x1b[2mloading {args.model or 'the default model'}…\x1b[0m", file=sys.stderr)
        async with open_model(args.model, base_url=args.base_url) as loaded:
            if not args.json:
                print(f"\x1b[2mmodel: {loaded.description}\x1b[0m", file=sys.stderr)
            if getattr(args, "agent_dir", None):
                from emelex.app import AppError

                try:
                    if lines is not None:
                        async with lines:
                            return await _run_package(args, loaded, _policy(args, lines))
                    return await _run_package(args, loaded, _policy(args, None))
                except AppError as exc:
                    print(f"emelex: cannot run the agent package: {exc}", file=sys.stderr)
                    return EXIT_CONFIG
            try:
                session = _builder(args, loaded, _policy(args, lines)).build()
            except AgentError as exc:
                print(f"emelex: cannot start the session: {exc}", file=sys.stderr)
                return EXIT_CONFIG
            with session:
                if lines is not None:
                    async with lines:
                        code, _ = await _one_turn(session, args.prompt, _consumer(args))
                else:
                    code, _ = await _one_turn(session, args.prompt, _consumer(args))
    return code


def _drift(stored: str, current: str) -> list[str]:
    old, new = json.loads(stored), json.loads(current)
    return sorted(key for key in set(old) | set(new) if old.get(key) != new.get(key))


async def chat_command(args: argparse.Namespace) -> int:
    store_path = args.store or default_store_path()
    async with open_supervisor("emelex chat"), open_sqlite_store(store_path) as store:
        history: tuple[Message, ...] = ()
        config: dict[str, object] = {}
        if args.resume:
            try:
                stored = await store.load_session(args.resume)
            except SessionNotFound:
                print(f"emelex: no stored session {args.resume}", file=sys.stderr)
                return EXIT_CONFIG
            history = stored.messages
            config = stored.config
            args.model = args.model or str(config.get("model") or "") or None
            args.workspace = args.workspace or str(config.get("workspace") or "") or None
            args.no_shell = args.no_shell or bool(config.get("no_shell"))
            args.no_file_tools = args.no_file_tools or bool(config.get("no_file_tools"))
        session_id = args.resume or new_id()
        async with open_model(args.model, base_url=args.base_url) as loaded:
            print(f"\x1b[2mmodel: {loaded.description}\x1b[0m", file=sys.stderr)
            lines = StdinLines()
            async with lines:
                policy = _policy(args, lines if sys.stdin.isatty() else None)
                builder = _builder(args, loaded, policy).history(history).session_id(session_id)
                try:
                    snapshot = builder.authority_snapshot()
                except AgentError as exc:
                    print(f"emelex: cannot start the session: {exc}", file=sys.stderr)
                    return EXIT_CONFIG
                if args.resume:
                    if snapshot.to_json() != stored.authority:
                        changed = ", ".join(_drift(stored.authority, snapshot.to_json()))
                        print(
                            f"emelex: refusing to resume {session_id}: its authority drifted "
                            f"({changed} changed since it was stored). Start a new chat, or "
                            "restore the original workspace and tools.",
                            file=sys.stderr,
                        )
                        return EXIT_CONFIG
                else:
                    config = {
                        "model": loaded.spec,
                        "workspace": snapshot.workspace.path,
                        "no_shell": bool(args.no_shell),
                        "no_file_tools": bool(args.no_file_tools),
                    }
                    await store.create_session(session_id, snapshot.to_json(), config)
                print(f"\x1b[2msession {session_id} (/exit to leave)\x1b[0m", file=sys.stderr)
                with builder.build() as session:
                    return await _chat_loop(session, store, session_id, lines, args)


async def _read_or_interrupt(lines: StdinLines) -> tuple[str | None, bool]:
    """The next input line, or (None, True) if Ctrl-C came first."""
    line: str | None = None
    interrupted = False
    with trio.open_signal_receiver(signal.SIGINT) as signals:
        async with trio.open_nursery() as nursery:

            async def read() -> None:
                nonlocal line
                line = await lines.readline()
                nursery.cancel_scope.cancel()

            async def interrupt() -> None:
                nonlocal interrupted
                async for _ in signals:
                    interrupted = True
                    nursery.cancel_scope.cancel()
                    return

            nursery.start_soon(read)
            nursery.start_soon(interrupt)
    return line, interrupted


async def _chat_loop(
    session: AgentSession,
    store: SqliteStore,
    session_id: str,
    lines: StdinLines,
    args: argparse.Namespace,
) -> int:
    consume = _consumer(args)
    while True:
        print("\x1b[1myou>\x1b[0m ", end="", file=sys.stderr, flush=True)
        line, interrupted = await _read_or_interrupt(lines)
        if interrupted:
            print(file=sys.stderr)
            return EXIT_INTERRUPTED
        if line is None or line.strip() in ("/exit", "/quit"):
            return EXIT_OK
        if not line.strip():
            continue
        before = len(session.history)
        await _one_turn(session, line, consume)
        committed = session.history[before:]
        if committed:
            # Exactly what the session committed (a whole turn, or its checkpoint).
            await store.append_turn(session_id, new_id(), committed)
