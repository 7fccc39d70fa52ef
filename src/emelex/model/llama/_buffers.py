"""Whether to load models with llama.cpp's extra CPU buffer types: option, probe, cache.

The extra buffer types (CPU_REPACK, AMX, ...) repack quantized weights for faster
kernels, but on some machines those kernels die with a signal (AMX tile instructions
fault on worker threads of some cloud VMs) and take the process with them. The probe
(:mod:`._probe`) finds out in a child process; its verdict is cached per llama.cpp
build, CPU flags and kernel release, so it runs once per machine and build.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Final, Literal

import attrs
import trio

from emelex.model._errors import InvalidRequest
from emelex.model.llama._errors import BufferProbeFailed, NativeCrash

logger = logging.getLogger("emelex.model.llama")

ExtraBuffers = Literal["auto", "on", "off"]
VerdictSource = Literal["option", "environment", "cache", "probe"]

#: ``on`` or ``off`` forces the choice for every model whose option is ``"auto"``.
EXTRA_BUFFERS_ENV: Final = "EMELEX_LLAMA_EXTRA_BUFFERS"
#: Where the verdict cache lives (default ``$XDG_CACHE_HOME/emelex`` or ``~/.cache/emelex``).
CACHE_DIR_ENV: Final = "EMELEX_CACHE_DIR"

_PROBE_VERSION: Final = 1  # bump when the probe model or its checks change
_CACHE_FORMAT: Final = 1
_MAX_STDOUT: Final = 64 * 1024
_MAX_STDERR: Final = 8 * 1024
_MAX_CACHE_FILE: Final = 64 * 1024
_MODES: Final = ("auto", "on", "off")


@attrs.frozen(kw_only=True)
class ProbeReport:
    """What a probe that finished said: the model buffers its weights landed in
    (``(name, MiB)`` pairs), which of those are extra buffer types, and how long the
    decode on a worker thread with ``n_threads`` compute threads took."""

    model_buffers: tuple[tuple[str, float], ...]
    extra_buffer_types: tuple[str, ...]
    decode_ms: float
    n_threads: int


@attrs.frozen(kw_only=True)
class BufferVerdict:
    """Whether models load with llama.cpp's extra CPU buffer types, and why.

    ``source`` says who decided: the ``extra_buffers`` option, the environment variable
    ``EMELEX_LLAMA_EXTRA_BUFFERS``, the cached verdict of an earlier probe, or a probe
    run now. ``buffer_types`` lists the extra buffer types the probe model's weights
    used (empty when not probed, or when the build offers none for them).
    """

    extra_buffers: bool
    source: VerdictSource
    reason: str
    buffer_types: tuple[str, ...] = ()
    cache_file: str | None = None

    def describe(self) -> str:
        """One line for ``--verbose`` and ``emelex doctor``."""
        state = "on" if self.extra_buffers else "off"
        types = f" ({', '.join(self.buffer_types)})" if self.buffer_types else ""
        return f"extra CPU buffer types {state}{types} [{self.source}]: {self.reason}"


def check_mode(mode: object) -> ExtraBuffers:
    if mode not in _MODES:
        raise InvalidRequest(f"extra_buffers must be 'auto', 'on' or 'off', got {mode!r}")
    return mode


# -- the cache ------------------------------------------------------------------------------
def cache_directory() -> Path:
    """``$EMELEX_CACHE_DIR``, else ``$XDG_CACHE_HOME/emelex``, else ``~/.cache/emelex``."""
    explicit = os.environ.get(CACHE_DIR_ENV)
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "emelex"


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "replace")).hexdigest()[:16]


def _cpu_flags() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as cpuinfo:
            for line in cpuinfo:
                if line.startswith(("flags", "Features")):
                    return " ".join(sorted(line.partition(":")[2].split()))
    except OSError:
        pass
    return f"{platform.machine()} {platform.processor()}"


@functools.cache
def _machine_key() -> tuple[tuple[str, str], ...]:
    from emelex.model.llama._native import _lib

    lib = _lib()
    system_info = lib.llama_print_system_info()
    if isinstance(system_info, bytes):
        system_info = system_info.decode("utf-8", "replace")
    return (
        ("probe", str(_PROBE_VERSION)),
        ("llama_cpp", str(getattr(lib, "__version__", "unknown"))),
        ("build", _digest(str(system_info))),
        ("cpu_flags", _digest(_cpu_flags())),
        ("kernel", platform.release()),
    )


def machine_key() -> dict[str, str]:
    """What a cached verdict is valid for: llama-cpp-python's version and a digest of
    its build's features, a digest of the CPU flags, the kernel release."""
    return dict(_machine_key())


