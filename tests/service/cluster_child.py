"""One Host process of the failover trials (test_failover.py), on a shared PostgreSQL.

Commands arrive on stdin, one a line: ``CREATE op``, ``SEND session op text``, ``WATCH
session``. It prints ``READY pid``, ``SESSION id``, ``RECEIPT op invocation``, ``ERROR op
why`` and, for watched sessions, ``ROW sequence index`` for each row it is handed, until
it is killed (or stdin closes). Lease abandonments are logged on stderr.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import traceback
from pathlib import Path

import trio

from emelex.agent import DenyAll
from emelex.app import Agent, RestartMode
from emelex.contracts import RowsPublished, WatchEnded
from emelex.service import Host, ScaleOut
from emelex.testing import Say, ScriptedModel, Wait


def cluster_agent(
    turn_seconds: float, turns: int = 400, on_restart: RestartMode = "resume"
) -> Agent:
    rounds = [[Say(f"working {n} "), Wait(turn_seconds), Say("done")] for n in range(turns)]
    model = ScriptedModel(rounds)  # type: ignore[arg-type]
    builder = Agent.builder().name("helper").instructions("Work.").model(model)
    return builder.approver(DenyAll()).on_restart(on_restart).build()


def report(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


async def watch(host: Host, session_id: str) -> None:
    async with host.watch(session_id) as updates:
        async for update in updates:
            if isinstance(update, RowsPublished):
                for row in update.rows:
                    position = row.position
                    report(f"ROW {position.source_sequence} {position.item_index}")
            elif isinstance(update, WatchEnded):
                report(f"WATCHEND {update.reason}")
                return


async def known(host: Host, session_id: str) -> None:
    """Until this Host knows a session another one created (it learns of it through the
    database), as a client retrying ``UnknownSession`` would."""
    with trio.fail_after(30):
        while all(s.id != session_id for s in await host.sessions()):  # noqa: ASYNC110
            await trio.sleep(0.05)


async def command(host: Host, nursery: trio.Nursery, line: str, workspace: Path) -> None:
    parts = line.split(" ", 3)
    try:
        if parts[0] == "CREATE":
            created = await host.create_session("helper", workspace, operation=parts[1])
            report(f"SESSION {created.session.id}")
        elif parts[0] == "SEND":
            await known(host, parts[1])
            receipt = await host.send(parts[1], parts[3], operation=parts[2])
            report(f"RECEIPT {parts[2]} {receipt.invocation_id}")
        elif parts[0] == "WATCH":
            await known(host, parts[1])
            nursery.start_soon(watch, host, parts[1])
    except Exception as exc:  # reported to the driving test, which decides
        report(f"ERROR {parts[2] if len(parts) > 2 else parts[0]} {type(exc).__name__}: {exc}")


def task_tree(task: trio.lowlevel.Task, depth: int = 0) -> list[str]:
    """Where ``task`` and every task under it wait, indented by nesting."""
    pad = "  " * depth
    lines = [f"{pad}task {task.name}"]
    for frame, lineno in task.iter_await_frames():
        code = frame.f_code
        if f"{os.sep}trio{os.sep}" not in code.co_filename:  # Trio's own frames say little
            lines.append(f"{pad}  {code.co_filename}:{lineno} in {code.co_name}")
    for nursery in task.child_nurseries:
        for child in nursery.child_tasks:
            lines.extend(task_tree(child, depth + 1))
    return lines


async def dump_tasks_on_request() -> None:
    """On SIGUSR1, print every task's await stack on stderr: the driving test asks for
    it when an answer is late, so a hang names where it waits."""
    with trio.open_signal_receiver(signal.SIGUSR1) as signals:
        async for _ in signals:
            try:
                lines = task_tree(trio.lowlevel.current_root_task())  # type: ignore[arg-type]
            except Exception:  # a diagnostic never ends the Host
                lines = traceback.format_exc().splitlines()
            sys.stderr.write("BEGIN TASKS\n" + "\n".join(lines) + "\nEND TASKS\n")
            sys.stderr.flush()


async def main(
    dsn: str,
    root: Path,
    workspace: Path,
    lease: float,
    turn_seconds: float,
    on_restart: RestartMode = "resume",
) -> None:
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    options = ScaleOut(lease_seconds=lease, catch_up_seconds=0.2)
    agents = {"helper": cluster_agent(turn_seconds, on_restart=on_restart)}
    async with Host.open(root, agents=agents, store=dsn, scale_out=options) as host:
        report(f"READY {os.getpid()}")
        stdin = trio.lowlevel.FdStream(os.dup(0))
        buffer = b""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(dump_tasks_on_request)
            while chunk := await stdin.receive_some(65536):
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    nursery.start_soon(command, host, nursery, line.decode(), workspace)
            nursery.cancel_scope.cancel()


if __name__ == "__main__":
    trio.run(
        main,
        sys.argv[1],
        Path(sys.argv[2]),
        Path(sys.argv[3]),
        float(sys.argv[4]),
        float(sys.argv[5]),
        "settle" if sys.argv[6:] == ["settle"] else "resume",
    )
