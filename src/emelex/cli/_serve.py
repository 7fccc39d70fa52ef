"""``emelex serve --root DIR``: run the Host of a root directory until SIGTERM or Ctrl-C.

Agents are agent packages (directories holding ``agent.toml``, like ``actors/``): every
package directly under ``DIR/agents/``, plus each ``--agent [NAME=]PATH``. A package is
served under its own name unless ``NAME=`` renames it. Every package's model binding
gets the one model of ``--model`` (default: the packaged Gemma 3 270M).

Exit codes: 0 drained and stopped; 2 usage error (bad ``--listen``, a public address
without ``--public`` or TLS); 3 configuration error (a package or the model cannot be
loaded); 4 another Host serves this root; 5 cannot listen (address in use, socket path).
"""

from __future__ import annotations

import argparse
import pathlib
import signal
import sys
from typing import TYPE_CHECKING, Final

import trio

if TYPE_CHECKING:
    from emelex.app import Agent, Harness
    from emelex.service import ServeOptions, Serving

EXIT_OK: Final = 0
EXIT_USAGE: Final = 2
EXIT_CONFIG: Final = 3
EXIT_LOCKED: Final = 4
EXIT_LISTEN: Final = 5


def add_serve_parser(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
) -> argparse.ArgumentParser:
    """Add the ``serve`` subcommand to an ``add_subparsers()`` object."""
    serve = commands.add_parser(
        "serve",
        help="run the Host of a root directory (Unix socket; TCP with --listen)",
        description="Run the Host for DIR: state in DIR/.emelex/, socket DIR/.emelex/host.sock. "
        "Exit codes: 0 stopped, 2 usage, 3 configuration, 4 root held by another Host, "
        "5 cannot listen.",
    )
    serve.add_argument("--root", required=True, metavar="DIR", help="the root directory")
    serve.add_argument(
        "--agent",
        action="append",
        default=[],
        metavar="[NAME=]PATH",
        help="serve the agent package at PATH (as NAME); packages under DIR/agents/ are served too",
    )
    serve.add_argument(
        "--model",
        help="llama:PATH, openai:MODEL or scripted:FILE for every package's binding "
        "(default: packaged Gemma 3 270M)",
    )
    serve.add_argument("--base-url", help="server for openai:MODEL")
    serve.add_argument(
        "--listen",
        metavar="HOST:PORT",
        help="also serve TCP (bearer token in DIR/.emelex/token); port 0 picks one",
    )
    serve.add_argument(
        "--public", action="store_true", help="allow a non-loopback --listen (needs TLS)"
    )
    serve.add_argument("--cert", type=pathlib.Path, help="TLS certificate chain (PEM)")
    serve.add_argument("--key", type=pathlib.Path, help="TLS private key (PEM)")
    serve.add_argument(
        "--ag-ui",
        action="store_true",
        help="also serve AG-UI runs at POST /ag-ui/run on every listener (docs/service/ag-ui.md)",
    )
    serve.add_argument(
        "--grace",
        type=float,
        default=30.0,
        help="seconds SIGTERM waits for queued and running work (default 30)",
    )
    serve.add_argument(
        "--store",
        metavar="DSN",
        help="a PostgreSQL database (postgresql://...) shared with other Hosts; default:"
        " EMELEX_STORE, else the SQLite file under DIR/.emelex (see docs/service/scale-out.md)",
    )
    return serve


def _packages(root: pathlib.Path, specs: list[str]) -> dict[str, pathlib.Path] | str:
    """Package paths by served name (None name: the package's own), or a problem."""
    found: dict[str, pathlib.Path] = {}
    directory = root / "agents"
    candidates: list[tuple[str | None, pathlib.Path]] = []
    if directory.is_dir():
        candidates += [
            (None, path) for path in sorted(directory.iterdir()) if (path / "agent.toml").is_file()
        ]
    for spec in specs:
        given, sep, location = spec.partition("=")
        candidates.append((given if sep else None, pathlib.Path(location if sep else spec)))
    from emelex.app import load_package

    for name, package in candidates:
        if not (package / "agent.toml").is_file():
            return f"{package} is not an agent package (no agent.toml)"
        served = name or load_package(package).agent.name
        if served in found and found[served] != package:
            return f"two packages are named {served!r}: {found[served]} and {package}"
        found[served] = package
    return found


