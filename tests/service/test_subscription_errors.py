"""Every subscription answers its typed error over the wire (not "internal error of the
Host"): the error raised inside the stream's nursery reaches the client as itself."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trio

from emelex.contracts import WorkspacePath
from emelex.service import HostClient, InvalidWorkspacePath, UnknownSession
from tests.service.conftest import served
from tests.service.test_host import agent

SUBSCRIPTIONS: dict[str, Callable[[HostClient, str], Any]] = {
    "watch": lambda c, s: c.watch(s),
    "watchLive": lambda c, s: c.watch(s, live=True),
    "watchDiagnostics": lambda c, s: c.watch_diagnostics(s),
    "watchFiles": lambda c, s: c.watch_files(s),
    "readFile": lambda c, s: c.read_file(s, WorkspacePath.of(b"a.txt")),
}


@pytest.mark.parametrize("name", sorted(SUBSCRIPTIONS))
async def test_a_subscription_of_an_unknown_session_raises_unknown_session(
    tmp_path: Path, name: str, caplog: pytest.LogCaptureFixture
) -> None:
    async with (
        served(tmp_path, {"helper": agent()}) as _,
        HostClient.connect(root=tmp_path) as client,
    ):
        with trio.fail_after(30), pytest.raises(UnknownSession):
            async with SUBSCRIPTIONS[name](client, "s-nobody") as updates:
                async for _update in updates:
                    pass
    # A client's mistake is one line of the log, never a traceback.
    assert not [r for r in caplog.records if r.exc_info], [r.message for r in caplog.records]


async def test_reading_a_hidden_file_is_refused_by_name(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "config").write_text("[core]\n")
    async with (
        served(tmp_path, {"helper": agent()}) as _,
        HostClient.connect(root=tmp_path) as client,
    ):
        session = (await client.create_session("helper", tmp_path, operation="c")).session
        path = WorkspacePath.of(b".git/config")
        with trio.fail_after(30), pytest.raises(InvalidWorkspacePath):
            async with client.read_file(session.id, path) as updates:
                async for _update in updates:
                    pass
