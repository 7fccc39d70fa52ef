"""Helpers of the Temporal tests: worker processes, polling with deadlines."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TypeVar

import trio

from emelex.temporal import SessionSettings, Timeouts, free_port

T = TypeVar("T")

ROOT = Path(__file__).resolve().parents[2]

#: Short enough that a killed worker is noticed (and a cancellation heard) in about a
#: second or two; Temporal heartbeats at 0.8 of this.
FAST = SessionSettings(timeouts=Timeouts(heartbeat=2.0, model=30.0, tool=120.0))


def queue() -> str:
    return f"q{free_port()}"


class Workers:
    """Worker processes of one test; every one is killed when the test ends."""

    def __init__(self, address: str, task_queue: str, workspace: Path, pause: float) -> None:
        self._args = [address, task_queue, str(workspace), str(pause)]
        self._log = workspace / "workers.log"
        self.processes: list[subprocess.Popen[bytes]] = []

    def spawn(self) -> subprocess.Popen[bytes]:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            [str(ROOT / "src"), str(ROOT), env.get("PYTHONPATH", "")]
        )
        with self._log.open("ab") as log:
            process = subprocess.Popen(
                [sys.executable, "-m", "tests.temporal._worker_main", *self._args],
                cwd=ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        self.processes.append(process)
        return process

    def kill(self, process: subprocess.Popen[bytes]) -> None:
        with suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(10)

    def kill_all(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                self.kill(process)


@contextmanager
def worker_processes(
    address: str, task_queue: str, workspace: Path, pause: float = 0.0
) -> Iterator[Workers]:
    workers = Workers(address, task_queue, workspace, pause)
    try:
        yield workers
    finally:
        workers.kill_all()


async def eventually(probe: Callable[[], Awaitable[T | None]], deadline: float = 60.0) -> T:
    """The first non-None value of ``probe()``, polled until ``deadline`` seconds."""
    with trio.fail_after(deadline):
        while True:
            value = await probe()
            if value is not None:
                return value
            await trio.sleep(0.05)


async def file_appears(path: Path, deadline: float = 60.0) -> str:
    async def probe() -> str | None:
        text = await trio.Path(path).read_text() if path.exists() else ""  # noqa: ASYNC240
        return text or None

    return await eventually(probe, deadline)
