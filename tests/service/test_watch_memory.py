"""Watchers that do not read cost the Host about one copy of what they are sent, not
one each: 30 idle WebSocket watchers of a session holding a 30 MB row, over real TCP.

Each watcher is a raw WebSocket that reads its first frames (the queue, the pending
interactions) and the first bytes of the rows frame, then stops reading: the Host has
then encoded that frame and is blocked writing it. The Host runs in this process, so
its resident memory is this process's.
"""

from __future__ import annotations

import gc
import json
import re
from pathlib import Path

import trio
from wsproto import ConnectionType, WSConnection
from wsproto.events import AcceptConnection, Request, TextMessage

from emelex.agent import DenyAll
from emelex.app import Agent
from emelex.contracts import QueueChanged, RowsPublished
from emelex.service import HostClient
from emelex.testing import Say, ScriptedModel
from tests.service.conftest import served

WATCHERS = 30
#: One assistant row of 10 million three-byte characters: 30 MB on the wire.
ROW_CHARS = 10_000_000
ROW_BYTES = 3 * ROW_CHARS


def resident_bytes() -> int:
    status = Path("/proc/self/status").read_text()
    found = re.search(r"^VmRSS:\s+(\d+) kB", status, re.MULTILINE)
    assert found is not None
    return int(found[1]) * 1024


async def idle_watcher(port: int, token: str, session_id: str) -> trio.SocketStream:
    """A watch of ``session_id`` that stops reading once its rows frame has begun."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    ws = WSConnection(ConnectionType.CLIENT)
    headers = [(b"authorization", f"Bearer {token}".encode())]
    await stream.send_all(
        ws.send(Request(host="127.0.0.1", target="/v1/sub/watch", extra_headers=headers))
    )
    finished = 0
    started_rows = False
    while not started_rows:
        data = await stream.receive_some(65536)
        assert data, "the Host closed the watch"
        ws.receive_data(data)
        for event in ws.events():
            if isinstance(event, AcceptConnection):
                request = {"sessionId": session_id, "after": None}
                await stream.send_all(ws.send(TextMessage(data=json.dumps(request))))
            elif isinstance(event, TextMessage):
                assert not event.data.startswith('{"error"'), event.data
                if finished == 2:  # the third message is the rows: it has begun
                    assert '"kind":"rows"' in event.data[:100]
                    started_rows = True
                    break
                if event.message_finished:
                    finished += 1
    return stream


def agent() -> Agent:
    model = ScriptedModel([[Say("日" * ROW_CHARS)]])
    builder = Agent.builder().name("helper").instructions("Help.").model(model)
    return builder.approver(DenyAll()).build()


async def test_idle_watchers_of_a_large_row_share_one_copy(tmp_path: Path) -> None:
    async with served(tmp_path, {"helper": agent()}, tcp=True) as serving:
        assert serving.url is not None and serving.token_path is not None
        token = serving.token_path.read_text().strip()
        port = int(serving.url.rsplit(":", 1)[1].rstrip("/"))
        async with HostClient.connect(serving.url, token=token) as client:
            created = await client.create_session("helper", tmp_path, operation="c")
            session_id = created.session.id
            await client.send(session_id, "Write a lot.", operation="s")
            answered = False
            with trio.fail_after(120):
                async with client.watch(session_id) as updates:
                    async for update in updates:
                        if isinstance(update, RowsPublished):
                            answered |= any(row.role == "assistant" for row in update.rows)
                        if (
                            answered
                            and isinstance(update, QueueChanged)
                            and not update.queue.entries
                        ):
                            break
        gc.collect()
        before = resident_bytes()
        streams: list[trio.SocketStream] = []
        with trio.fail_after(120):
            for _ in range(WATCHERS):
                streams.append(await idle_watcher(port, token, session_id))
        during = resident_bytes()
        for stream in streams:
            await stream.aclose()
    grown = during - before
    print(f"{WATCHERS} idle watchers: +{grown >> 20} MiB resident")
    # Shared by all 30: one decoded page (its 10M-character text, plus the UTF-8 copy
    # CPython caches in it once the text is encoded), the wire text and the frame, about
    # 3.5 copies of the row; then a 64 Ki piece per connection and the allocator's slack.
    # Before, each watcher held its own page, text, frame and framed bytes: ~3 GB.
    assert grown < 8 * ROW_BYTES, f"{WATCHERS} idle watchers grew the Host by {grown >> 20} MiB"
