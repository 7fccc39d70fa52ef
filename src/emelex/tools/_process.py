"""The host shell runner under the ``shell`` tool: bounded output, nothing left running.

``run_shell`` is not a sandbox. It gives a command a scrubbed environment, no stdin, its
own session and process group, and a supervisor (:mod:`emelex.tools._subreaper`) that is
a child subreaper: when the command finishes, times out or the caller is cancelled, every
process it started is terminated (``SIGTERM``, then ``SIGKILL`` after a grace period),
including members of the group, ``setsid``-ed daemons and double-forked orphans.
Output is drained continuously into a bounded head and a bounded tail per stream, so a
chatty command never blocks on a full pipe and never grows memory.

Trio's ``run_process`` does none of this (it signals only the direct child and buffers
output without limit), so the process is driven by hand through
``trio.lowlevel.open_process``.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import math
import os
import secrets
import signal as _signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence

import attrs
import trio

from emelex._errors import LimitExceeded
from emelex.tools._drain import drain
from emelex.tools._errors import (
    ShellCleanupError,
    ShellCommandRejected,
    ShellError,
    ShellSpawnError,
)

MAX_TIMEOUT_SECONDS = 20 * 60.0
"""Hard ceiling on a shell timeout; larger values raise ``LimitExceeded``."""
DEFAULT_KILL_GRACE = 2.0
"""Seconds between ``SIGTERM`` and ``SIGKILL`` when the process tree is stopped."""
MAX_KILL_GRACE = 60.0
MAX_OUTPUT_BYTES = 16 * 1024 * 1024
"""Ceiling on ``output_bytes`` (captured bytes kept per stream)."""
MAX_COMMAND_BYTES = 100_000
"""Longest accepted command text (Linux limits one argument to 128 KiB)."""
FALLBACK_PATH: tuple[str, ...] = ("/usr/local/bin", "/usr/bin", "/bin")
"""Appended to the sanitized ``PATH`` when missing, in this order."""
LOCALE = "C.UTF-8"

_PIPE_SIZE = 1024 * 1024
_HELPER_MARGIN = 3.0  # time the helper gets beyond the grace to scan and exit
_KILL_WAIT = 5.0  # after SIGKILL to the group
_DRAIN_AFTER_EXIT = 2.0  # pipes still open after the helper exited: stop reading then
_SWEEP_ROUNDS = 50  # /proc scans after a helper death (a forking escapee needs several)
_MAX_FDS_SCANNED = 4096  # per process, when looking for holders of the output pipes
_MAX_ENVIRON_BYTES = 4 * 1024 * 1024  # per process, when looking for a run's marker
RUN_MARKER = "EMELEX_SHELL_RUN"
"""Environment variable every command of one ``run_shell`` call inherits, with a random
value: after the helper's death the sweep kills every process of ours still carrying it."""
_HELPER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_subreaper.py")


# -- environment ------------------------------------------------------------------------


def _safe_directory(value: str) -> bool:
    return (
        value.startswith("/")
        and "\0" not in value
        and ".." not in value.split("/")
        and ":" not in value
    )


def sanitize_path(path: str | None) -> tuple[str, ...]:
    """The usable entries of a ``PATH`` value, then :data:`FALLBACK_PATH`, deduplicated.

    Entries that are relative, empty or contain a ``..`` component are dropped: a
    relative entry would make command lookup depend on the working directory.
    """
    entries: list[str] = []
    for entry in (path or "").split(":"):
        if _safe_directory(entry) and entry not in entries:
            entries.append(entry)
    for entry in FALLBACK_PATH:
        if entry not in entries:
            entries.append(entry)
    return tuple(entries)


def build_shell_environment(path: str | None, home: str | None) -> dict[str, str]:
    """A fresh environment for shell commands: nothing inherited but vetted PATH/HOME.

    ``path`` and ``home`` are the values captured when the session was built (typically
    ``os.environ.get("PATH")``/``("HOME")``). ``HOME`` is kept only when absolute and free
    of ``..``; ``PATH`` keeps its absolute non-traversing entries plus fixed fallbacks. The
    locale is always ``C.UTF-8``.
    """
    environment = {"PATH": ":".join(sanitize_path(path))}
    if home is not None and _safe_directory(home):
        environment["HOME"] = home
    environment["LANG"] = LOCALE
    environment["LC_ALL"] = LOCALE
    return environment


