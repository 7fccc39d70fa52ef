"""``emelex serve`` stopped by SIGTERM and started again keeps a session whose model
called a tool nobody declared: the next send completes."""

from __future__ import annotations

import signal
from pathlib import Path

import trio

from emelex.contracts import QueueChanged
from emelex.service import HostClient
from tests.cli.test_serve import _package, _script, _serving


async def until_idle(client: HostClient, session_id: str) -> None:
    with trio.fail_after(60):
        async with client.watch(session_id) as updates:
            async for update in updates:
                if isinstance(update, QueueChanged) and not update.queue.entries:
                    return


async def stop(process: trio.Process) -> None:
    process.send_signal(signal.SIGTERM)
    with trio.fail_after(60):
        await process.wait()
    assert process.returncode == 0


async def test_an_unknown_tool_call_survives_sigterm_and_restart(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    _package(root)
    first = _script(
        tmp_path / "first.json", [[{"call": "no_such_tool", "arguments": {}}], [{"say": "sorry"}]]
    )
    async with _serving(root, first) as process:
        async with HostClient.connect(root=root) as client:
            session = (await client.create_session("helper", tmp_path, operation="c")).session
            await client.send(session.id, "go", operation="s1")
            await until_idle(client, session.id)
            rows = (await client.history(session.id)).rows
        assert [r.tool_name for r in rows if r.role == "tool"] == ["no_such_tool"]
        await stop(process)
    second = _script(tmp_path / "second.json", [[{"say": "after restart"}]])
    async with _serving(root, second) as process:
        async with HostClient.connect(root=root) as client:
            await client.send(session.id, "once more", operation="s2")
            await until_idle(client, session.id)
            rows = (await client.history(session.id)).rows
        assert [(r.role, r.body) for r in rows[-2:]] == [
            ("user", "once more"),
            ("assistant", "after restart"),
        ]
        await stop(process)
