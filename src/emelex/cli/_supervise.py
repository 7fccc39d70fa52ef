"""``emelex supervise``: show a process's live actor tree from its diagnostics socket."""

from __future__ import annotations

import argparse
import functools
import json
import os
import subprocess
import sys
import tempfile
from typing import Any

import trio

from emelex.cli._render import render_tree, safe
from emelex.runtime._supervisor import DIAGNOSTICS_ENV

EXIT_OK = 0
EXIT_UNREACHABLE = 4
MAX_RESPONSE_BYTES = 16 * 1024 * 1024


class Unreachable(Exception):
    pass


async def fetch_snapshot(path: str) -> dict[str, Any]:
    """One snapshot from the diagnostics socket at ``path`` (bounded response)."""
    try:
        stream = await trio.open_unix_socket(path)
    except OSError as exc:
        raise Unreachable(f"cannot connect to {path}: {exc}") from exc
    async with stream:
        await stream.send_all(b"snapshot\n")
        data = b""
        while not data.endswith(b"\n"):
            chunk = await stream.receive_some(65536)
            if not chunk:
                raise Unreachable(f"{path} closed the connection")
            data += chunk
            if len(data) > MAX_RESPONSE_BYTES:
                raise Unreachable(f"{path} sent more than {MAX_RESPONSE_BYTES} bytes")
    answer: dict[str, Any] = json.loads(data)
    if "error" in answer:
        raise Unreachable(f"{path}: {answer['error']}")
    return answer


def _show(snapshot: dict[str, Any], as_json: bool, clear: bool) -> None:
    if as_json:
        print(json.dumps(snapshot), flush=True)
        return
    if clear:
        print("\x1b[2J\x1b[H", end="")
    print(render_tree(snapshot), flush=True)


async def _watch(path: str, args: argparse.Namespace, process: trio.Process | None) -> int:
    clear = sys.stdout.isatty() and not args.once
    while True:
        try:
            _show(await fetch_snapshot(path), args.json, clear)
        except Unreachable as exc:
            if process is None or (process.returncode is None and args.once):
                print(f"emelex: {safe(str(exc))}", file=sys.stderr)
                return EXIT_UNREACHABLE
        if args.once:
            return EXIT_OK
        with trio.move_on_after(args.interval):
            if process is not None:
                await process.wait()
        if process is not None and process.returncode is not None:
            return process.returncode


async def supervise_command(args: argparse.Namespace) -> int:
    if args.socket:
        return await _watch(args.socket, args, None)
    if not args.program:
        print("emelex supervise: give --socket PATH or -- PROGRAM [ARGS]", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="emelex-supervise-") as directory:
        path = os.path.join(directory, "diagnostics.sock")
        env = {**os.environ, DIAGNOSTICS_ENV: path}
        async with trio.open_nursery() as nursery:
            start = functools.partial(
                trio.run_process, args.program, env=env, check=False, stdin=subprocess.DEVNULL
            )
            process: trio.Process = await nursery.start(start)
            socket = trio.Path(path)
            with trio.move_on_after(args.startup_timeout):
                # The program is another process: polling its socket file is the only signal.
                while not await socket.exists() and process.returncode is None:  # noqa: ASYNC110
                    await trio.sleep(0.05)
            if not await socket.exists():
                await process.wait()
                print("emelex: the program never opened a supervisor", file=sys.stderr)
                return process.returncode if process.returncode else EXIT_UNREACHABLE
            code = await _watch(path, args, process)
            if args.once:
                process.terminate()
            await process.wait()
            return code if args.once else (process.returncode or 0)