@attrs.frozen
class ShellEnvironmentDigest:
    """Domain-separated sha256 digests of ``PATH`` and ``HOME`` for the authority snapshot.

    Resuming compares digests, so PATH order or HOME drift is detected without storing raw
    directory names. ``home_sha256`` is ``None`` when the environment has no ``HOME``.
    """

    path_sha256: str
    home_sha256: str | None


def _domain_digest(domain: str, value: str) -> str:
    return hashlib.sha256(
        domain.encode() + b"\0" + value.encode("utf-8", "surrogateescape")
    ).hexdigest()


def environment_digest(environment: Mapping[str, str]) -> ShellEnvironmentDigest:
    """Digest the ``PATH`` and ``HOME`` of an environment from :func:`build_shell_environment`."""
    home = environment.get("HOME")
    return ShellEnvironmentDigest(
        _domain_digest("emelex.shell.path", environment.get("PATH", "")),
        None if home is None else _domain_digest("emelex.shell.home", home),
    )


# -- output capture ---------------------------------------------------------------------


@attrs.frozen
class CapturedOutput:
    """Bounded capture of one stream: the first and last bytes, and how many there were.

    ``head`` holds the first bytes, ``tail`` the last ones; ``omitted_bytes`` were dropped
    between them. Both are raw bytes; :meth:`text` decodes for display.
    """

    head: bytes
    tail: bytes
    total_bytes: int

    @property
    def omitted_bytes(self) -> int:
        return self.total_bytes - len(self.head) - len(self.tail)

    @property
    def truncated(self) -> bool:
        return self.omitted_bytes > 0

    def text(self) -> str:
        """Head and tail decoded as UTF-8 (invalid bytes replaced), with a gap marker."""
        head = self.head.decode("utf-8", "replace")
        if not self.truncated:
            return head + self.tail.decode("utf-8", "replace")
        tail = self.tail.decode("utf-8", "replace")
        return f"{head}\n[... {self.omitted_bytes} bytes omitted ...]\n{tail}"


class _Capture:
    """Keeps the first ``head_limit`` and the last ``tail_limit`` bytes of a stream."""

    def __init__(self, limit: int) -> None:
        self.head_limit = limit // 2
        self.tail_limit = limit - self.head_limit
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def feed(self, chunk: bytes | bytearray | memoryview) -> None:
        self.total += len(chunk)
        room = self.head_limit - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if not chunk or self.tail_limit == 0:
            return
        if len(chunk) >= self.tail_limit:
            self.tail[:] = chunk[-self.tail_limit :]
            return
        self.tail += chunk
        if len(self.tail) > 2 * self.tail_limit:  # trim lazily: amortized O(1) per byte
            del self.tail[: len(self.tail) - self.tail_limit]

    def result(self) -> CapturedOutput:
        tail = bytes(self.tail[-self.tail_limit :]) if self.tail_limit else b""
        return CapturedOutput(bytes(self.head), tail, self.total)


async def _drain(stream: trio.abc.ReceiveStream, capture: _Capture) -> None:
    await drain(stream, capture.feed)


def _enlarge_pipe(stream: object) -> None:
    fileno = getattr(stream, "fileno", None)
    if fileno is None:
        return
    # unprivileged and above /proc/sys/fs/pipe-max-size: keep the default size
    with contextlib.suppress(OSError):
        fcntl.fcntl(fileno(), fcntl.F_SETPIPE_SZ, _PIPE_SIZE)


# -- running ----------------------------------------------------------------------------


@attrs.frozen
class ShellResult:
    """The outcome of :func:`run_shell`.

    Exactly one of ``exit_code`` and ``signal`` is set: the shell's exit status, or the
    number of the signal that ended it (``SIGTERM``/``SIGKILL`` after a timeout).
    ``timed_out`` says the runner stopped the command. ``output_complete`` is false when
    the pipes were still held open after the process tree exited and reading was given up.
    ``duration`` is wall-clock seconds from spawn to the end of cleanup.
    """

    command: str
    exit_code: int | None
    signal: int | None
    stdout: CapturedOutput
    stderr: CapturedOutput
    timed_out: bool
    duration: float
    output_complete: bool = True

    @property
    def success(self) -> bool:
        return self.exit_code == 0 and not self.timed_out


def _check_text(name: str, value: str) -> None:
    if "\0" in value:
        raise ShellCommandRejected(f"{name} contains a NUL byte")


def _signal_group(pgid: int, number: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, number)


