"""`emelex serve --store postgresql://...`: a served Host keeps its sessions in the
PostgreSQL database, and a second served root on the same database sees them."""

from __future__ import annotations

from pathlib import Path

import trio

from emelex.service import HostClient
from emelex.testing import Say
from tests.service.conftest import served
from tests.service.test_host import agent
from tests.service.test_transport_contract import until_idle


async def test_served_hosts_share_a_postgresql_store(tmp_path: Path, postgres_dsn: str) -> None:
    agents = {"helper": agent([Say("stored in postgres")])}
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    async with served(tmp_path / "a", agents, store=postgres_dsn):
        async with HostClient.connect(root=tmp_path / "a") as client:
            session = (await client.create_session("helper", tmp_path, operation="c")).session
            await client.send(session.id, "hello", operation="s")
            await until_idle(client, session.id)
    async with served(tmp_path / "b", agents, store=postgres_dsn):
        async with HostClient.connect(root=tmp_path / "b") as client:
            with trio.fail_after(30):
                page = await client.history(session.id)
            assert [r.body for r in page.rows] == ["hello", "stored in postgres"]
    assert not (tmp_path / "a" / ".emelex" / "host.db").exists()
