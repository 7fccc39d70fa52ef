"""What a piece of code left running: threads, child processes, Trio tasks (and the
tasks of an asyncio loop opened through trio-asyncio).

Take a :func:`snapshot` before, call :func:`left_behind` after; anything alive then that
was not there before is reported (with a short description), after a grace period for
work that is already on its way out (a thread returning, a child being reaped).
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import attrs
import trio

#: Longest description of one leaked item.
MAX_DESCRIPTION_CHARS = 200
_PROC_SELF = "/proc/self/task"


@attrs.frozen
class Snapshot:
    threads: frozenset[int]
    children: frozenset[int] | None  # None where /proc is unavailable
    tasks: frozenset[trio.lowlevel.Task]
    asyncio_tasks: frozenset[asyncio.Task[Any]] = frozenset()


def _idle_trio_worker(thread: threading.Thread) -> bool:
    """True for a thread of Trio's thread cache waiting for its next job (cached idle
    workers live on for a while; that is not a leak). A cached worker running a job
    (an abandoned ``to_thread`` call) is reported."""
    frame = sys._current_frames().get(thread.ident or -1)
    return (
        frame is not None
        and frame.f_code.co_name == "_work"
        and frame.f_code.co_filename.endswith("_thread_cache.py")
    )


def _live_threads() -> dict[int, threading.Thread]:
    me = threading.get_ident()
    return {
        t.ident: t
        for t in threading.enumerate()
        if t.ident is not None and t.ident != me and t.is_alive() and not _idle_trio_worker(t)
    }


def _children() -> frozenset[int] | None:
    try:
        tids = os.listdir(_PROC_SELF)
    except OSError:
        return None
    pids: set[int] = set()
    for tid in tids:
        try:
            with open(f"{_PROC_SELF}/{tid}/children") as file:
                pids.update(int(pid) for pid in file.read(65_536).split())
        except OSError:
            continue  # the thread ended meanwhile
    return frozenset(pids)


def _walk(task: trio.lowlevel.Task) -> Iterator[trio.lowlevel.Task]:
    yield task
    for nursery in task.child_nurseries:
        for child in nursery.child_tasks:
            yield from _walk(child)


def _tasks() -> frozenset[trio.lowlevel.Task]:
    try:
        root = trio.lowlevel.current_root_task()
    except RuntimeError:
        return frozenset()
    return frozenset(_walk(root)) if root is not None else frozenset()


def _asyncio_tasks() -> frozenset[asyncio.Task[Any]]:
    """The unfinished tasks of the asyncio loop open here through trio-asyncio (only
    when emelex.aio or trio-asyncio is in use: never imported for this)."""
    trio_asyncio = sys.modules.get("trio_asyncio")
    loop = trio_asyncio.current_loop.get() if trio_asyncio is not None else None
    if loop is None or loop.is_closed():
        return frozenset()
    return frozenset(task for task in asyncio.all_tasks(loop) if not task.done())


def snapshot() -> Snapshot:
    return Snapshot(frozenset(_live_threads()), _children(), _tasks(), _asyncio_tasks())


def _process(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as file:
            argv = file.read(MAX_DESCRIPTION_CHARS).replace(b"\0", b" ").strip()
        with open(f"/proc/{pid}/stat", "rb") as file:
            state = file.read(512).rsplit(b")", 1)[-1].split()[0].decode()
    except (OSError, IndexError):
        return f"process {pid}"
    zombie = " (exited, never waited for)" if state == "Z" else ""
    return f"process {pid}{zombie}: {argv.decode(errors='replace')}"[:MAX_DESCRIPTION_CHARS]


def _thread(thread: threading.Thread) -> str:
    frame = sys._current_frames().get(thread.ident or -1)
    where = ""
    if frame is not None:
        where = f" at {frame.f_code.co_filename}:{frame.f_lineno} in {frame.f_code.co_name}"
    return f"thread {thread.name!r}{where}"[:MAX_DESCRIPTION_CHARS]


def _find(before: Snapshot) -> list[str]:
    found = [_thread(t) for ident, t in _live_threads().items() if ident not in before.threads]
    children = _children()
    if children is not None and before.children is not None:
        found += [_process(pid) for pid in sorted(children - before.children)]
    mine = trio.lowlevel.current_task()
    found += [
        f"Trio task {task.name!r}"[:MAX_DESCRIPTION_CHARS]
        for task in _tasks() - before.tasks
        if task is not mine
    ]
    found += [
        f"asyncio task {task.get_name()!r} running {task.get_coro()!r}"[:MAX_DESCRIPTION_CHARS]
        for task in _asyncio_tasks() - before.asyncio_tasks
    ]
    return found


async def left_behind(before: Snapshot, grace: float) -> list[str]:
    """Descriptions of the threads, child processes and Trio tasks alive now that were
    not in ``before``, after waiting up to ``grace`` real seconds for them to end."""
    deadline = time.monotonic() + grace
    while True:
        found = _find(before)
        if not found or time.monotonic() >= deadline:
            return found
        await trio.sleep(0.005)


__all__ = ["Snapshot", "left_behind", "snapshot"]