def cache_file(key: dict[str, str]) -> Path:
    return cache_directory() / f"llama-buffers-{_digest(json.dumps(key, sort_keys=True))}.json"


def read_cached(path: Path, key: dict[str, str]) -> BufferVerdict | None:
    """The verdict cached at ``path`` for ``key``; None when absent, for another key,
    or unreadable (a corrupt file is ignored and later replaced)."""
    try:
        with path.open("rb") as file:
            data: Any = json.loads(file.read(_MAX_CACHE_FILE + 1)[:_MAX_CACHE_FILE])
        if data.get("format") != _CACHE_FORMAT or data.get("key") != key:
            return None
        verdict = data["verdict"]
        extra, reason, types = verdict["extra_buffers"], verdict["reason"], verdict["buffer_types"]
        if not (
            isinstance(extra, bool)
            and isinstance(reason, str)
            and isinstance(types, list)
            and all(isinstance(name, str) for name in types)
        ):
            return None
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    return BufferVerdict(
        extra_buffers=extra,
        source="cache",
        reason=reason,
        buffer_types=tuple(types),
        cache_file=str(path),
    )


def write_cached(path: Path, key: dict[str, str], verdict: BufferVerdict) -> None:
    """Write the verdict atomically (a temporary file renamed over the old one)."""
    data = {
        "format": _CACHE_FORMAT,
        "key": key,
        "probed_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "verdict": {
            "extra_buffers": verdict.extra_buffers,
            "reason": verdict.reason,
            "buffer_types": list(verdict.buffer_types),
        },
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=path.name, suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as file:
            json.dump(data, file, indent=1, sort_keys=True)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


# -- the probe's parent side ---------------------------------------------------------------
async def _read_head(stream: trio.abc.ReceiveStream, limit: int, into: bytearray) -> None:
    """Keep the first ``limit`` bytes; drain the rest so the child never blocks."""
    while chunk := await stream.receive_some(16384):
        if len(into) < limit:
            into += chunk[: limit - len(into)]


async def _read_tail(stream: trio.abc.ReceiveStream, limit: int, into: bytearray) -> None:
    """Keep the last ``limit`` bytes."""
    while chunk := await stream.receive_some(16384):
        into += chunk
        if len(into) > limit:
            del into[: len(into) - limit]


def _last_lines(data: bytes, count: int = 3) -> str:
    lines = [line.strip() for line in data.decode("utf-8", "replace").splitlines()]
    return " | ".join([line for line in lines if line][-count:])[-500:]


def _report(stdout: bytes) -> ProbeReport:
    lines = [line for line in stdout.decode("utf-8", "replace").splitlines() if line.strip()]
    try:
        data: Any = json.loads(lines[-1])
        buffers = data["buffers"]
        report = ProbeReport(
            model_buffers=tuple(sorted((str(k), float(v)) for k, v in buffers.items())),
            extra_buffer_types=tuple(str(name) for name in data["extra"]),
            decode_ms=float(data["decode_ms"]),
            n_threads=int(data["n_threads"]),
        )
    except (IndexError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise BufferProbeFailed(
            "the buffer-type probe printed no verdict", detail=_last_lines(stdout)
        ) from exc
    if data.get("ok") is not True:
        raise BufferProbeFailed("the buffer-type probe did not report success")
    return report


async def probe_extra_buffers(*, n_threads: int | None = None) -> ProbeReport:
    """Run the buffer-type probe in a child process and return what it found.

    The child loads a quantized probe model with the extra buffer types on and decodes
    on a worker thread with ``n_threads`` compute threads (default: every core, at
    least 2). Raises :class:`NativeCrash` when the child is killed by a signal (e.g.
    ``SIGILL``) and :class:`BufferProbeFailed` when it fails otherwise. Output is
    bounded; cancelling kills the child and waits for it. Takes seconds: callers own the
    timeout. Needs the ``local`` extra.
    """
    threads = n_threads if n_threads is not None else max(2, os.cpu_count() or 2)
    command = [
        sys.executable,
        "-m",
        "emelex.model.llama._probe",
        "--threads",
        str(threads),
    ]
    try:
        process = await trio.lowlevel.open_process(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,  # the terminal's Ctrl-C is the parent's to handle
        )
    except OSError as exc:
        raise BufferProbeFailed("cannot start the buffer-type probe", detail=str(exc)) from exc
    stdout, stderr = bytearray(), bytearray()
    try:
        assert process.stdout is not None
        assert process.stderr is not None
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_read_head, process.stdout, _MAX_STDOUT, stdout)
            nursery.start_soon(_read_tail, process.stderr, _MAX_STDERR, stderr)
        status = await process.wait()
    finally:
        if process.returncode is None:
            process.kill()
            with trio.CancelScope(shield=True):
                await process.wait()
        for pipe in (process.stdout, process.stderr):
            if pipe is not None:
                with trio.CancelScope(shield=True):
                    await pipe.aclose()
    if status < 0:
        raise NativeCrash("the llama.cpp buffer-type probe", -status)
    if status != 0:
        raise BufferProbeFailed(
            f"the buffer-type probe exited with status {status}", detail=_last_lines(bytes(stderr))
        )
    return _report(bytes(stdout))


