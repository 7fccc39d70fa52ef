"""``emelex run`` and ``emelex chat``: agent turns in the terminal."""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shlex
import signal
import sys
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
    ApprovalPolicy,
    ModelStarted,
    ToolStarted,
    TurnCancelled,
)
from emelex.app import AppError, Engine, Session
from emelex.cli._approvals import StdinLines, TerminalApprovals, policy_for
from emelex.cli._models import LoadedModel, open_model
from emelex.cli._plain import plain_agent, start_plain_session
from emelex.cli._progress import LoadBar
from emelex.cli._render import TerminalRenderer, bold, dim, event_json, safe
from emelex.cli._store import open_cli_store, store_location
from emelex.cli._trace import open_traced_supervisor
from emelex.cli._tree import print_tree
from emelex.model import Message
from emelex.runtime import Supervisor, open_supervisor
from emelex.store import SessionNotFound, SqliteStore

if TYPE_CHECKING:
    from emelex.app import Agent

EXIT_OK = 0
EXIT_TURN_FAILED = 1
EXIT_USAGE = 2
EXIT_CONFIG = 3
EXIT_INTERRUPTED = 130
#: stdout's reader went away: what a shell reports for a filter ended by SIGPIPE.
EXIT_PIPE_CLOSED = 141
#: The plain run's --max-tokens: small base models never stop alone, so the command
#: line keeps rounds short (the Python API's default is higher, docs/cli.md).
CLI_MAX_TOKENS = 256


def default_store_path() -> str:
    """The default store file (nothing is created; see :mod:`emelex.cli._store`)."""
    return store_location(None).path


def is_package_dir(path: str) -> bool:
    return os.path.isfile(os.path.join(path, "agent.toml"))


def run_usage_problem(agent_dir: str | None, words: list[str]) -> str | None:
    """Why ``emelex run [--agent DIR] WORDS...`` is not a usable command line, or None.

    Exactly one positional, the prompt. A package directory in its place is never
    taken for a prompt (nor guessed to be the package): the message shows ``--agent``.
    """
    first = words[0]
    if is_package_dir(first) and agent_dir is None:
        prompt = shlex.quote(" ".join(words[1:])) if len(words) > 1 else "PROMPT"
        return (
            f"{first!r} is an agent package, not a prompt; run it with: "
            f"emelex run --agent {shlex.quote(first)} {prompt}"
        )
    if len(words) > 1:
        return (
            f"expected one PROMPT, got {len(words)} arguments; quote the prompt: "
            f"emelex run {shlex.quote(' '.join(words))}"
        )
    if is_package_dir(first):
        return f"{first!r} is an agent package, not a prompt; give the prompt after it"
    return None


def _policy(args: argparse.Namespace, lines: StdinLines | None) -> ApprovalPolicy:
    if getattr(args, "allow_reads_alias", False):
        print(
            "emelex: --allow-reads is deprecated; it means --allow-workspace-reads",
            file=sys.stderr,
        )
    reads = bool(args.allow_reads or getattr(args, "allow_reads_alias", False))
    return policy_for(args.allow_tool or (), reads, lines)


async def _start_plain(
    engine: Engine,
    args: argparse.Namespace,
    loaded: LoadedModel,
    policy: ApprovalPolicy,
    history: tuple[Message, ...] = (),
    session_id: str | None = None,
) -> Session:
    """The plain run's session, started by the Engine like every other session."""
    agent, harness = plain_agent(
        loaded.client,
        args.workspace or os.getcwd(),
        policy,
        max_tokens=args.max_tokens or CLI_MAX_TOKENS,
        shell=not args.no_shell,
        file_tools=not args.no_file_tools,
    )
    return await start_plain_session(
        engine,
        agent,
        harness,
        max_rounds=getattr(args, "max_rounds", None) or DEFAULT_MAX_ROUNDS,
        history=history,
        # Only chat --resume gives history, read back from the command's own store.
        committed=True,
        session_id=session_id,
    )


