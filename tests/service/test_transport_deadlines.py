"""Peers that never finish their request lose their slot: a body announced and never
sent, and WebSocket upgrades that never send their token frame, meet deadlines, and the
owner's requests are answered meanwhile."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import trio

from emelex.contracts import to_wire
from emelex.service import (
    AttachmentError,
    HostClient,
    RequestTimedOut,
    TooManyConnections,
    TransportError,
)
from emelex.service.transport._client import rebuild_error
from emelex.service.transport._http import Limits
from emelex.service.transport._resource import RESOURCE_TYPE
from emelex.service.transport._websocket import WebSocket
from emelex.testing import Say
from tests.service.conftest import served
from tests.service.test_host import agent, meta

AGENTS = {"helper": agent(*[[Say(f"answer {n}")] for n in range(5)])}
SHORT = Limits(body_seconds=0.5, first_frame_seconds=0.5, max_unauthenticated=4)
#: The crowd's first frames may wait long enough for all of it to arrive, even on a
#: loaded machine, so the ones past the bound are refused while the first ones wait.
CROWD = Limits(first_frame_seconds=5.0, max_unauthenticated=4)


async def _head_only(socket_path: Path) -> tuple[int, dict[str, object]]:
    """A request that announces a body and sends none of it."""
    stream = await trio.open_unix_socket(str(socket_path))
    async with stream:
        await stream.send_all(
            b"POST /v1/op/listSessions HTTP/1.1\r\nHost: emelex\r\n"
            b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n"
        )
        data = b""
        while b"\r\n\r\n" not in data or not data.rstrip().endswith(b"}"):
            chunk = await stream.receive_some(65536)
            if not chunk:
                break
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)


async def test_a_body_that_never_arrives_is_answered_408(tmp_path: Path) -> None:
    async with served(tmp_path, AGENTS, limits=SHORT) as serving:
        with trio.fail_after(10):
            status, body = await _head_only(serving.socket_path)
        assert status == 408
        assert isinstance(rebuild_error(body, status), RequestTimedOut)


async def test_upgrades_without_a_token_frame_neither_wait_forever_nor_crowd_out_the_owner(
    tmp_path: Path,
) -> None:
    async with served(tmp_path, AGENTS, tcp=True, limits=CROWD) as serving:
        assert serving.url is not None and serving.token_path is not None
        token = serving.token_path.read_text().strip()
        host, port = serving.url.removeprefix("http://").split(":")

        async def silent_upgrade() -> BaseException | None:
            stream = await trio.open_tcp_stream(host, int(port))
            socket_ = await WebSocket.open(
                stream, host=host, target="/v1/sub/watch", headers=[], max_message=1 << 20
            )
            try:
                # Never a frame from here: the Host ends it with its error frame.
                text = await socket_.receive_text()
            finally:
                await socket_.aclose()
            return None if text is None else rebuild_error(json.loads(text), 0)

        ended: list[BaseException | None] = []

        async def one() -> None:
            ended.append(await silent_upgrade())

        async with HostClient.connect(serving.url, token=token) as owner:
            with trio.fail_after(20):
                async with trio.open_nursery() as nursery:
                    for _ in range(12):  # three times the unauthenticated bound
                        nursery.start_soon(one)
                    # The owner is served while they wait.
                    for _ in range(5):
                        assert await owner.sessions() == ()
        assert len(ended) == 12
        kinds = {type(e) for e in ended}
        # Beyond the bound refused at once; the rest ended by the first-frame deadline.
        assert kinds <= {TooManyConnections, RequestTimedOut}, ended
        assert TooManyConnections in kinds and RequestTimedOut in kinds


async def test_a_resource_that_stops_arriving_is_answered_408(tmp_path: Path) -> None:
    """Each chunk of an Executor resource has the body deadline too: a client that stalls
    in the middle of its attachments loses its slot."""
    notes = b"milk\neggs\n"
    request = {
        "agent": "helper",
        "text": "go",
        "operation": "stall",
        "attachments": [to_wire(meta("notes.txt", notes))],
    }
    head = json.dumps(request, separators=(",", ":")).encode() + b"\n"
    async with served(tmp_path, AGENTS, limits=SHORT) as serving:
        stream = await trio.open_unix_socket(str(serving.socket_path))
        async with stream:
            await stream.send_all(
                b"POST /v1/op/execute HTTP/1.1\r\nHost: emelex\r\nTransfer-Encoding: chunked\r\n"
                b"Content-Type: "
                + RESOURCE_TYPE.encode()
                + b"\r\n\r\n"
                + f"{len(head) + 4:x}\r\n".encode()
                + head
                + b"milk\r\n"
            )  # four bytes of ten, then nothing
            data = b""
            with trio.fail_after(10):
                while not (b"\r\n\r\n" in data and data.rstrip().endswith(b"}")):
                    chunk = await stream.receive_some(65536)
                    if not chunk:
                        break
                    data += chunk
    status_line, _, body = data.partition(b"\r\n\r\n")
    status = int(status_line.split()[1])
    assert status == 408
    assert isinstance(rebuild_error(json.loads(body), status), RequestTimedOut)


# httpx's own body generator is left suspended when the Host closes the connection in the
# middle of the upload (httpcore stops writing and reads the answer): Trio reports it when
# it is collected. The client's resource itself is closed (RequestWithResource.aclose).
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
async def test_past_the_discard_bound_the_connection_closes_after_the_answer(
    tmp_path: Path,
) -> None:
    """A refused request whose resource goes on past ``max_discard_bytes`` ends at once
    (its connection closes; the client may see the answer or a closed connection, never
    a stalled write), and the Host serves the next request."""
    notes = b"milk\neggs\n"
    limits = Limits(max_discard_bytes=1024 * 1024)
    async with served(tmp_path, AGENTS, limits=limits):
        async with HostClient.connect(root=tmp_path) as client:
            with trio.fail_after(30):
                try:
                    await client.execute(
                        "helper",
                        "go",
                        operation="long",
                        attachments=[meta("notes.txt", notes)],
                        resource=notes + b"x" * (20 * 1024 * 1024),
                    )
                except (AttachmentError, TransportError) as exc:
                    ended: Exception = exc
            assert isinstance(ended, AttachmentError | TransportError)
            with trio.fail_after(30):
                receipt = await client.execute(
                    "helper",
                    "go",
                    operation="fine",
                    attachments=[meta("notes.txt", notes)],
                    resource=notes,
                )
            assert receipt.invocation_id