def _verdict_from_probe(report: ProbeReport) -> BufferVerdict:
    threads = f"{report.n_threads} compute threads"
    if report.extra_buffer_types:
        reason = (
            f"the probe model's quantized weights loaded into "
            f"{', '.join(report.extra_buffer_types)} and decoded on a worker thread "
            f"with {threads}"
        )
    else:
        reason = (
            "the probe decoded on a worker thread with "
            f"{threads}; this llama.cpp build put none of its weights in an extra "
            "buffer type, so there is nothing to avoid"
        )
    return BufferVerdict(
        extra_buffers=True, source="probe", reason=reason, buffer_types=report.extra_buffer_types
    )


async def choose_extra_buffers(
    mode: ExtraBuffers = "auto", *, refresh: bool = False
) -> BufferVerdict:
    """Decide whether to load models with llama.cpp's extra CPU buffer types.

    ``"on"``/``"off"`` decide without probing. ``"auto"`` follows the environment
    variable ``EMELEX_LLAMA_EXTRA_BUFFERS`` (``on``/``off``) when set, else the cached
    verdict for this llama.cpp build, CPU and kernel, else runs the probe now (``refresh``
    ignores the cache) and caches its verdict. A probe that crashes or fails gives
    "off", with the reason: it is not an error. The probe takes seconds (callers own
    timeouts: cancelling kills it and caches nothing). Raises :class:`InvalidRequest`
    for a bad mode or environment value. Checkpoints.
    """
    check_mode(mode)
    if mode != "auto":
        return BufferVerdict(
            extra_buffers=mode == "on", source="option", reason=f"extra_buffers={mode!r}"
        )
    value = os.environ.get(EXTRA_BUFFERS_ENV, "").strip().lower()
    if value in ("on", "off"):
        return BufferVerdict(
            extra_buffers=value == "on", source="environment", reason=f"{EXTRA_BUFFERS_ENV}={value}"
        )
    if value not in ("", "auto"):
        raw = os.environ[EXTRA_BUFFERS_ENV]
        raise InvalidRequest(f"{EXTRA_BUFFERS_ENV} must be 'on', 'off' or 'auto', got {raw!r}")
    if not refresh:
        key = await trio.to_thread.run_sync(machine_key)
        cached = await trio.to_thread.run_sync(read_cached, cache_file(key), key)
        if cached is not None:
            return cached
    verdict, _ = await probe_and_cache()
    return verdict


async def probe_and_cache() -> tuple[BufferVerdict, NativeCrash | BufferProbeFailed | None]:
    """Run the probe now and cache its verdict (for ``emelex doctor --probe``).

    Returns the verdict and, when the probe crashed or failed, the error it raised, so
    a diagnostic can report it. Checkpoints; cancelling kills the probe and caches
    nothing.
    """
    key = await trio.to_thread.run_sync(machine_key)
    path = cache_file(key)
    verdict, failure = await _probe_verdict()
    try:
        await trio.to_thread.run_sync(write_cached, path, key, verdict)
    except OSError as exc:  # the cache only saves time: go on without it
        logger.warning("cannot cache the buffer-type verdict in %s: %s", path, exc)
    else:
        verdict = attrs.evolve(verdict, cache_file=str(path))
    return verdict, failure


async def _probe_verdict() -> tuple[BufferVerdict, NativeCrash | BufferProbeFailed | None]:
    logger.info("probing llama.cpp's extra CPU buffer types in a child process")
    failure: NativeCrash | BufferProbeFailed
    try:
        report = await probe_extra_buffers()
    except NativeCrash as exc:
        reason = (
            f"the probe was killed by {exc.signal_name} when it decoded with them, "
            "so models load without them"
        )
        failure = exc
    except BufferProbeFailed as exc:
        reason = f"the probe failed ({exc}), so models load without them"
        failure = exc
    else:
        return _verdict_from_probe(report), None
    logger.warning("%s", failure)
    return BufferVerdict(extra_buffers=False, source="probe", reason=reason), failure
