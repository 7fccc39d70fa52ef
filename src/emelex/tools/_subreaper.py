"""A tiny process supervisor that runs one shell command and leaves nothing behind.

Run as a script (``python -I -S _subreaper.py GRACE COMMAND``), not imported: it uses the
standard library only, so it starts fast and needs no ``sys.path``. It:

1. marks itself a *child subreaper* (``prctl(PR_SET_CHILD_SUBREAPER)``), so every orphan
   below it (a double fork, a ``setsid``-ed daemon whose parent exited) is re-parented to
   it instead of to init, and stays findable by walking parent links in ``/proc``;
2. spawns ``/bin/sh -c COMMAND`` with default signal dispositions and an empty mask;
3. waits, with signals handled synchronously (``sigtimedwait``), until the shell exits or
   it receives ``SIGTERM``/``SIGINT``/``SIGHUP``;
4. then terminates every remaining descendant, whatever its session or process group:
   ``SIGTERM`` (and ``SIGCONT``) first, ``SIGKILL`` once ``GRACE`` seconds have passed,
   repeating the ``/proc`` scan until no descendant is left (a process that forks while
   being killed has its children re-parented here and found by the next scan);
5. exits with the shell's status: its exit code, or by re-raising the signal that killed it
   (core dumps disabled), so the parent sees the command's own outcome.

The parent (``emelex.tools._process``) kills the whole process group with ``SIGKILL`` only
if this helper does not finish on its own, which would orphan escaped descendants: that
path is a last resort for a wedged helper.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import resource
import signal
import sys
import time

PR_SET_CHILD_SUBREAPER = 36
_STOP = frozenset({signal.SIGTERM, signal.SIGINT, signal.SIGHUP})
_WATCHED = _STOP | {signal.SIGCHLD}
_RESET = (
    signal.SIGPIPE,
    signal.SIGXFSZ,
    signal.SIGCHLD,
    signal.SIGTERM,
    signal.SIGINT,
    signal.SIGHUP,
    signal.SIGQUIT,
)
_GIVE_UP_AFTER = 10.0  # seconds of SIGKILL attempts before exiting anyway (D-state processes)


def _become_subreaper() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:  # pragma: no cover - old kernels
        error = ctypes.get_errno()
        sys.stderr.write(f"emelex subreaper: prctl failed: {os.strerror(error)}\n")


def _descendants(root: int) -> tuple[list[int], list[int]]:
    """``(live, zombies)``: every process below ``root``, found through ``/proc`` ppids."""
    children: dict[int, list[int]] = {}
    states: dict[int, bytes] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                data = handle.read()
        except OSError:
            continue  # exited while scanning
        fields = data[data.rfind(b")") + 2 :].split()
        if len(fields) < 2:
            continue
        pid = int(entry)
        states[pid] = fields[0]
        children.setdefault(int(fields[1]), []).append(pid)
    live: list[int] = []
    zombies: list[int] = []
    pending = list(children.get(root, ()))
    while pending:
        pid = pending.pop()
        (zombies if states.get(pid) in (b"Z", b"X") else live).append(pid)
        pending.extend(children.get(pid, ()))
    return live, zombies


class _Reaper:
    def __init__(self, shell: int) -> None:
        self.shell = shell
        self.status: int | None = None

    def reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid == self.shell:
                self.status = status


def _signal(pid: int, number: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, number)


def _terminate_all(reaper: _Reaper, grace: float) -> None:
    me = os.getpid()
    start = time.monotonic()
    termed: set[int] = set()
    while True:
        reaper.reap()
        live, zombies = _descendants(me)
        if not live and not zombies:
            return
        elapsed = time.monotonic() - start
        if elapsed > grace + _GIVE_UP_AFTER:
            return
        for pid in live:
            if elapsed >= grace:
                _signal(pid, signal.SIGKILL)
            elif pid not in termed:
                termed.add(pid)
                _signal(pid, signal.SIGTERM)
                _signal(pid, signal.SIGCONT)
        signal.sigtimedwait({signal.SIGCHLD}, 0.005 if elapsed < 0.05 else 0.02)


def _exit_like(status: int | None) -> None:
    if status is None:
        os._exit(128 + signal.SIGKILL)
    if os.WIFEXITED(status):
        os._exit(os.WEXITSTATUS(status))
    number = os.WTERMSIG(status)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if number not in (signal.SIGKILL, signal.SIGSTOP):
        signal.signal(number, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {number})
    os.kill(os.getpid(), number)
    os._exit(128 + number)  # the signal's default action does not terminate


def _original_environment() -> dict[bytes, bytes]:
    """The environment this process was started with, byte for byte.

    Read from ``/proc/self/environ`` rather than ``os.environ``: the interpreter may add
    variables at start-up (locale coercion), and the shell must see exactly what the
    caller passed.
    """
    try:
        with open("/proc/self/environ", "rb") as handle:
            raw = handle.read()
    except OSError:
        return {os.fsencode(k): os.fsencode(v) for k, v in os.environ.items()}
    result: dict[bytes, bytes] = {}
    for item in raw.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep and key:
            result[key] = value
    return result


def main(argv: list[str]) -> None:
    if len(argv) != 3:
        sys.stderr.write("usage: _subreaper.py GRACE_SECONDS COMMAND\n")
        os._exit(2)
    grace = float(argv[1])
    command = argv[2]
    signal.pthread_sigmask(signal.SIG_BLOCK, _WATCHED)
    _become_subreaper()
    try:
        shell = os.posix_spawn(
            "/bin/sh",
            ["sh", "-c", command],
            _original_environment(),
            setsigmask=(),
            setsigdef=_RESET,
        )
    except OSError as error:
        sys.stderr.write(f"emelex subreaper: cannot start /bin/sh: {error}\n")
        os._exit(127)
    reaper = _Reaper(shell)
    while True:
        reaper.reap()
        if reaper.status is not None:
            break
        info = signal.sigtimedwait(_WATCHED, 1.0)
        if info is not None and info.si_signo in _STOP:
            break
    _terminate_all(reaper, grace)
    reaper.reap()
    _exit_like(reaper.status)


if __name__ == "__main__":
    main(sys.argv)
