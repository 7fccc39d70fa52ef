"""The served Host refuses what it must: missing or wrong tokens on every route, other
users on its socket, huge or deep bodies, frame floods and connection floods, each with
a typed error while the Host keeps answering."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from emelex.contracts import QueueChanged
from emelex.service import (
    HostClient,
    HostLocked,
    RequestTooLarge,
    TooManyConnections,
    TransportError,
    Unauthorized,
    UnknownRoute,
)
from emelex.service._errors import ServeError
from emelex.service.transport._http import Limits
from emelex.service.transport._routes import ROUTES
from emelex.service.transport._serve import Listen, ServeOptions, serve
from emelex.service.transport._websocket import WebSocket
from emelex.testing import Say
from tests.service.conftest import served
from tests.service.test_host import agent

AGENTS = {"helper": agent(*[[Say(f"answer {n}")] for n in range(50)])}


async def _raw_http(path: Path, request: bytes) -> tuple[int, dict[str, Any]]:
    """One raw HTTP/1.1 exchange over the Unix socket: the status and the JSON body."""
    stream = await trio.open_unix_socket(str(path))
    async with stream:
        await stream.send_all(request)
        data = b""
        while b"\r\n\r\n" not in data or len(data.partition(b"\r\n\r\n")[2]) < _length(data):
            chunk = await stream.receive_some(65536)
            if not chunk:
                break
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)


def _length(data: bytes) -> int:
    for line in data.partition(b"\r\n\r\n")[0].split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value)
    return 0


async def _session(client: HostClient, workspace: Path) -> str:
    created = await client.create_session("helper", workspace, operation="c")
    return created.session.id


# -- authentication ---------------------------------------------------------------------


async def test_every_route_refuses_a_missing_or_wrong_token(tmp_path: Path) -> None:
    async with served(tmp_path, AGENTS, tcp=True) as serving:
        assert serving.url is not None and serving.token_path is not None
        token = serving.token_path.read_text().strip()
        async with HostClient.connect(serving.url, token=token) as client:
            session_id = await _session(client, tmp_path)
        paths = [route.path for route in ROUTES]
        assert len(paths) >= 20  # every operation of the table, enumerated below
        async with httpx.AsyncClient(base_url=serving.url) as http:
            for headers in ({}, {"authorization": "Bearer wrong"}, {"authorization": token}):
                for route in ROUTES:
                    if route.kind == "op":
                        answer = await http.post(
                            route.path, json={"sessionId": session_id}, headers=headers
                        )
                    else:
                        answer = await http.get(route.path, headers=headers)
                    assert answer.status_code == 401, route.path
                    assert answer.json()["error"]["type"] == "Unauthorized"
                for path in ("/v1/hello", "/v1/routes", "/v1/op/noSuchOperation"):
                    answer = await http.get(path, headers=headers)
                    assert (answer.status_code, answer.json()["error"]["type"]) == (
                        401,
                        "Unauthorized",
                    )
            # The static page needs no token; the API behind it does.
            page = await http.get("/")
            assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
            assert (await http.get("/static/../../_host.py")).status_code == 404
        for route in ROUTES:
            if route.kind != "sub":
                continue
            for wrong in (None, "wrong"):
                async with HostClient.connect(serving.url, token=wrong) as intruder:
                    with pytest.raises(Unauthorized):
                        async with intruder._subscribe(route.name, _sub_request(route.name)) as s:
                            await s.__anext__()
        # The right token over the WebSocket's first frame (browsers cannot set headers).
        assert token not in (tmp_path / ".emelex" / "host.lock").read_text()


def _sub_request(name: str) -> Any:
    from emelex.contracts import WatchDiagnosticsRequest, WatchRequest

    if name == "watch":
        return WatchRequest(session_id="s-x", after=None)  # type: ignore[arg-type]
    return WatchDiagnosticsRequest(session_id="s-x")  # type: ignore[arg-type]


async def test_a_token_in_the_first_frame_opens_a_subscription(tmp_path: Path) -> None:
    async with served(tmp_path, AGENTS, tcp=True) as serving:
        assert serving.url is not None and serving.token_path is not None
        token = serving.token_path.read_text().strip()
        async with HostClient.connect(serving.url, token=token) as client:
            session_id = await _session(client, tmp_path)
        host, port = serving.url.removeprefix("http://").split(":")
        stream = await trio.open_tcp_stream(host, int(port))
        socket_ = await WebSocket.open(
            stream, host=host, target="/v1/sub/watch", headers=[], max_message=1 << 20
        )
        try:
            await socket_.send_text(json.dumps({"token": token}))
            await socket_.send_text(json.dumps({"sessionId": session_id, "after": None}))
            first = await socket_.receive_text()
            assert first is not None and json.loads(first)["update"]["kind"] == "queue"
        finally:
            await socket_.aclose()


async def test_state_socket_and_token_file_modes(tmp_path: Path) -> None:
    state = tmp_path / ".emelex"
    state.mkdir(mode=0o755)  # a looser directory is tightened
    async with served(tmp_path, AGENTS, tcp=True) as serving:
        assert stat.S_IMODE(state.stat().st_mode) == 0o700
        assert stat.S_IMODE(serving.socket_path.stat().st_mode) == 0o600
        assert stat.S_ISSOCK(serving.socket_path.stat().st_mode)
        assert serving.token_path is not None
        assert stat.S_IMODE(serving.token_path.stat().st_mode) == 0o600
        assert len(serving.token_path.read_text().strip()) >= 32
        assert (state / "host.lock").read_text().strip() == str(os.getpid())
        first_token = serving.token_path.read_text()
    assert not serving.socket_path.exists()
    async with served(tmp_path, AGENTS, tcp=True) as again:
        assert again.token_path is not None
        assert again.token_path.read_text() == first_token  # kept across restarts


@pytest.fixture
def shared_root() -> Iterator[Path]:
    """A root another user can reach (pytest's tmp directories are private to us)."""
    path = Path(tempfile.mkdtemp(prefix="emelex-serve-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path)


SYSTEM_PYTHON = "/usr/bin/python3"
_CONNECT_AS_NOBODY = """
import socket, sys
s = socket.socket(socket.AF_UNIX)
try:
    s.connect(sys.argv[1])
except OSError as exc:
    print(type(exc).__name__)
else:
    print("connected")
"""


def _connect_as_nobody(path: Path) -> str:
    result = subprocess.run(  # the system Python: nobody cannot run the project's venv
        [SYSTEM_PYTHON, "-I", "-c", _CONNECT_AS_NOBODY, str(path)],
        user="nobody",
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        cwd="/",
    )
    return result.stdout.strip()


@pytest.mark.skipif(os.geteuid() != 0, reason="switching to the user nobody needs root")
@pytest.mark.skipif(not os.access(SYSTEM_PYTHON, os.X_OK), reason="no system Python")
async def test_another_user_cannot_connect_to_the_socket(shared_root: Path) -> None:
    async with served(shared_root, AGENTS) as serving:
        path = serving.socket_path
        assert await trio.to_thread.run_sync(_connect_as_nobody, path) == "PermissionError"
        # The socket's own mode refuses too, even where the directory lets them through.
        (shared_root / ".emelex").chmod(0o711)
        assert await trio.to_thread.run_sync(_connect_as_nobody, path) == "PermissionError"
        # The check can fail: a world-writable socket lets them in.
        path.chmod(0o666)
        assert await trio.to_thread.run_sync(_connect_as_nobody, path) == "connected"
        path.chmod(0o600)
        (shared_root / ".emelex").chmod(0o700)


# -- bounded input -------------------------------------------------------------------


async def test_a_gigabyte_body_is_refused_early(tmp_path: Path) -> None:
    gib = 1 << 30
    async with served(tmp_path, AGENTS) as serving, HostClient.connect(root=tmp_path) as client:
        # Declared: refused from the headers alone.
        status, body = await _raw_http(
            serving.socket_path,
            b"POST /v1/op/listSessions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
            + f"content-length: {gib}\r\n\r\n".encode(),
        )
        assert (status, body["error"]["type"]) == (413, "RequestTooLarge")
        # Streamed (chunked, no length): refused once past the bound, long before 1 GiB.
        sent = 0
        stream = await trio.open_unix_socket(str(serving.socket_path))
        async with stream:
            await stream.send_all(
                b"POST /v1/op/listSessions HTTP/1.1\r\nhost: x\r\n"
                b"transfer-encoding: chunked\r\n\r\n"
            )
            chunk = b"%x\r\n%s\r\n" % (1 << 20, b" " * (1 << 20))
            answer = b""

            async def read() -> None:
                nonlocal answer
                while b"\r\n\r\n" not in answer:
                    data = await stream.receive_some(65536)
                    if not data:
                        return
                    answer += data

            with trio.fail_after(60):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(read)
                    try:
                        while sent < gib and b"\r\n\r\n" not in answer:
                            await stream.send_all(chunk)
                            sent += 1 << 20
                    except (trio.BrokenResourceError, trio.ClosedResourceError):
                        pass
        assert answer.startswith(b"HTTP/1.1 413")
        assert sent < 64 << 20
        assert await client.sessions() == ()  # the Host still answers


async def test_deep_json_bad_json_and_bad_contracts_are_400(tmp_path: Path) -> None:
    async with served(tmp_path, AGENTS) as serving, HostClient.connect(root=tmp_path) as client:
        for body in (b"[" * 100_000 + b"]" * 100_000, b'{"a":' * 100_000 + b"1" + b"}" * 100_000):
            status, answer = await _raw_http(
                serving.socket_path,
                b"POST /v1/op/send HTTP/1.1\r\nhost: x\r\n"
                + f"content-length: {len(body)}\r\n\r\n".encode()
                + body,
            )
            assert (status, answer["error"]["type"]) == (400, "InvalidRequest")
            assert "deeper" in answer["error"]["message"]
        async with httpx.AsyncClient(
            transport=httpx.AsyncHTTPTransport(uds=str(serving.socket_path)),
            base_url="http://x",
        ) as http:
            limit = b'{"sessionId": "s-1", "through": null, "after": null, "limit": 10000}'
            cases: list[tuple[str, bytes, str]] = [
                ("send", b"{not json", "InvalidRequest"),
                ("send", b"[1, 2]", "InvalidRequest"),
                ("send", b'{"sessionId": "s-1"}', "ContractError"),  # fields missing
                ("send", b'{"sessionId": "s-1", "text": 5, "operation": "o"}', "ContractError"),
                ("send", b'{"sessionId": "s-1", "text": "", "operation": "o"}', "ContractError"),
                ("history", limit, "ContractLimitExceeded"),
            ]
            for name, body, kind in cases:
                reply = await http.post(f"/v1/op/{name}", content=body)
                assert (reply.status_code, reply.json()["error"]["type"]) == (400, kind), body
            assert reply.json()["error"]["maximum"] == 500  # the client rebuilds the limit
            missing = await http.post(
                "/v1/op/send", json={"sessionId": "s-none", "text": "hi", "operation": "o"}
            )
            assert (missing.status_code, missing.json()["error"]["type"]) == (404, "UnknownSession")
            unknown = await http.post("/v1/op/nothing", json={})
            assert (unknown.status_code, unknown.json()["error"]["type"]) == (404, "UnknownRoute")
            wrong_method = await http.get("/v1/op/send")
            assert wrong_method.status_code == 400
        with pytest.raises(UnknownRoute):
            await client._get("/v1/op/x")
        assert await client.sessions() == ()


async def test_a_websocket_frame_flood_ends_the_subscription(tmp_path: Path) -> None:
    limits = Limits(max_ws_message=4096)
    async with served(tmp_path, AGENTS, limits=limits) as serving:
        async with HostClient.connect(root=tmp_path) as client:
            session_id = await _session(client, tmp_path)

            async def subscribe() -> WebSocket:
                stream = await trio.open_unix_socket(str(serving.socket_path))
                return await WebSocket.open(
                    stream, host="x", target="/v1/sub/watch", headers=[], max_message=1 << 20
                )

            # Frames after the request: the first one ends it with a typed error.
            flood = await subscribe()
            try:
                await flood.send_text(json.dumps({"sessionId": session_id, "after": None}))
                with trio.fail_after(30):
                    with pytest.raises(TransportError):  # the server may close mid-flood
                        for n in range(100_000):
                            await flood.send_text(f'{{"junk": {n}}}')
                    frames = []
                    while (text := await _tolerant_receive(flood)) is not None:
                        frames.append(json.loads(text))
                assert frames[-1]["error"]["type"] == "InvalidRequest"
            finally:
                await flood.aclose()
            # One frame over the bound: closed as too big.
            big = await subscribe()
            try:
                await big.send_text(
                    json.dumps({"sessionId": session_id, "after": None, "x": "y" * 10_000})
                )
                with trio.fail_after(30), pytest.raises(RequestTooLarge):
                    await big.receive_text()
            finally:
                await big.aclose()
            # The Host still answers, and subscriptions still work.
            assert [s.id for s in await client.sessions()] == [session_id]
            with trio.fail_after(30):
                async with client.watch(session_id) as updates:
                    assert isinstance(await updates.__anext__(), QueueChanged)


async def _tolerant_receive(socket_: WebSocket) -> str | None:
    try:
        return await socket_.receive_text()
    except TransportError:
        return None


async def test_a_thousand_idle_connections_and_the_connection_bound(tmp_path: Path) -> None:
    limits = Limits(max_connections=1100, idle_seconds=2.0)
    async with served(tmp_path, AGENTS, limits=limits) as serving:
        idle = [await trio.open_unix_socket(str(serving.socket_path)) for _ in range(1000)]
        try:
            with trio.fail_after(30):
                async with HostClient.connect(root=tmp_path) as client:
                    assert await client.sessions() == ()
            # Idle connections are closed by the Host after idle_seconds.
            with trio.fail_after(30):
                assert await idle[0].receive_some(1) == b""
        finally:
            for stream in idle:
                await stream.aclose()
    bounded = Limits(max_connections=10, idle_seconds=30.0)
    async with served(tmp_path, AGENTS, limits=bounded) as serving:
        held = [await trio.open_unix_socket(str(serving.socket_path)) for _ in range(10)]
        try:
            with trio.fail_after(30):
                await trio.testing.wait_all_tasks_blocked()
                async with HostClient.connect(root=tmp_path) as client:
                    with pytest.raises(TooManyConnections):
                        await client.sessions()
                for stream in held[:5]:
                    await stream.aclose()
                while True:  # the Host notices the closed connections
                    try:
                        async with HostClient.connect(root=tmp_path) as client:
                            assert await client.sessions() == ()
                        break
                    except TooManyConnections:
                        await trio.sleep(0.05)
        finally:
            for stream in held:
                await stream.aclose()


# -- one Host per root -------------------------------------------------------------------


async def test_a_second_serve_of_a_root_names_the_holder(tmp_path: Path) -> None:
    async with served(tmp_path, AGENTS):
        stop = trio.Event()
        with pytest.raises(HostLocked, match=f"pid {os.getpid()}"):
            await serve(ServeOptions(root=tmp_path), AGENTS, stop=stop)
    async with served(tmp_path, AGENTS):  # released when the first one stopped
        pass


def test_listen_options_are_checked() -> None:
    root = Path("/tmp")
    with pytest.raises(ServeError, match="HOST:PORT"):
        Listen.parse("8080")
    assert Listen.parse("[::1]:8080") == Listen("::1", 8080)
    assert Listen.parse("localhost:1").loopback and Listen.parse("127.0.0.2:1").loopback
    with pytest.raises(ServeError, match="--public"):
        ServeOptions(root=root, listen=Listen("0.0.0.0", 80)).check()
    with pytest.raises(ServeError, match="TLS"):
        ServeOptions(root=root, listen=Listen("0.0.0.0", 80), public=True).check()
    with pytest.raises(ServeError, match="both"):
        ServeOptions(root=root, listen=Listen("127.0.0.1", 80), cert=root).check()
    ServeOptions(root=root, listen=Listen("0.0.0.0", 80), public=True, cert=root, key=root).check()
