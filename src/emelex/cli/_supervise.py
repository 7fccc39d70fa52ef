"""``emelex supervise``: show a process's live actor tree from its diagnostics socket.

With ``-- PROGRAM`` the program gets the terminal's stdin (its approval prompts work),
and the tree is drawn where it cannot erase the program's output: in a region reserved
at the bottom of the terminal (``--split``, the default on a terminal), in another file
or terminal (``--tree-file``), or appended after the program's output when stdout is
not a terminal.
"""

from __future__ import annotations

import argparse
import fcntl
import functools
import json
import os
import select
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import termios
from typing import Any

import trio

from emelex.cli._errors import Unreachable
from emelex.cli._render import render_tree, safe
from emelex.cli._tree import LiveTree, tree_lines
from emelex.runtime import DIAGNOSTICS_ENV

EXIT_OK = 0
EXIT_USAGE = 2
EXIT_UNREACHABLE = 4
EXIT_NOT_FOUND = 127
MAX_RESPONSE_BYTES = 16 * 1024 * 1024
#: Most bytes of the program's output relayed per read.
RELAY_CHUNK = 64 * 1024
#: Fewest rows the program keeps in split mode.
MIN_PROGRAM_ROWS = 3


async def fetch_snapshot(path: str) -> dict[str, Any]:
    """One snapshot from the diagnostics socket at ``path`` (bounded response)."""
    try:
        stream = await trio.open_unix_socket(path)
    except OSError as exc:
        raise Unreachable(f"cannot connect to {path}: {exc}") from exc
    async with stream:
        data = b""
        try:
            await stream.send_all(b"snapshot\n")
            while not data.endswith(b"\n"):
                chunk = await stream.receive_some(65536)
                if not chunk:
                    raise Unreachable(f"{path} closed the connection")
                data += chunk
                if len(data) > MAX_RESPONSE_BYTES:
                    raise Unreachable(f"{path} sent more than {MAX_RESPONSE_BYTES} bytes")
        except trio.BrokenResourceError as exc:  # the process went away mid-answer
            raise Unreachable(f"{path}: {exc}") from exc
    try:
        answer: dict[str, Any] = json.loads(data)
    except ValueError as exc:
        raise Unreachable(f"{path} sent something that is not JSON: {exc}") from exc
    if "error" in answer:
        raise Unreachable(f"{path}: {answer['error']}")
    return answer


def _show(snapshot: dict[str, Any], as_json: bool, live: LiveTree | None) -> None:
    if as_json:
        print(json.dumps(snapshot), flush=True)
    elif live is not None:
        live.show(snapshot)
    else:
        print(render_tree(snapshot), flush=True)


def write_all(fd: int, data: bytes) -> None:
    """Write every byte to ``fd`` (blocking; for a worker thread). Waits instead of
    failing when the descriptor was made non-blocking by a process sharing it (the
    program's own prompt reader may do that to the terminal)."""
    view = memoryview(data)
    while view:
        try:
            written = os.write(fd, view)
        except BlockingIOError:
            select.select([], [fd], [], 1.0)
            continue
        view = view[written:]


