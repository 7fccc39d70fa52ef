"""llama.cpp's log reaches the terminal only with --verbose: Ctrl-C while a native model
processes its prompt (llama.cpp then logs its aborted decode) prints none of it."""

from __future__ import annotations

import os
import re
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from emelex.model.llama import write_tiny_gguf

EMELEX = [sys.executable, "-m", "emelex.cli"]
# What llama.cpp logs when a decode is aborted, and its usual prefixes.
NATIVE_MARKERS = ("llama_", "ggml", "graph_compute", "process_ubatch", "load_tensors")
# A long prompt: its processing (many 512-token chunks) is where Ctrl-C lands.
PROMPT = "tell me about " + "the quick brown fox " * 80


@pytest.fixture(scope="module")
def tiny_spec(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = write_tiny_gguf(tmp_path_factory.mktemp("model") / "tiny.gguf", context_length=8192)
    return f"llama:{path}"


def _interrupt_during_prompt(spec: str, cwd: Path, *extra: str) -> tuple[int, str]:
    """Run a turn, send SIGINT once the prompt is being processed; (exit code, stderr)."""
    command = [*EMELEX, "run", "--no-shell", "--max-tokens", "64", "--model", spec, *extra, PROMPT]
    with subprocess.Popen(
        command,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    ) as process:
        assert process.stderr is not None
        fd = process.stderr.fileno()
        seen = b""
        deadline = time.monotonic() + 120
        while b"prompt: 512/" not in seen:
            remaining = deadline - time.monotonic()
            assert remaining > 0, seen.decode(errors="replace")
            ready, _, _ = select.select([fd], [], [], remaining)
            if ready:
                chunk = os.read(fd, 65536)
                assert chunk, f"emelex ended before its prompt: {seen.decode(errors='replace')}"
                seen += chunk
        process.send_signal(signal.SIGINT)
        rest = process.stderr.read()
        code = process.wait(timeout=60)
    return code, (seen + rest).decode("utf-8", "replace")


def test_ctrl_c_during_native_prompt_prints_no_llama_cpp_lines(
    tmp_path: Path, tiny_spec: str
) -> None:
    code, stderr = _interrupt_during_prompt(tiny_spec, tmp_path)
    assert code == 130, stderr
    leaked = [
        line for line in stderr.splitlines() if any(marker in line for marker in NATIVE_MARKERS)
    ]
    assert leaked == [], stderr
    assert "turn failed (rolled back): the turn was cancelled" in stderr


def test_verbose_shows_the_buffer_verdict_and_llama_cpp_warnings(
    tmp_path: Path, tiny_spec: str
) -> None:
    code, stderr = _interrupt_during_prompt(tiny_spec, tmp_path, "--verbose")
    assert code == 130, stderr
    lines = stderr.splitlines()
    assert any("emelex.model.llama: tiny.gguf: extra CPU buffer types" in line for line in lines), (
        stderr
    )
    # The abort inside a prompt decode is a llama.cpp warning: routed, and shown now
    # (unless the whole prompt was processed before the signal landed).
    done, total = re.findall(r"prompt: (\d+)/(\d+)", stderr)[-1]
    if int(done) < int(total):
        assert any("emelex.model.llama: llama_decode" in line for line in lines), stderr
