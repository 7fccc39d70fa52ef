"""The PostgreSQL store on a silent network (its connections through a proxy the test
freezes): a call its caller gives up on returns at once, on a worker thread as on the
Trio-thread reader, and the store works again after the thaw; pages read concurrently
(the reader busy, the others on the worker threads) agree."""

from __future__ import annotations

import psycopg.conninfo
import trio

from emelex.model import Message
from emelex.runtime import open_supervisor
from emelex.store import Position
from emelex.store.postgres import open_postgres_store

from ..freezable_proxy import open_freezable_proxy
from ..postgres_server import PostgresServer

TURN = [Message("user", "hi"), Message("assistant", "hello")]


async def test_a_call_given_up_on_a_silent_network_returns_and_the_store_recovers(
    postgres_server: PostgresServer, postgres_dsn: str
) -> None:
    dbname = psycopg.conninfo.conninfo_to_dict(postgres_dsn)["dbname"]
    target = postgres_server.socket_dir / ".s.PGSQL.5432"
    async with open_supervisor("t"), open_freezable_proxy(target) as proxy:
        dsn = f"host=127.0.0.1 port={proxy.port} user=postgres dbname={dbname}"
        async with open_postgres_store(dsn, pool_size=1, statement_seconds=60) as store:
            await store.create_session("s1", "{}")
            await store.append_turn("s1", "t1", TURN)
            await store.history_page("s1")  # the reader's connection is open
            proxy.freeze()
            with trio.fail_after(10):  # far less than statement_seconds
                with trio.move_on_after(0.3) as worker_call:
                    await store.last_sequence("s1")  # on the worker thread
                with trio.move_on_after(0.3) as reader_call:
                    await store.history_page("s1")  # on the Trio thread
            assert worker_call.cancelled_caught and reader_call.cancelled_caught
            proxy.thaw()
            with trio.fail_after(30):
                # Both connections were closed: the next calls open new ones.
                assert await store.last_sequence("s1") == 3
                page = await store.history_page("s1")
            assert [r.fields.body for r in page.rows] == ["hi", "hello"]
            assert proxy.connections >= 4


async def test_pages_read_at_once_agree_whichever_connection_reads_them(
    postgres_dsn: str,
) -> None:
    async with open_supervisor("t"), open_postgres_store(postgres_dsn, pool_size=2) as store:
        await store.create_session("s1", "{}")
        for n in range(30):
            await store.append_turn("s1", f"t{n}", TURN)
        cursors = [None, *(Position(n, 0) for n in range(1, 60, 7))]
        alone = [await store.history_page("s1", after=c, limit=5) for c in cursors]
        together: dict[int, object] = {}

        async def read(n: int) -> None:
            together[n] = await store.history_page("s1", after=cursors[n], limit=5)

        async with trio.open_nursery() as nursery:
            for n in range(len(cursors)):
                nursery.start_soon(read, n)
        assert [together[n] for n in range(len(cursors))] == alone
        events = await store.events_after("s1", 10, limit=3)
        assert [e.sequence for e in events] == [11, 12, 13]


async def test_store_connections_bound_statements_and_idle_transactions(
    postgres_dsn: str,
) -> None:
    async with (
        open_supervisor("t"),
        open_postgres_store(postgres_dsn, pool_size=1, statement_seconds=7) as store,
    ):

        def settings(db: psycopg.Connection[tuple[object, ...]]) -> object:
            return db.execute(
                "SELECT current_setting('statement_timeout'),"
                " current_setting('idle_in_transaction_session_timeout')"
            ).fetchone()

        assert await store._run(settings) == ("7s", "3500ms")