async def _watch_signals(stop: trio.Event) -> None:
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for _ in signals:
            stop.set()


def _announce(serving: Serving) -> None:
    print(f"emelex serve: listening on unix:{serving.socket_path}", flush=True)
    if serving.url is not None:
        print(
            f"emelex serve: listening on {serving.url} (bearer token in {serving.token_path})",
            flush=True,
        )


async def _serve(args: argparse.Namespace, options: ServeOptions) -> int:
    from emelex.app import AppError, load_package
    from emelex.cli._errors import ModelSpecError
    from emelex.cli._models import open_model
    from emelex.cli._render import safe
    from emelex.service import serve

    packages = _packages(options.root, args.agent)
    if isinstance(packages, str):
        print(f"emelex serve: {safe(packages)}", file=sys.stderr)
        return EXIT_CONFIG
    stop = trio.Event()
    try:
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_watch_signals, stop)
                async with open_model(args.model, base_url=args.base_url) as loaded:
                    agents: dict[str, Agent] = {}
                    harnesses: dict[str, Harness] = {}
                    for name, path in packages.items():
                        binding = load_package(path).info.binding
                        package = load_package(path, bindings={binding: loaded.client})
                        # The package's harness brings its built-in tools and workspace
                        # policy, exactly as `emelex run PACKAGE` starts it.
                        agents[name], harnesses[name] = package.agent, package.harness()
                    await serve(options, agents, stop=stop, ready=_announce, harnesses=harnesses)
                nursery.cancel_scope.cancel()
        except BaseExceptionGroup as group:
            raise _sole(group) from None
    except (AppError, ModelSpecError) as exc:
        print(f"emelex serve: {safe(str(exc))}", file=sys.stderr)
        return EXIT_CONFIG
    print("emelex serve: drained and stopped", file=sys.stderr)
    return EXIT_OK


def _sole(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The one error a nursery wrapped (the signal watcher never fails), else the group."""
    leaves: list[BaseException] = []
    pending: list[BaseException] = [group]
    while pending:
        error = pending.pop()
        if isinstance(error, BaseExceptionGroup):
            pending.extend(error.exceptions)
        else:
            leaves.append(error)
    return leaves[0] if len(leaves) == 1 else group


def serve_command(args: argparse.Namespace) -> int:
    from emelex.cli._render import safe
    from emelex.service import HostLocked, ServeError

    try:
        from emelex.service import Listen, ServeOptions, store_from_environment
    except ImportError as exc:  # hypercorn comes with the serve extra
        print(
            f"emelex serve: {safe(str(exc))}; install it with: pip install 'emelex[serve]'",
            file=sys.stderr,
        )
        return EXIT_CONFIG

    try:
        options = ServeOptions(
            root=pathlib.Path(args.root),
            listen=None if args.listen is None else Listen.parse(args.listen),
            public=args.public,
            cert=args.cert,
            key=args.key,
            grace=args.grace,
            store=store_from_environment(args.store),
            ag_ui=args.ag_ui,
        )
        options.check()
    except ServeError as exc:
        print(f"emelex serve: {safe(str(exc))}", file=sys.stderr)
        return EXIT_USAGE
    if not options.root.is_dir():
        print(
            f"emelex serve: the root {safe(str(options.root))} is not a directory", file=sys.stderr
        )
        return EXIT_USAGE
    try:
        return trio.run(_serve, args, options)
    except HostLocked as exc:
        print(f"emelex serve: {safe(str(exc))}", file=sys.stderr)
        return EXIT_LOCKED
    except ServeError as exc:
        print(f"emelex serve: {safe(str(exc))}", file=sys.stderr)
        return EXIT_LISTEN