async def _stop_tree(process: trio.Process, grace: float) -> None:
    """Terminate the helper and its group; the helper stops everything below it."""
    if process.returncode is None:
        _signal_group(process.pid, _signal.SIGTERM)
        with trio.move_on_after(grace + _HELPER_MARGIN):
            await process.wait()
    if process.returncode is None:
        # Last resort: the helper is wedged. Escaped descendants would be orphaned.
        _signal_group(process.pid, _signal.SIGKILL)
        with trio.move_on_after(_KILL_WAIT):
            await process.wait()
    if process.returncode is None:
        raise ShellCleanupError(f"process {process.pid} did not exit after SIGKILL")


def _pipe_inodes(streams: Sequence[trio.abc.ReceiveStream]) -> frozenset[int]:
    inodes = set()
    for stream in streams:
        fileno = getattr(stream, "fileno", None)
        if fileno is not None:
            with contextlib.suppress(OSError):
                inodes.add(os.fstat(fileno()).st_ino)
    return frozenset(inodes)


def _holds_pipe(pid: str, links: frozenset[str]) -> bool:
    try:
        descriptors = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for descriptor in descriptors[:_MAX_FDS_SCANNED]:
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/{pid}/fd/{descriptor}") in links:
                return True
    return False


def _carries(pid: str, needle: bytes) -> bool:
    """Whether ``pid``'s initial environment holds ``needle`` (bounded read; a process
    of another user is never ours and is not read)."""
    try:
        if os.stat(f"/proc/{pid}").st_uid != os.getuid():
            return False
        with open(f"/proc/{pid}/environ", "rb") as handle:
            data = handle.read(_MAX_ENVIRON_BYTES)
    except OSError:
        return False
    return data.startswith(needle) or b"\0" + needle in data


def _leftovers(group: int, pipes: frozenset[int], marker: bytes = b"") -> list[int]:
    """Processes that remain of a command whose helper is gone: members of its process
    group or session, holders of its output pipes (a ``setsid``-ed escapee that kept
    them), and processes whose environment carries the run's ``marker`` (``NAME=value\0``;
    one that left the session and closed the pipes). Zombies are skipped: they are
    already dead."""
    me = os.getpid()
    links = frozenset(f"pipe:[{inode}]" for inode in pipes)
    found: list[int] = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                data = handle.read()
        except OSError:
            continue  # exited while scanning
        fields = data[data.rfind(b")") + 2 :].split()
        if len(fields) < 4 or fields[0] in (b"Z", b"X"):
            continue
        if (
            group in (int(fields[2]), int(fields[3]))
            or (links and _holds_pipe(entry, links))
            or (marker and _carries(entry, marker))
        ):
            found.append(int(entry))
    return found


def _sweep(group: int, pipes: frozenset[int], marker: bytes = b"") -> None:
    """Blocking: ``SIGKILL`` whatever remains of the command, until nothing does.

    The helper normally stops every descendant itself; this runs when it could not (it
    was killed: ``kill -9 $PPID``, ``pkill python``, the OOM killer). Escapees re-parented
    to init are found by their group, session, the output pipes they still hold, or the
    run's environment marker.
    """
    for _round in range(_SWEEP_ROUNDS):
        _signal_group(group, _signal.SIGKILL)
        remaining = _leftovers(group, pipes, marker)
        if not remaining:
            return
        for pid in remaining:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, _signal.SIGKILL)
        time.sleep(0.002)  # let the kills land before looking again


def _group_alive(group: int) -> bool:
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


async def _after_helper(process: trio.Process, pipes: frozenset[int], marker: bytes) -> None:
    """Once the helper has exited: if it did not get to clean up (killed, or a member of
    its group survived), kill what is left of the command, off the Trio thread."""
    code = process.returncode
    if code is not None and code >= 0 and not _group_alive(process.pid):
        return
    with trio.CancelScope(shield=True):
        await trio.to_thread.run_sync(_sweep, process.pid, pipes, marker)


def helper_command(command: str, kill_grace: float) -> list[str]:
    """The argv that runs ``command`` under the subreaper helper."""
    return [sys.executable, "-I", "-S", _HELPER, repr(float(kill_grace)), command]


