"""The shell runner: bounded output, scrubbed environment, and no surviving processes.

Every command runs with a unique marker in its environment; after each run the test
scans ``/proc/*/environ`` for it. Escapes tried: a background job, ``setsid``, double
forks, a ``SIGTERM``-ignoring process, a respawning loop. No sleeps-and-hope: the runner
must have killed and reaped everything by the time it returns (or re-raises).
"""

from __future__ import annotations

import hashlib
import os
import resource
import signal
import tracemalloc
import uuid

import pytest
import trio

from emelex._errors import LimitExceeded
from emelex.tools._process import (
    FALLBACK_PATH,
    MAX_OUTPUT_BYTES,
    ShellCommandRejected,
    ShellResult,
    ShellSpawnError,
    build_shell_environment,
    environment_digest,
    run_shell,
)

GRACE = 0.3


def _survivors(marker: str) -> list[int]:
    needle = f"EMELEX_TEST_MARKER={marker}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as handle:
                if needle in handle.read():
                    found.append(int(entry))
        except OSError:
            continue
    return found


class Runner:
    def __init__(self, tmp: str) -> None:
        self.marker = uuid.uuid4().hex
        self.cwd = tmp
        self.env = build_shell_environment(os.environ.get("PATH"), os.environ.get("HOME"))
        self.env["EMELEX_TEST_MARKER"] = self.marker

    async def __call__(
        self,
        command: str,
        *,
        timeout: float = 30.0,  # noqa: ASYNC109 - forwarded to run_shell
        output_bytes: int = 4096,
        kill_grace: float = GRACE,
    ) -> ShellResult:
        with trio.fail_after(60):
            result = await run_shell(
                command,
                cwd=self.cwd,
                env=self.env,
                timeout=timeout,
                output_bytes=output_bytes,
                kill_grace=kill_grace,
            )
        assert _survivors(self.marker) == []
        return result


@pytest.fixture
def run(tmp_path: object) -> Runner:
    return Runner(str(tmp_path))


async def test_exit_code_and_both_streams(run: Runner) -> None:
    result = await run("echo out; echo err >&2; exit 7")
    assert (result.exit_code, result.signal, result.timed_out) == (7, None, False)
    assert result.stdout.text() == "out\n"
    assert result.stderr.text() == "err\n"
    assert not result.success


async def test_killed_by_signal_reports_the_signal(run: Runner) -> None:
    result = await run("kill -TERM $$")
    assert (result.exit_code, result.signal) == (None, signal.SIGTERM)


async def test_background_job_dies_when_leader_exits(run: Runner) -> None:
    result = await run("sleep 3600 & echo started")
    assert result.exit_code == 0
    assert result.stdout.text() == "started\n"
    assert result.duration < 10


async def test_setsid_escape_dies(run: Runner) -> None:
    result = await run("setsid sleep 3600 & setsid -f sleep 3600; echo ok")
    assert result.stdout.text() == "ok\n"


async def test_double_fork_orphans_die(run: Runner) -> None:
    result = await run("(sleep 3600 &); (setsid sh -c 'sleep 3600 &' &); echo forked")
    assert result.stdout.text() == "forked\n"


async def test_background_process_ignoring_term_dies_after_grace(run: Runner) -> None:
    result = await run("(trap '' TERM; exec sleep 3600) & sleep 0.05; echo done")
    assert result.exit_code == 0
    assert result.duration >= GRACE


async def test_respawning_processes_die(run: Runner) -> None:
    command = "for i in 1 2 3 4; do (while :; do sleep 0.01 & wait; done) & done; echo up"
    result = await run(command)
    assert result.stdout.text() == "up\n"


async def test_timeout_kills_the_tree(run: Runner) -> None:
    result = await run("setsid sleep 3600 & sleep 3600", timeout=0.5)
    assert result.timed_out
    assert result.signal == signal.SIGTERM
    assert result.exit_code is None
    assert 0.5 <= result.duration < 10


async def test_timeout_with_term_ignoring_leader(run: Runner) -> None:
    result = await run("trap '' TERM; sleep 3600", timeout=0.3)
    assert result.timed_out
    assert result.signal == signal.SIGKILL
    assert result.duration >= 0.3 + GRACE


async def test_stdin_is_empty(run: Runner) -> None:
    result = await run('cat; read line; echo "rc=$? line=[$line]"', timeout=10)
    assert result.stdout.text() == "rc=1 line=[]\n"
    assert not result.timed_out


