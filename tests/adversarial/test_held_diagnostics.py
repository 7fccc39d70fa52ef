"""Issue 18, attacks that held: the diagnostics socket.

The socket is owner-only; a client that floods requests and never reads its answers,
sends bytes that are not text, or a symlink planted at the socket path must neither
stall the endpoint for other clients nor touch the file a link points to.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest
import trio

from emelex.runtime import open_supervisor, serve_diagnostics


async def answer(stream: trio.SocketStream) -> dict[str, Any]:
    data = b""
    while b"\n" not in data:
        chunk = await stream.receive_some(65536)
        assert chunk, "connection closed before a full line"
        data += chunk
    result: dict[str, Any] = json.loads(data.split(b"\n", 1)[0])
    return result


async def test_a_client_that_never_reads_does_not_stall_the_others(tmp_path: Path) -> None:
    path = tmp_path / "d.sock"
    with trio.fail_after(20):
        async with open_supervisor("app") as sup, trio.open_nursery() as nursery:
            await nursery.start(serve_diagnostics, sup, path)
            assert stat.S_IMODE(os.lstat(path).st_mode) == 0o600
            greedy = await trio.open_unix_socket(str(path))
            with trio.move_on_after(1):  # until the answers fill both socket buffers
                for _ in range(100_000):
                    await greedy.send_all(b"snapshot\n")
            other = await trio.open_unix_socket(str(path))
            await other.send_all(b"ping\n")
            assert (await answer(other))["ok"] is True
            await other.send_all(b"\xff\xfe\x00garbage\n")
            assert "error" in await answer(other)
            await other.send_all(b"ping\n")
            assert (await answer(other))["ok"] is True  # still served after garbage
            await other.aclose()
            await greedy.aclose()
            nursery.cancel_scope.cancel()


async def test_a_symlink_at_the_socket_path_is_not_followed(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    link = tmp_path / "d.sock"
    link.symlink_to(victim)
    with trio.fail_after(10):
        async with open_supervisor("app") as sup:
            with pytest.raises(FileExistsError):
                await serve_diagnostics(sup, link)
    assert link.is_symlink() and victim.read_text() == "keep me"
