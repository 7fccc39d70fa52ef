"""A lease holder cut off from the database by a network partition (its connections
go through a proxy the test freezes just as the turn's commit is sent): its lease actor
gives the lease up by its own clock although its renewal never returns, another Host
takes the session and runs the queued work, and after the thaw the old holder's stalled
commit reaches the database, is refused by the fencing token, and the turn is
abandoned; nothing is committed twice and the new holder's history is intact."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import psycopg.conninfo
import pytest
import trio

from emelex.agent import DenyAll
from emelex.app import Agent, RestartMode
from emelex.model import Capabilities, GenerationRequest
from emelex.runtime import open_supervisor
from emelex.service import Host, ScaleOut
from emelex.store.postgres import open_postgres_store
from emelex.testing import Say, ScriptedModel
from tests.freezable_proxy import open_freezable_proxy
from tests.postgres_server import PostgresServer
from tests.service.test_cluster import known_everywhere, rows_seen
from tests.service.test_failover import ROW_KINDS, drained, log_of

LEASE = 1.0
FAST = ScaleOut(lease_seconds=LEASE, catch_up_seconds=0.2)


class GatedModel:
    """A scripted model whose first generation waits for ``gate`` (``reached`` is set
    when it starts waiting): the test decides when the turn's commit is sent."""

    def __init__(self, inner: ScriptedModel) -> None:
        self._inner = inner
        self.gate = trio.Event()
        self.reached = trio.Event()

    @property
    def capabilities(self) -> Capabilities:
        return self._inner.capabilities

    @asynccontextmanager
    async def generate(self, request: GenerationRequest) -> AsyncIterator[object]:
        self.reached.set()
        await self.gate.wait()
        async with self._inner.generate(request) as stream:
            yield stream


def agent(model: object, on_restart: RestartMode = "resume") -> Agent:
    builder = Agent.builder().name("helper").instructions("Help.").model(model)  # type: ignore[arg-type]
    return builder.approver(DenyAll()).on_restart(on_restart).build()


def answers(name: str) -> ScriptedModel:
    return ScriptedModel([[Say(f"{name} answer {n}")] for n in range(10)])


def logged(caplog: pytest.LogCaptureFixture, text: str) -> bool:
    return any(text in record.getMessage() for record in caplog.records)


@pytest.mark.parametrize("on_restart", ["resume", "settle"])
async def test_a_partitioned_holder_loses_its_lease_and_its_commit_is_refused(
    postgres_server: PostgresServer,
    postgres_dsn: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    on_restart: RestartMode,
) -> None:
    caplog.set_level(logging.WARNING, logger="emelex.service")
    gated = GatedModel(answers("a"))
    dbname = psycopg.conninfo.conninfo_to_dict(postgres_dsn)["dbname"]
    target = postgres_server.socket_dir / ".s.PGSQL.5432"
    async with (
        open_supervisor("partition"),
        open_postgres_store(postgres_dsn, pool_size=1) as store,
        open_freezable_proxy(target) as proxy,
    ):
        cut_off = f"host=127.0.0.1 port={proxy.port} user=postgres dbname={dbname}"
        open_a = Host.open(
            tmp_path / "a",
            agents={"helper": agent(gated, on_restart)},
            store=cut_off,
            scale_out=FAST,
        )
        async with open_a as a:
            assert proxy.connections >= 2  # A's pool and listener go through the proxy
            session_id = (await a.create_session("helper", tmp_path, operation="c")).session.id
            await a.send(session_id, "long-task", operation="long")
            with trio.fail_after(20):
                await gated.reached.wait()  # A runs the turn, so it holds the lease
            open_b = Host.open(
                tmp_path / "b",
                agents={"helper": agent(answers("b"), on_restart)},
                store=postgres_dsn,
                scale_out=FAST,
            )
            # B starts now (it finds the turn running, so it cannot take it first).
            async with open_b as b:
                await known_everywhere([b], session_id)
                assert a._cluster is not None and a._cluster.holds(session_id)

                # A's model answers; A sends the turn's commit, which carries the turn's
                # request records with it (one append): the network freezes under it.
                proxy.freeze_at(b"FOR NO KEY UPDATE", 1)
                gated.gate.set()
                with trio.fail_after(20):
                    await proxy.froze.wait()
                await b.send(session_id, "next-task", operation="next")
                seen: list[object] = []
                with trio.fail_after(30):
                    # B takes the lapsed lease, resumes or settles A's turn, runs the
                    # queued send.
                    await rows_seen(b, session_id, 2, seen)  # type: ignore[arg-type]
                before_thaw = await drained(store, session_id, seconds=30)
                # A's lease actor gave the lease up by its clock, its renewal never answered.
                assert logged(caplog, f"the lease of session {session_id} lapsed")
                assert not a._cluster.holds(session_id)
                assert not logged(caplog, "the database refused a write")

                proxy.thaw()
                with trio.fail_after(30):
                    while not logged(caplog, "turn abandoned"):  # noqa: ASYNC110
                        await trio.sleep(0.02)  # A's worker thread delivers the stalled commit
                # The stalled commit reached the database and the fencing token refused it.
                assert logged(caplog, f"session {session_id}: the database refused a write")
                assert proxy.sent_after_thaw > 0
                after = await log_of(store, session_id)
                assert after == before_thaw  # nothing of A's turn committed, nothing twice
                starts = [e.payload["invocationId"] for e in after if e.kind == "queue.started"]
                assert len(starts) == len(set(starts)) == 2
                finished = {
                    e.payload["invocationId"]: e.payload["outcome"]
                    for e in after
                    if e.kind == "queue.finished"
                }
                assert all("a answer" not in str(e.payload) for e in after if e.kind in ROW_KINDS)
                page = await store.history_page(session_id)
                resumed = [e.payload["invocationId"] for e in after if e.kind == "queue.resumed"]
                if on_restart == "resume":
                    # B asked its model again for A's turn: that turn's rows are B's, once.
                    assert sorted(finished.values()) == ["completed", "completed"]
                    assert resumed == starts[:1]
                    expected = ["long-task", "b answer 0", "next-task", "b answer 1"]
                else:
                    assert sorted(finished.values()) == ["completed", "interrupted"]
                    assert resumed == []
                    expected = ["next-task", "b answer 0"]
                assert [r.fields.body for r in page.rows] == expected

                # A's connections recovered (one was shut down mid-renewal): it admits
                # again, and the work runs on the lease holder.
                with trio.fail_after(30):
                    receipt = await a.send(session_id, "again-task", operation="again")
                events = await drained(store, session_id, seconds=30)
                admitted = [e for e in events if e.kind == "queue.admitted"]
                assert [e.payload["operation"] for e in admitted] == ["long", "next", "again"]
                assert admitted[-1].payload["invocationId"] == receipt.invocation_id
                page = await store.history_page(session_id)
                assert [r.fields.body for r in page.rows][: len(expected)] == expected
                assert "again-task" in [r.fields.body for r in page.rows]