async def test_cancellation_kills_the_tree_before_cancelled_propagates(run: Runner) -> None:
    started = trio.current_time()
    with trio.move_on_after(0.5) as scope:
        await run_shell(
            "sleep 3600 & setsid sleep 3600 & (trap '' TERM; exec sleep 3600) & sleep 3600",
            cwd=run.cwd,
            env=run.env,
            timeout=600,
            output_bytes=1024,
            kill_grace=GRACE,
        )
    assert scope.cancelled_caught
    assert _survivors(run.marker) == []
    assert trio.current_time() - started < 10


async def test_head_and_tail_capture(run: Runner) -> None:
    result = await run("seq 1 100000", output_bytes=100)
    out = result.stdout
    assert out.head.startswith(b"1\n2\n3\n")
    assert out.tail.endswith(b"99999\n100000\n")
    assert len(out.head) + len(out.tail) == 100
    assert out.total_bytes == len("".join(f"{i}\n" for i in range(1, 100001)))
    assert out.truncated
    assert "bytes omitted" in out.text()


async def test_one_gigabyte_flood_is_drained_with_bounded_memory(run: Runner) -> None:
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    tracemalloc.start()
    try:
        result = await run(
            "head -c 1073741824 /dev/zero; yes | head -c 1048576 >&2", output_bytes=65536
        )
        _current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    rss_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    assert result.exit_code == 0
    assert result.stdout.total_bytes == 1024**3
    assert len(result.stdout.head) + len(result.stdout.tail) == 65536
    assert result.stderr.total_bytes == 1024 * 1024
    assert peak < 16 * 1024 * 1024, peak
    assert rss_after - rss_before < 64 * 1024, (rss_before, rss_after)  # KiB


async def test_endless_output_until_timeout(run: Runner) -> None:
    result = await run("yes", timeout=0.5, output_bytes=1000)
    assert result.timed_out
    assert result.stdout.total_bytes > 1000
    assert result.stdout.head.startswith(b"y\ny\n")


async def test_environment_is_exactly_what_was_given(
    run: Runner, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EMELEX_SHOULD_NOT_LEAK", "1")
    result = await run("env")
    lines = set(result.stdout.text().splitlines())
    for key, value in run.env.items():
        assert f"{key}={value}" in lines
    assert not any(line.startswith("EMELEX_SHOULD_NOT_LEAK") for line in lines)
    assert not any(line.startswith("PYTHON") for line in lines)


def test_build_environment_sanitizes_path_and_home() -> None:
    env = build_shell_environment("bin:/usr/bin::/opt/../x:/opt/tool:/usr/bin", "relative/home")
    assert env["PATH"].split(":") == ["/usr/bin", "/opt/tool", "/usr/local/bin", "/bin"]
    assert "HOME" not in env
    assert env["LANG"] == env["LC_ALL"] == "C.UTF-8"
    assert set(env) == {"PATH", "LANG", "LC_ALL"}
    assert build_shell_environment(None, "/home/u/../root").get("HOME") is None
    assert build_shell_environment(None, "/home/u")["HOME"] == "/home/u"
    assert build_shell_environment(None, None)["PATH"] == ":".join(FALLBACK_PATH)


def test_environment_digest_is_domain_separated() -> None:
    env = {"PATH": "/same", "HOME": "/same"}
    digest = environment_digest(env)
    assert digest.path_sha256 == hashlib.sha256(b"emelex.shell.path\0/same").hexdigest()
    assert digest.home_sha256 == hashlib.sha256(b"emelex.shell.home\0/same").hexdigest()
    assert digest.path_sha256 != digest.home_sha256
    assert environment_digest({"PATH": "/a:/b"}) != environment_digest({"PATH": "/b:/a"})
    assert environment_digest({"PATH": "/a"}).home_sha256 is None


async def test_bounds_raise_typed_errors(run: Runner) -> None:
    with pytest.raises(LimitExceeded):
        await run_shell("true", cwd=run.cwd, env=run.env, timeout=1201, output_bytes=10)
    with pytest.raises(LimitExceeded):
        await run_shell(
            "true", cwd=run.cwd, env=run.env, timeout=1, output_bytes=MAX_OUTPUT_BYTES + 1
        )
    with pytest.raises(ShellCommandRejected):
        await run_shell("echo \0", cwd=run.cwd, env=run.env, timeout=1, output_bytes=10)
    with pytest.raises(ShellCommandRejected):
        await run_shell("true", cwd=run.cwd, env=run.env, timeout=0, output_bytes=10)
    with pytest.raises(ShellSpawnError):
        await run_shell("true", cwd=run.cwd + "/missing", env=run.env, timeout=1, output_bytes=10)


async def test_ceiling_timeout_is_accepted(run: Runner) -> None:
    result = await run("true", timeout=1200)
    assert result.success
