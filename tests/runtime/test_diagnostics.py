"""The diagnostics endpoint: NDJSON snapshots over a Unix socket."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest
import trio

from emelex.runtime import ActorContext, open_supervisor, serve_diagnostics
from emelex.runtime._diagnostics import MAX_REQUEST_BYTES

_pending: dict[int, bytes] = {}


async def read_line(stream: trio.SocketStream) -> dict[str, Any]:
    """Read one NDJSON object, keeping whatever follows it for the next call."""
    data = _pending.pop(id(stream), b"")
    while b"\n" not in data:
        chunk = await stream.receive_some(65536)
        assert chunk, "connection closed before a full line"
        data += chunk
    line, rest = data.split(b"\n", 1)
    _pending[id(stream)] = rest
    result: dict[str, Any] = json.loads(line)
    return result


async def test_snapshot_over_socket(tmp_path: Path) -> None:
    path = tmp_path / "diag.sock"

    async def worker(ctx: ActorContext) -> None:
        ctx.started()
        await trio.sleep_forever()

    with trio.fail_after(10):
        async with open_supervisor("app") as sup:
            async with sup.open_actor("session", "s1") as session:
                handle = await session.start(worker, kind="tool", name="grep", mailbox=4)
                handle.send_nowait("queued")
                served = await sup.actors.start(
                    lambda ctx: _serve(ctx, sup, path), kind="service", name="diagnostics"
                )
                assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
                stream = await trio.open_unix_socket(str(path))
                async with stream:
                    await stream.send_all(b"ping\nsnapshot\nbogus\n")
                    pong = await read_line(stream)
                    snap = await read_line(stream)
                    bogus = await read_line(stream)
                assert pong["ok"] is True
                assert bogus["error"].startswith("unknown command")
                assert snap["supervisor"] == "app"
                assert snap["pid"] == os.getpid()
                kinds = [root["kind"] for root in snap["roots"]]
                assert kinds == ["session", "service"]
                (tool,) = snap["roots"][0]["children"]
                assert tool["name"] == "grep"
                assert tool["state"] == "running"
                assert tool["mailbox"]["occupancy"] == 1
                assert tool["mailbox"]["capacity"] == 4
                handle.cancel()
                served.cancel()
        assert not path.exists()


async def _serve(ctx: ActorContext, sup: Any, path: Path) -> None:
    async with trio.open_nursery() as nursery:
        await nursery.start(serve_diagnostics, sup, path)
        ctx.started()


async def test_clients_are_bounded_and_requests_limited(tmp_path: Path) -> None:
    path = tmp_path / "d.sock"
    with trio.fail_after(10):
        async with open_supervisor("app") as sup, trio.open_nursery() as nursery:
            bound = await nursery.start(
                lambda task_status: serve_diagnostics(
                    sup, path, max_clients=1, task_status=task_status
                )
            )
            assert bound == str(path)
            first = await trio.open_unix_socket(str(path))
            await first.send_all(b"ping\n")
            assert (await read_line(first))["ok"] is True
            second = await trio.open_unix_socket(str(path))
            assert (await read_line(second))["error"] == "busy"
            await second.aclose()
            await first.aclose()
            third = await trio.open_unix_socket(str(path))
            await third.send_all(b"x" * (MAX_REQUEST_BYTES * 2))
            assert (await read_line(third))["error"] == "request too long"
            await third.aclose()
            nursery.cancel_scope.cancel()


async def test_refuses_to_replace_a_regular_file(tmp_path: Path) -> None:
    path = tmp_path / "not-a-socket"
    path.write_text("keep me")
    async with open_supervisor("app") as sup:
        with pytest.raises(FileExistsError):
            await serve_diagnostics(sup, path)
    assert path.read_text() == "keep me"