class _Consumer:
    """Shows a turn's events (terminal text or NDJSON) and remembers whether a failure
    was already shown, so it is reported once."""

    def __init__(self, args: argparse.Namespace, policy: ApprovalPolicy) -> None:
        prompted = policy.was_asked if isinstance(policy, TerminalApprovals) else None
        self.renderer = (
            None
            if args.json
            else TerminalRenderer(reasoning=not args.hide_reasoning, prompted=prompted)
        )
        self.tree = bool(getattr(args, "supervise", False))
        #: Set once stdout's reader went away (``| head``): the turn is cancelled and
        #: the command ends quietly, as a Unix filter does on SIGPIPE.
        self.pipe_closed = False
        self.cancellation: AgentCancellation | None = None

    @property
    def failure_shown(self) -> bool:
        return self.pipe_closed or (self.renderer is not None and self.renderer.failure_shown)

    def __call__(self, event: AgentEvent) -> None:
        if self.pipe_closed:
            return
        try:
            self._show(event)
        except BrokenPipeError:
            self.pipe_closed = True
            # Later writes (and the flush at exit) go nowhere instead of failing again.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            if self.cancellation is not None:
                self.cancellation.cancel()

    def _show(self, event: AgentEvent) -> None:
        if self.renderer is None:
            print(event_json(event), flush=True)
            return
        self.renderer(event)
        if self.tree and isinstance(event, ModelStarted | ToolStarted):
            tree = Supervisor.current().snapshot().to_json_dict()
            tree["pid"] = os.getpid()
            print_tree(tree, sys.stderr)


def _failure(consume: _Consumer, exc: BaseException) -> None:
    if not consume.failure_shown:
        print(f"emelex: turn failed: {safe(str(exc))}", file=sys.stderr)


async def _watch_interrupts(
    cancellation: AgentCancellation, interrupted: list[bool], *, task_status: trio.TaskStatus[None]
) -> None:
    with trio.open_signal_receiver(signal.SIGINT) as signals:
        task_status.started()
        async for _ in signals:
            interrupted.append(True)
            cancellation.cancel()
            return


def _cancelled_code(interrupted: list[bool], consume: _Consumer) -> int:
    if consume.pipe_closed:
        return EXIT_PIPE_CLOSED
    return EXIT_INTERRUPTED if interrupted else EXIT_TURN_FAILED


async def _one_turn(session: AgentSession, prompt: str, consume: _Consumer) -> tuple[int, object]:
    """Run one turn with Ctrl-C mapped to a clean cancellation. Returns (exit, result)."""
    cancellation = AgentCancellation()
    consume.cancellation = cancellation
    interrupted: list[bool] = []
    async with trio.open_nursery() as nursery:
        await nursery.start(_watch_interrupts, cancellation, interrupted)
        try:
            turn = await session.run(prompt, cancellation=cancellation, on_event=consume)
        except TurnCancelled as exc:
            return _cancelled_code(interrupted, consume), exc
        except AgentError as exc:
            _failure(consume, exc)
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
    from emelex.app import Engine, McpIntegration, PluginIntegration, load_package

    binding = load_package(args.agent_dir).info.binding
    package = load_package(args.agent_dir, bindings={binding: loaded.client}, approver=policy)
    agent, harness = package.agent, package.harness()
    if args.workspace:
        agent = _bind_workspace(agent, args.workspace)
    if args.max_tokens is not None:  # a limit given on the command line wins
        agent = attrs.evolve(agent, options=attrs.evolve(agent.options, max_tokens=args.max_tokens))
    consume = _Consumer(args, policy)
    engine = Engine(integrations=[McpIntegration(), PluginIntegration()])
    session = await engine.create(agent).harness(harness).start()
    if args.max_rounds is not None:
        session.agent_session.max_rounds = args.max_rounds
    async with session:
        cancellation = AgentCancellation()
        consume.cancellation = cancellation
        interrupted: list[bool] = []
        failure: AgentError | None = None
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
                code = _cancelled_code(interrupted, consume)
            except AgentError as exc:
                failure = exc
                code = EXIT_TURN_FAILED
            # send_and_wait returns once the turn's events are in the stream's channel,
            # not once they are shown. One turn only: closing the session ends the
            # stream after those events, so the pump shows every one (the answer too).
            await session.aclose()
            await pumped.wait()
            nursery.cancel_scope.cancel()
    if failure is not None:
        _failure(consume, failure)
    return code


async def run_command(args: argparse.Namespace) -> int:
    lines = StdinLines() if sys.stdin.isatty() and not args.json else None
    async with open_traced_supervisor("emelex run", args.trace):
        if not args.json:
            print(dim(f"loading {safe(args.model or 'the default model')}…"), file=sys.stderr)
        bar = None if args.json else LoadBar(sys.stderr, "weights")
        async with open_model(args.model, base_url=args.base_url, progress=bar) as loaded:
            if not args.json:
                print(dim(f"model: {safe(loaded.description)}"), file=sys.stderr)
            if getattr(args, "agent_dir", None):
                try:
                    if lines is not None:
                        async with lines:
                            return await _run_package(args, loaded, _policy(args, lines))
                    return await _run_package(args, loaded, _policy(args, None))
                except AppError as exc:
                    print(
                        f"emelex: cannot run the agent package: {safe(str(exc))}", file=sys.stderr
                    )
                    return EXIT_CONFIG
            policy = _policy(args, lines)
            async with Engine() as engine:
                try:
                    session = await _start_plain(engine, args, loaded, policy)
                except (AgentError, AppError) as exc:
                    print(f"emelex: cannot start the session: {safe(str(exc))}", file=sys.stderr)
                    return EXIT_CONFIG
                async with session:
                    turns = session.agent_session
                    if lines is not None:
                        async with lines:
                            code, _ = await _one_turn(turns, args.prompt, _Consumer(args, policy))
                    else:
                        code, _ = await _one_turn(turns, args.prompt, _Consumer(args, policy))
    return code


