"""Peers that never finish their request lose their slot: a body announced and never
sent, and WebSocket upgrades that never send their token frame, meet deadlines, and the
owner's requests are answered meanwhile."""

from __future__ import annotations

import json
from pathlib import Path

import trio

from emelex.service import HostClient, RequestTimedOut, TooManyConnections
from emelex.service.transport._client import rebuild_error
from emelex.service.transport._http import Limits
from emelex.service.transport._websocket import WebSocket
from emelex.testing import Say
from tests.service.conftest import served
from tests.service.test_host import agent

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