async def run_shell(
    command: str,
    *,
    cwd: str,
    env: Mapping[str, str],
    timeout: float,  # noqa: ASYNC109 - the bound is part of the tool's contract
    output_bytes: int,
    kill_grace: float = DEFAULT_KILL_GRACE,
) -> ShellResult:
    """Run ``/bin/sh -c command`` in ``cwd`` and return its bounded outcome.

    ``cwd`` must already be a verified directory; ``env`` is used as given (build it
    with :func:`build_shell_environment`). ``timeout`` (seconds, at most
    :data:`MAX_TIMEOUT_SECONDS`) bounds the wall-clock run; ``output_bytes`` bounds the
    bytes kept per stream (half head, half tail). On timeout, on cancellation of the
    caller and after a normal exit, every remaining process started by the command is
    terminated before this returns or re-raises; a cancelled caller sees the tree dead
    before ``trio.Cancelled`` propagates.
    """
    if not math.isfinite(timeout) or timeout <= 0:
        raise ShellCommandRejected(f"timeout must be a positive number of seconds, got {timeout}")
    if timeout > MAX_TIMEOUT_SECONDS:
        raise LimitExceeded("shell_timeout_seconds", int(MAX_TIMEOUT_SECONDS), math.ceil(timeout))
    if output_bytes < 0:
        raise ShellCommandRejected(f"output_bytes must not be negative, got {output_bytes}")
    if output_bytes > MAX_OUTPUT_BYTES:
        raise LimitExceeded("shell_output_bytes", MAX_OUTPUT_BYTES, output_bytes)
    if not math.isfinite(kill_grace) or kill_grace < 0:
        raise ShellCommandRejected(f"kill_grace must not be negative, got {kill_grace}")
    if kill_grace > MAX_KILL_GRACE:
        raise LimitExceeded("shell_kill_grace_seconds", int(MAX_KILL_GRACE), math.ceil(kill_grace))
    _check_text("command", command)
    command_bytes = len(command.encode("utf-8", "surrogateescape"))
    if command_bytes > MAX_COMMAND_BYTES:
        raise LimitExceeded("shell_command_bytes", MAX_COMMAND_BYTES, command_bytes)
    environment = dict(env)
    for key, value in environment.items():
        _check_text("environment", key + value)
        if "=" in key or not key:
            raise ShellCommandRejected(f"invalid environment variable name {key!r}")
    # Tag every process of this run, whatever session or group it moves to.
    token = secrets.token_hex(16)
    environment[RUN_MARKER] = token
    marker = f"{RUN_MARKER}={token}\0".encode()

    started = trio.current_time()
    try:
        process = await trio.lowlevel.open_process(
            helper_command(command, kill_grace),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=cwd,
            env=environment,
            start_new_session=True,
            close_fds=True,
        )
    except OSError as error:
        raise ShellSpawnError(f"cannot start the shell in {cwd!r}: {error}") from error

    out, err = _Capture(output_bytes), _Capture(output_bytes)
    timed_out = False
    complete = True
    assert process.stdout is not None
    assert process.stderr is not None
    streams: Sequence[trio.abc.ReceiveStream] = (process.stdout, process.stderr)
    for stream in streams:
        _enlarge_pipe(stream)
    pipes = _pipe_inodes(streams)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_drain, process.stdout, out)
            nursery.start_soon(_drain, process.stderr, err)
            with trio.move_on_after(timeout) as deadline:
                await process.wait()
            if deadline.cancelled_caught:
                timed_out = True
                await _stop_tree(process, kill_grace)
            await _after_helper(process, pipes, marker)
            # The helper killed its descendants before exiting, so the pipes close now;
            # anything holding them longer (a passed descriptor) is not waited for.
            nursery.cancel_scope.deadline = trio.current_time() + _DRAIN_AFTER_EXIT
        complete = not nursery.cancel_scope.cancelled_caught
    except BaseException:
        with trio.CancelScope(shield=True):
            await _stop_tree(process, kill_grace)
            await _after_helper(process, pipes, marker)
            for stream in streams:
                await stream.aclose()
        raise
    with trio.CancelScope(shield=True):
        for stream in streams:
            await stream.aclose()
    code = process.returncode
    assert code is not None
    return ShellResult(
        command=command,
        exit_code=code if code >= 0 else None,
        signal=-code if code < 0 else None,
        stdout=out.result(),
        stderr=err.result(),
        timed_out=timed_out,
        duration=trio.current_time() - started,
        output_complete=complete,
    )


__all__ = [
    "DEFAULT_KILL_GRACE",
    "RUN_MARKER",
    "FALLBACK_PATH",
    "MAX_COMMAND_BYTES",
    "MAX_OUTPUT_BYTES",
    "MAX_TIMEOUT_SECONDS",
    "CapturedOutput",
    "ShellCleanupError",
    "ShellCommandRejected",
    "ShellEnvironmentDigest",
    "ShellError",
    "ShellResult",
    "ShellSpawnError",
    "build_shell_environment",
    "environment_digest",
    "run_shell",
    "sanitize_path",
]