def _drift(stored: str, current: str) -> list[str]:
    old, new = json.loads(stored), json.loads(current)
    return sorted(key for key in set(old) | set(new) if old.get(key) != new.get(key))


def _resume_settings(args: argparse.Namespace, config: dict[str, object]) -> str:
    """Apply a stored session's settings to ``args`` (the command line wins for the
    model and workspace; a tool the session was stored without stays off) and say, in
    one line, which were kept and which the command line replaced."""
    kept: list[str] = []
    replaced: list[str] = []
    for key, flag in (("model", "model"), ("workspace", "workspace")):
        stored = str(config.get(key) or "") or None
        given = getattr(args, flag)
        same = given == stored or (
            key == "workspace" and given and os.path.realpath(given) == stored
        )
        if given and stored and not same:
            replaced.append(f"{key} {given} (stored: {stored})")
        elif stored:
            setattr(args, flag, stored)
            kept.append(f"{key} {stored}")
    for key, tool in (("no_shell", "shell"), ("no_file_tools", "file tools")):
        if config.get(key):
            setattr(args, key, True)
            kept.append(f"no {tool}")
        elif getattr(args, key):
            replaced.append(f"no {tool} (stored: with {tool})")
        else:
            kept.append(f"with {tool}")
    line = f"keeping its stored settings: {', '.join(kept)}" if kept else "no stored settings"
    if replaced:
        line += f"; from the command line: {', '.join(replaced)}"
    return safe(line)


async def chat_command(args: argparse.Namespace) -> int:
    async with open_supervisor("emelex chat"), open_cli_store(args.store, create=True) as store:
        assert store is not None  # create=True always opens one
        history: tuple[Message, ...] = ()
        stored_authority: str | None = None
        if args.resume:
            try:
                stored = await store.load_session(args.resume)
            except SessionNotFound:
                print(f"emelex: no stored session {safe(args.resume)}", file=sys.stderr)
                return EXIT_CONFIG
            history = stored.messages
            stored_authority = stored.authority
            settings = _resume_settings(args, stored.config)
            print(f"emelex: resuming {safe(args.resume)}, {settings}", file=sys.stderr)
        session_id = args.resume or new_id()
        bar = LoadBar(sys.stderr, "weights")
        async with open_model(args.model, base_url=args.base_url, progress=bar) as loaded:
            print(dim(f"model: {safe(loaded.description)}"), file=sys.stderr)
            lines = StdinLines()
            async with lines:
                policy = _policy(args, lines if sys.stdin.isatty() else None)
                async with Engine() as engine:
                    try:
                        session = await _start_plain(
                            engine, args, loaded, policy, history, session_id
                        )
                    except (AgentError, AppError) as exc:
                        print(
                            f"emelex: cannot start the session: {safe(str(exc))}",
                            file=sys.stderr,
                        )
                        return EXIT_CONFIG
                    async with session:
                        return await _chat_session(
                            session, store, stored_authority, args, loaded, lines, policy
                        )


async def _chat_session(
    session: Session,
    store: SqliteStore,
    stored_authority: str | None,
    args: argparse.Namespace,
    loaded: LoadedModel,
    lines: StdinLines,
    policy: ApprovalPolicy,
) -> int:
    """Check a resumed chat's authority (or store a new chat), then chat."""
    session_id = session.session_id
    snapshot = session.agent_session.authority_snapshot
    if stored_authority is not None:
        if snapshot.to_json() != stored_authority:
            changed = ", ".join(_drift(stored_authority, snapshot.to_json()))
            print(
                f"emelex: refusing to resume {safe(session_id)}: its authority "
                f"drifted ({safe(changed)} changed since it was stored). Start a "
                "new chat, or "
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
    print(dim(f"session {safe(session_id)} (/exit to leave)"), file=sys.stderr)
    return await _chat_loop(session.agent_session, store, session_id, lines, args, policy)


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
    policy: ApprovalPolicy,
) -> int:
    consume = _Consumer(args, policy)
    while True:
        print(bold("you>") + " ", end="", file=sys.stderr, flush=True)
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
        if consume.pipe_closed:  # nobody reads the answers any more
            return EXIT_PIPE_CLOSED