class SplitScreen:
    """The terminal on ``fd`` split in two: the program's output scrolls in the top rows
    (a DECSTBM scroll region), the tree is redrawn in the ``tree_rows`` bottom rows.

    Every write to the terminal goes through one lock, so a redraw never lands in the
    middle of the program's output. The tree is drawn with the cursor saved and restored,
    so the program's cursor, and with it its output and the echo of what the user types,
    stays in the top region.
    """

    def __init__(self, fd: int, tree_rows: int | None) -> None:
        self.fd = fd
        self._requested = tree_rows
        self.lock = trio.Lock()
        size = os.get_terminal_size(fd)
        self.rows, self.columns = size.lines, size.columns
        self.tree_rows = self._tree_rows(self.rows)
        self.returncode: int | None = None

    def _tree_rows(self, rows: int) -> int:
        wanted = self._requested if self._requested is not None else max(4, min(12, rows // 3))
        return max(0, min(wanted, rows - MIN_PROGRAM_ROWS))

    @property
    def program_rows(self) -> int:
        return self.rows - self.tree_rows

    def window_size(self) -> bytes:
        return struct.pack("HHHH", self.program_rows, self.columns, 0, 0)

    async def write(self, data: bytes) -> None:
        async with self.lock:
            await trio.to_thread.run_sync(write_all, self.fd, data)

    def _reserve(self) -> bytes:
        # Make room below the cursor, then confine scrolling to the top rows. DECSTBM
        # homes the cursor, so save it around the change.
        room = self.tree_rows
        return (
            b"\n" * room
            + (f"\x1b[{room}A".encode() if room else b"")
            + b"\x1b7"
            + f"\x1b[1;{self.program_rows}r".encode()
            + b"\x1b8"
        )

    async def open(self) -> None:
        await self.write(self._reserve())

    def resized(self) -> bool:
        """Re-read the terminal size; True when it changed (the split is redone)."""
        size = os.get_terminal_size(self.fd)
        rows, columns = size.lines, size.columns
        if (rows, columns) == (self.rows, self.columns):
            return False
        self.rows, self.columns = rows, columns
        self.tree_rows = self._tree_rows(rows)
        return True

    async def reserve_again(self) -> None:
        await self.write(b"\x1b7\x1b[r\x1b8" + self._reserve())

    def _frame(self, snapshot: dict[str, Any]) -> bytes:
        # rich styles the tree and crops each row to the width (wide characters
        # included); the rows are placed here, in the region below the program.
        lines = tree_lines(snapshot, self.columns)
        room = self.tree_rows
        if len(lines) > room:
            hidden = len(lines) - room + 1
            more = f"… {hidden} more lines (a taller terminal shows them)"
            lines = [*lines[: room - 1], more[: self.columns]]
        out = ["\x1b7"]
        top = self.program_rows + 1
        for index in range(room):
            line = lines[index] if index < len(lines) else ""
            out.append(f"\x1b[{top + index};1H\x1b[2K{line}")
        out.append("\x1b8")
        return "".join(out).encode("utf-8", "replace")

    async def draw(self, snapshot: dict[str, Any]) -> None:
        if self.tree_rows:
            await self.write(self._frame(snapshot))

    async def close(self, snapshot: dict[str, Any] | None) -> None:
        """Draw the last tree, give the whole screen back and leave the cursor below it."""
        if snapshot is not None:
            await self.draw(snapshot)
        await self.write(b"\x1b7\x1b[r\x1b8" + f"\x1b[{self.rows};1H\n".encode())


async def _relay(master: int, screen: SplitScreen) -> None:
    """Copy the program's output from the pty to the top region until it closes."""
    stream = trio.lowlevel.FdStream(os.dup(master))
    async with stream:
        while True:
            try:
                chunk = await stream.receive_some(RELAY_CHUNK)
            except trio.BrokenResourceError:
                return  # EIO: every holder of the pty's other end has closed it
            if not chunk:
                return
            await screen.write(chunk)


async def _ignore_interrupts(process: trio.Process, *, task_status: trio.TaskStatus[None]) -> None:
    """Ctrl-C reaches the program through the terminal; supervise waits for it to end.
    A second Ctrl-C terminates the program."""
    with trio.open_signal_receiver(signal.SIGINT) as signals:
        task_status.started()
        count = 0
        async for _ in signals:
            count += 1
            if count >= 2 and process.returncode is None:
                process.terminate()


async def _snapshot(path: str) -> dict[str, Any] | None:
    try:
        return await fetch_snapshot(path)
    except Unreachable:
        return None


async def _wait_for_socket(path: str, process: trio.Process, seconds: float) -> bool:
    """Whether the program's diagnostics socket accepts a connection within ``seconds``.

    The program is another process: polling is the only signal. The socket file appears
    when it is bound, a moment before it listens, so a refused connection means "not
    yet", not "unreachable"."""
    socket = trio.Path(path)
    with trio.move_on_after(seconds):
        while process.returncode is None:
            if await socket.exists():
                try:
                    stream = await trio.open_unix_socket(path)
                except OSError:
                    pass
                else:
                    await stream.aclose()
                    return True
            await trio.sleep(0.05)
    return False


async def _split(args: argparse.Namespace, env: dict[str, str], path: str) -> int:
    screen = SplitScreen(sys.stdout.fileno(), args.tree_lines)
    master, slave = os.openpty()
    try:
        fcntl.ioctl(slave, termios.TIOCSWINSZ, screen.window_size())
        sys.stdout.flush()
        await screen.open()
        last: dict[str, Any] | None = None
        try:
            last = await _run_split(args, env, path, screen, master, slave)
        finally:
            slave = -1  # closed once the program started
            with trio.CancelScope(shield=True):
                # Give the terminal back whatever happened (a failed start, Ctrl-C).
                await screen.close(last)
        if last is None:
            print("emelex: the program never opened a supervisor", file=sys.stderr)
        return screen.returncode or 0
    finally:
        os.close(master)
        if slave >= 0:
            os.close(slave)


async def _run_split(
    args: argparse.Namespace,
    env: dict[str, str],
    path: str,
    screen: SplitScreen,
    master: int,
    slave: int,
) -> dict[str, Any] | None:
    """Run the program on a pty whose output is relayed to the top region, redrawing the
    tree below it until the program exits; return the last snapshot drawn."""
    start = functools.partial(
        trio.run_process,
        args.program,
        env=env,
        check=False,
        stdin=None,  # the terminal's own stdin: the program's prompts read it
        stdout=slave,
        stderr=slave,
    )
    last: dict[str, Any] | None = None
    async with trio.open_nursery() as nursery:
        try:
            process: trio.Process = await nursery.start(start)
        finally:
            os.close(slave)  # the program holds it now; EIO on master means it is done
        relayed = trio.Event()

        async def relay() -> None:
            try:
                await _relay(master, screen)
            finally:
                relayed.set()

        nursery.start_soon(relay)
        await nursery.start(_ignore_interrupts, process)
        if await _wait_for_socket(path, process, args.startup_timeout):
            while process.returncode is None:
                if screen.resized():
                    fcntl.ioctl(master, termios.TIOCSWINSZ, screen.window_size())
                    await screen.reserve_again()
                snapshot = await _snapshot(path)
                if snapshot is not None:
                    last = snapshot
                    await screen.draw(snapshot)
                with trio.move_on_after(args.interval):
                    await process.wait()
        await process.wait()
        screen.returncode = process.returncode
        await relayed.wait()
        nursery.cancel_scope.cancel()
    return last


async def _to_file(args: argparse.Namespace, path: str, process: trio.Process) -> int:
    """Draw each tree into ``--tree-file``: redrawn in place on a terminal, appended to a
    regular file; the program keeps the terminal untouched."""
    async with await trio.open_file(args.tree_file, "a", encoding="utf-8") as out:
        tty = await trio.to_thread.run_sync(out.wrapped.isatty)
        while process.returncode is None:
            snapshot = await _snapshot(path)
            if snapshot is not None:
                text = render_tree(snapshot)
                await out.write(("\x1b[2J\x1b[H" if tty else "") + text + "\n\n")
                await out.flush()
            with trio.move_on_after(args.interval):
                await process.wait()
    return process.returncode or 0


async def _watch(path: str, args: argparse.Namespace, process: trio.Process | None) -> int:
    # Redrawing in place is only safe when nothing else writes to this terminal.
    redraw = sys.stdout.isatty() and not args.once and not args.json and process is None
    live = LiveTree(sys.stdout) if redraw else None
    try:
        while True:
            try:
                _show(await fetch_snapshot(path), args.json, live)
            except Unreachable as exc:
                if process is None or (process.returncode is None and args.once):
                    if live is not None:
                        live.close()
                    print(f"emelex: {safe(str(exc))}", file=sys.stderr)
                    return EXIT_UNREACHABLE
            if args.once:
                return EXIT_OK
            with trio.move_on_after(args.interval):
                if process is not None:
                    await process.wait()
            if process is not None and process.returncode is not None:
                return process.returncode
    finally:
        if live is not None:
            live.close()


def _layout(args: argparse.Namespace) -> str:
    if args.once or args.json:
        return "once" if args.once else "stream"
    if args.tree_file:
        return "file"
    if args.split or sys.stdout.isatty():
        return "split"
    return "stream"


async def supervise_command(args: argparse.Namespace) -> int:
    if args.socket:
        return await _watch(args.socket, args, None)
    if not args.program:
        print("emelex supervise: give --socket PATH or -- PROGRAM [ARGS]", file=sys.stderr)
        return EXIT_USAGE
    if shutil.which(args.program[0]) is None:
        print(f"emelex supervise: program not found: {args.program[0]}", file=sys.stderr)
        return EXIT_NOT_FOUND
    layout = _layout(args)
    if layout == "split" and not sys.stdout.isatty():
        print("emelex supervise: --split needs a terminal on stdout", file=sys.stderr)
        return EXIT_USAGE
    with tempfile.TemporaryDirectory(prefix="emelex-supervise-") as directory:
        path = os.path.join(directory, "diagnostics.sock")
        env = {**os.environ, DIAGNOSTICS_ENV: path}
        if layout == "split":
            return await _split(args, env, path)
        async with trio.open_nursery() as nursery:
            # The program shares this process's stdin: its prompts read the terminal.
            stdin = subprocess.DEVNULL if layout == "once" else None
            start = functools.partial(
                trio.run_process, args.program, env=env, check=False, stdin=stdin
            )
            process: trio.Process = await nursery.start(start)
            await nursery.start(_ignore_interrupts, process)
            if not await _wait_for_socket(path, process, args.startup_timeout):
                await process.wait()
                nursery.cancel_scope.cancel()
                print("emelex: the program never opened a supervisor", file=sys.stderr)
                return process.returncode if process.returncode else EXIT_UNREACHABLE
            if layout == "file":
                code = await _to_file(args, path, process)
            else:
                code = await _watch(path, args, process)
            if args.once:
                process.terminate()
            await process.wait()
            nursery.cancel_scope.cancel()
            return code if args.once else (process.returncode or 0)
