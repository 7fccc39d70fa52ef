"""``emelex serve`` as a real process: readiness, SIGTERM drain, the root lock, exit codes,
and TLS."""

from __future__ import annotations

import functools
import json
import os
import signal
import ssl
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio

from emelex.app import Agent, export_agent
from emelex.contracts import QueueChanged
from emelex.service import Host, HostClient, HostClosed, TransportError
from emelex.testing import Say, ScriptedModel
from tests.service.conftest import served


def _package(root: Path) -> None:
    """``root/agents/helper``: an agent package the served Host finds by itself."""
    model = ScriptedModel([[Say("unused")]])
    agent = Agent.builder().name("helper").instructions("Help.").model(model).build()
    export_agent(agent, root / "agents" / "helper")


def _script(path: Path, rounds: list[list[dict[str, object]]]) -> Path:
    path.write_text(json.dumps({"rounds": rounds}))
    return path


@asynccontextmanager
async def _serving(root: Path, model: Path, *extra: str) -> AsyncIterator[trio.Process]:
    command = [sys.executable, "-m", "emelex.cli", "serve", "--root", str(root)]
    command += ["--model", f"scripted:{model}", *extra]
    async with trio.open_nursery() as nursery:
        run = functools.partial(
            trio.run_process, command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=False
        )
        process: trio.Process = await nursery.start(run)
        assert process.stdout is not None
        seen = b""
        with trio.fail_after(60):
            while b"listening on unix:" not in seen:
                chunk = await process.stdout.receive_some(4096)
                assert chunk, f"serve exited early: {seen!r}"
                seen += chunk
        try:
            yield process
        finally:
            if process.returncode is None:
                process.kill()


async def test_sigterm_lets_the_running_turn_finish_then_exits_0(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    _package(root)
    model = _script(tmp_path / "m.json", [[{"wait": 1.5}, {"say": "slow answer"}]])
    async with _serving(root, model, "--grace", "30") as process:
        async with HostClient.connect(root=root) as client:
            session = (await client.create_session("helper", tmp_path, operation="c")).session
            await client.send(session.id, "take your time", operation="s1")
            with trio.fail_after(30):
                async with client.watch(session.id) as updates:
                    async for update in updates:
                        running = isinstance(update, QueueChanged) and any(
                            e.state == "running" for e in update.queue.entries
                        )
                        if running:
                            break
            process.send_signal(signal.SIGTERM)
            with trio.fail_after(30):
                while True:  # once the signal is handled, nothing new is admitted
                    try:
                        await client.send(session.id, "late", operation="late")
                    except HostClosed:
                        break
                    await trio.sleep(0.05)
        with trio.fail_after(60):
            await process.wait()
        assert process.returncode == 0
        assert process.stderr is not None
        assert b"drained and stopped" in await process.stderr.receive_some(65536)
    # The running turn reached its end and was committed.
    agent = Agent.builder().name("helper").instructions("Help.").model(ScriptedModel([])).build()
    async with Host.open(root / ".emelex", agents={"helper": agent}) as host:
        rows = (await host.history(session.id)).rows
        assert [(r.role, r.body) for r in rows][:2] == [
            ("user", "take your time"),
            ("assistant", "slow answer"),
        ]
    assert not (root / ".emelex" / "host.sock").exists()


async def test_a_second_serve_names_the_first_and_exits_4(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    model = _script(tmp_path / "m.json", [])
    async with _serving(root, model) as first:
        second = await trio.run_process(
            [sys.executable, "-m", "emelex.cli", "serve", "--root", str(root)],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
        assert second.returncode == 4
        assert f"pid {first.pid}".encode() in second.stderr
        first.send_signal(signal.SIGTERM)
        with trio.fail_after(60):
            await first.wait()
        assert first.returncode == 0


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--listen", "0.0.0.0:0"], "--public"),
        (["--listen", "0.0.0.0:0", "--public"], "TLS"),
        (["--listen", "nonsense"], "HOST:PORT"),
        (["--cert", "c.pem"], "both"),
    ],
)
def test_usage_errors_exit_2(tmp_path: Path, arguments: list[str], message: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "emelex.cli", "serve", "--root", str(tmp_path), *arguments],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert result.returncode == 2
    assert message in result.stderr


def _certificate(directory: Path) -> tuple[Path, Path]:
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"),
            *("-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1"),
            *("-addext", "subjectAltName=IP:127.0.0.1"),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    return cert, key


@pytest.mark.skipif(not os.access("/usr/bin/openssl", os.X_OK), reason="no openssl")
async def test_tls_listener_with_token(tmp_path: Path) -> None:
    cert, key = await trio.to_thread.run_sync(_certificate, tmp_path)
    agent = Agent.builder().name("helper").instructions("Help.").model(ScriptedModel([])).build()
    root = tmp_path / "root"
    root.mkdir()
    async with served(root, {"helper": agent}, tcp=True, cert=cert, key=key) as serving:
        assert serving.url is not None and serving.url.startswith("https://")
        assert serving.token_path is not None
        token = serving.token_path.read_text().strip()
        trusted = ssl.create_default_context(cafile=str(cert))
        async with HostClient.connect(serving.url, token=token, verify=trusted) as client:
            assert (await client.hello()).wire_version >= 1
            session = (await client.create_session("helper", tmp_path, operation="c")).session
            with trio.fail_after(30):
                async with client.watch(session.id) as updates:
                    assert isinstance(await updates.__anext__(), QueueChanged)
        async with HostClient.connect(serving.url, token=token) as untrusting:
            with pytest.raises(TransportError, match="CERTIFICATE_VERIFY_FAILED"):
                await untrusting.hello()


@pytest.mark.parametrize("flag", [True, False])
async def test_ag_ui_flag_adds_the_run_route(tmp_path: Path, flag: bool) -> None:
    import httpx

    root = tmp_path / "root"
    root.mkdir()
    _package(root)
    model = _script(tmp_path / "m.json", [[{"say": "hi"}]])
    extra = ["--ag-ui"] if flag else []
    async with _serving(root, model, *extra) as process:
        transport = httpx.AsyncHTTPTransport(uds=str(root / ".emelex" / "host.sock"))
        async with httpx.AsyncClient(transport=transport, base_url="http://host") as http:
            with trio.fail_after(30):
                # No body: the static pages answer 404 without reading one.
                answer = await http.post("/ag-ui/run")
        process.send_signal(signal.SIGTERM)
        with trio.fail_after(60):
            await process.wait()
    # With the flag the run is read (and its empty body refused); without it, no route.
    assert answer.status_code == (400 if flag else 404)
    expected = "InvalidRequest" if flag else "UnknownRoute"
    assert answer.json()["error"]["type"] == expected
