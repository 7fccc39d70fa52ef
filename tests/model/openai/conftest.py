"""Real peers for the OpenAI-compatible backend: an in-process hypercorn fault server and
llama-cpp-python's own server running the tiny model in a subprocess."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest

from emelex.model.llama import write_tiny_gguf

from .fault_server import FaultServer, run_fault_server

SERVER_START_SECONDS = 120.0


@pytest.fixture
async def fault_server() -> AsyncIterator[FaultServer]:
    async with run_fault_server() as server:
        yield server


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _wait_ready(process: subprocess.Popen[bytes], base_url: str, log: Path) -> None:
    """Poll ``/v1/models`` until it answers 200, the process dies, or the deadline."""
    deadline = time.monotonic() + SERVER_START_SECONDS
    with httpx.Client(timeout=2.0, trust_env=False) as client:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                pytest.fail(
                    f"llama_cpp.server exited with {process.returncode}:\n"
                    + log.read_text(errors="replace")[-3000:],
                    pytrace=False,
                )
            try:
                if client.get(f"{base_url}/models").status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.1)  # polling interval, not a readiness guess
    pytest.fail(f"llama_cpp.server did not answer within {SERVER_START_SECONDS} s")


@pytest.fixture(scope="session")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``llama_cpp.server`` serving the tiny model on loopback; yields its ``base_url``.

    Fails (never skips) when the server extra is missing: these tests are part of the
    suite's contract.
    """
    try:
        import llama_cpp.server  # noqa: F401
    except ImportError as exc:
        pytest.fail(
            f"these tests need llama-cpp-python's server extra: "
            f"pip install 'llama-cpp-python[server]' ({exc})",
            pytrace=False,
        )
    directory = tmp_path_factory.mktemp("llama-server")
    model = write_tiny_gguf(directory / "tiny.gguf")
    log = directory / "server.log"
    port = _free_port()
    command = [
        sys.executable,
        "-m",
        "llama_cpp.server",
        "--model",
        str(model),
        "--model_alias",
        "tiny",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--n_threads",
        "1",
        "--n_ctx",
        "1024",
    ]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with log.open("wb") as output:
        process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, env=env)
    base_url = f"http://127.0.0.1:{port}/v1"
    try:
        _wait_ready(process, base_url, log)
        yield base_url
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
