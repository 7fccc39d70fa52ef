"""What only the PostgreSQL store has: leases with fencing tokens, notifications, several
stores on one database, and credentials kept out of errors and tables."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import psycopg
import pytest
import trio

from emelex.model import Message, ToolCall
from emelex.runtime import open_supervisor
from emelex.service._rows import page_row
from emelex.store import (
    Lease,
    LeaseLost,
    NewEvent,
    OperationRecord,
    Position,
    SessionNotFound,
    StoreCorrupt,
    StoreError,
)
from emelex.store.postgres import open_postgres_store, redact_dsn

from ..postgres_server import PostgresServer

TURN = [Message("user", "hi"), Message("assistant", "hello")]


def _lapse(dsn: str, session_id: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as db:
        db.execute(
            "UPDATE leases SET expires_at = now() - interval '1 second' WHERE session_id=%s",
            (session_id,),
        )


async def test_a_lease_fences_every_write_once_another_host_took_it(postgres_dsn: str) -> None:
    async with open_supervisor("t"), open_postgres_store(postgres_dsn, pool_size=2) as store:
        await store.create_session("s1", "{}")
        with pytest.raises(SessionNotFound):
            await store.acquire_lease("nope", "h1", 5)
        first = await store.acquire_lease("s1", "h1", 5)
        assert first is not None and first.token == 1
        assert await store.acquire_lease("s1", "h2", 5) is None  # live: h1 keeps it
        again = await store.acquire_lease("s1", "h1", 5)
        assert again == first  # extending a live lease keeps the token
        await store.append_turn("s1", "t1", TURN, lease=first)
        _lapse(postgres_dsn, "s1")
        assert await store.lease_holder("s1") == ("h1", 1, False)
        second = await store.acquire_lease("s1", "h2", 5)
        assert second is not None and second.token == 2
        with pytest.raises(LeaseLost, match="token 1"):
            await store.append_turn("s1", "t2", TURN, lease=first)
        assert await store.last_sequence("s1") == 3  # nothing of t2
        assert not await store.renew_lease(first, 5)
        assert await store.renew_lease(second, 5)
        await store.append_turn("s1", "t3", TURN, lease=second)
        await store.release_lease(second)
        third = await store.acquire_lease("s1", "h1", 5)
        assert third is not None and third.token == 3
        # Writes without a lease (admissions on any Host) are not fenced.
        await store.append_events("s1", [NewEvent("queue.admitted", None, {"n": 1})])


async def test_a_held_lease_says_when_it_lapses(postgres_dsn: str) -> None:
    """A Host that finds another's lease learns, from the same statement, how long it
    has left: a crashed holder's sessions are taken just after it lapses."""
    async with open_supervisor("t"), open_postgres_store(postgres_dsn, pool_size=2) as store:
        await store.create_session("s1", "{}")
        first = await store.try_lease("s1", "h1", 5)
        assert isinstance(first, Lease) and first.token == 1
        left = await store.try_lease("s1", "h2", 5)
        assert isinstance(left, float) and 4.0 < left <= 5.0
        assert await store.try_lease("s1", "h1", 5) == first  # its holder extends it
        _lapse(postgres_dsn, "s1")
        taken = await store.try_lease("s1", "h2", 5)
        assert isinstance(taken, Lease) and (taken.holder, taken.token) == ("h2", 2)
        with pytest.raises(SessionNotFound):
            await store.try_lease("nope", "h1", 5)


async def test_a_takeover_waits_for_a_fenced_commit_in_flight(postgres_dsn: str) -> None:
    """The token check holds a share lock on the lease row until commit: a Host taking
    the lease over either sees the commit or makes it fail, never neither."""
    async with open_supervisor("t"), open_postgres_store(postgres_dsn, pool_size=3) as store:
        await store.create_session("s1", "{}")
        lease = await store.acquire_lease("s1", "h1", 5)
        assert lease is not None
        _lapse(postgres_dsn, "s1")
        outcomes: list[str] = []

        async def write(n: int) -> None:
            try:
                await store.append_turn("s1", f"t{n}", TURN, lease=lease)
                outcomes.append("committed")
            except LeaseLost:
                outcomes.append("lost")

        async with trio.open_nursery() as nursery:
            for n in range(5):
                nursery.start_soon(write, n)
            taken = await store.acquire_lease("s1", "h2", 5)
        assert taken is not None
        committed = outcomes.count("committed")
        events = await store.events_after("s1", 0, limit=1000)
        assert len(events) == committed * 3
        # After the takeover nothing of h1 commits.
        with pytest.raises(LeaseLost):
            await store.append_turn("s1", "late", TURN, lease=lease)


async def test_receipts_are_exactly_once_across_stores(postgres_dsn: str) -> None:
    async with (
        open_supervisor("t"),
        open_postgres_store(postgres_dsn, pool_size=4) as one,
        open_postgres_store(postgres_dsn, pool_size=4) as two,
    ):
        await one.create_session("s1", "{}")
        record = OperationRecord("op", "d", '{"r": 1}')
        results = []

        async def send(store: object) -> None:
            assert hasattr(store, "append_events")
            results.append(
                await store.append_events(
                    "s1", [NewEvent("queue.admitted", None, {})], operation=record
                )
            )

        async with trio.open_nursery() as nursery:
            for n in range(8):
                nursery.start_soon(send, one if n % 2 else two)
        assert sum(not r.replayed for r in results) == 1
        assert {r.receipt for r in results} == {'{"r": 1}'}
        assert await two.last_sequence("s1") == 1


async def test_appends_from_several_stores_get_dense_ordered_sequences(postgres_dsn: str) -> None:
    async with (
        open_supervisor("t"),
        open_postgres_store(postgres_dsn, pool_size=3) as one,
        open_postgres_store(postgres_dsn, pool_size=3) as two,
    ):
        await one.create_session("s1", "{}")

        async def turns(store: object, name: str) -> None:
            assert hasattr(store, "append_turn")
            for n in range(10):
                await store.append_turn("s1", f"{name}{n}", TURN)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(turns, one, "a")
            nursery.start_soon(turns, two, "b")
        events = await one.events_after("s1", 0, limit=1000)
        assert [e.sequence for e in events] == list(range(1, 61))
        # Each turn's three events are contiguous (one transaction, one row lock).
        for start in range(0, 60, 3):
            assert len({e.turn_id for e in events[start : start + 3]}) == 1
        assert (await two.load_session("s1")).turns == 20


async def test_commits_notify_other_stores_with_session_and_sequence(postgres_dsn: str) -> None:
    async with (
        open_supervisor("t"),
        open_postgres_store(postgres_dsn, pool_size=1) as writer,
        open_postgres_store(postgres_dsn, pool_size=1) as reader,
    ):
        await writer.create_session("s1", "{}")
        async with reader.notifications() as notes:
            await writer.append_turn("s1", "t1", TURN)
            await writer.append_turn("s1", "t2", TURN)
            with trio.fail_after(10):
                seen = [await notes.receive(), await notes.receive()]
        assert seen == [("s1", 3), ("s1", 6)]
        assert await reader.sequences() == {"s1": 6}


async def test_credentials_never_reach_errors_or_tables(
    postgres_server: PostgresServer, postgres_dsn: str
) -> None:
    secret = "pw-Zq81-never-shown"
    postgres_server.psql(f"CREATE ROLE emelex_user LOGIN PASSWORD '{secret}' SUPERUSER")
    dbname = postgres_dsn.rsplit("dbname=", 1)[1]
    dsn = f"host={postgres_server.socket_dir} user=emelex_user password={secret} dbname={dbname}"
    assert secret not in redact_dsn(dsn)
    assert redact_dsn("postgresql://u:" + secret + "@db:5433/x") == "postgresql://u@db:5433/x"
    async with open_supervisor("t"), open_postgres_store(dsn, pool_size=1) as store:
        assert secret not in store.path
        await store.create_session("s1", "{}", {"k": "v"})
        await store.append_turn("s1", "t1", TURN)
        with pytest.raises(StoreError) as caught:
            await store.load_session("nope")
        assert secret not in str(caught.value)
    dump = postgres_server.psql(
        "SELECT string_agg(t::text, ' ') FROM (SELECT * FROM sessions) t", dbname
    ) + postgres_server.psql("SELECT string_agg(t::text, ' ') FROM events t", dbname)
    assert "s1" in dump and secret not in dump
    bad = f"host={postgres_server.socket_dir} user=nobody_here password={secret} dbname=x"
    with pytest.raises(StoreError) as refused:
        async with open_supervisor("t"), open_postgres_store(bad, pool_size=1):
            pass
    assert secret not in str(refused.value) and "cannot open store" in str(refused.value)


@pytest.mark.parametrize("calls", ["not json", "[1]", '{"id": 1}', '[["c1"]]'])
async def test_tool_calls_the_store_did_not_write_are_store_corrupt(
    postgres_dsn: str, calls: str
) -> None:
    """Pages are built without re-checking what the schema fixes; a column it cannot fix
    (the calls' JSON) is checked on every read path, naming the row."""
    call = ToolCall("c1", "read_file", {"path": "n"})
    turn = [
        Message("user", "read"),
        Message("assistant", "", tool_calls=(call,)),
        Message("tool", "text", tool_call_id="c1"),
    ]
    async with open_supervisor("t"), open_postgres_store(postgres_dsn, pool_size=1) as store:
        await store.create_session("s1", "{}")
        await store.append_turn("s1", "t1", turn)
        page = await store.history_page("s1")
        assert page.rows[1].tool_calls[0].arguments == {"path": "n"}
        with psycopg.connect(postgres_dsn, autocommit=True) as db:
            db.execute("UPDATE rows SET tool_calls=%s WHERE source_sequence=2", (calls,))
        reads: dict[str, Callable[[], Awaitable[object]]] = {
            "page": lambda: store.history_page("s1"),
            "page_as": lambda: store.history_page_as("s1", page_row),
            "row": lambda: store.read_row("s1", Position(2, 0)),
            "search": lambda: store.search_candidates("s1", "x", case_sensitive=False),
        }
        for name, read in reads.items():
            with pytest.raises(StoreCorrupt) as caught:
                await read()
            error = caught.value
            assert (error.session_id, error.field) == ("s1", "rows[2,0].tool_calls"), name
            assert isinstance(error, StoreError)
        # The rows around it still read: the damage is confined to its row.
        assert (await store.history_page("s1", limit=1)).rows[0].fields.body == "read"


async def test_a_page_larger_than_one_socket_read_arrives_whole(postgres_dsn: str) -> None:
    """The Trio-thread reader takes what the server already sent before waiting again:
    a page of about 2.5 MB (many buffers) comes back complete and in order."""
    async with open_supervisor("t"), open_postgres_store(postgres_dsn, pool_size=1) as store:
        await store.create_session("s1", "{}")
        bodies = [f"{n}:" + "ä" * 20_000 + f":{n}" for n in range(60)]
        for n, body in enumerate(bodies):
            await store.append_turn("s1", f"t{n}", [Message("user", body)])
        assert store._reader is not None and store._reader._db is None
        with trio.fail_after(30):
            page = await store.history_page("s1", limit=60)
            assert store._reader._db is not None  # read on the Trio thread
            assert [r.fields.body for r in page.rows] == bodies
            assert [r.message().text for r in page.rows] == bodies
            _, built, more = await store.history_page_as("s1", page_row, limit=59)
            assert [r.body for r in built] == bodies[:59] and more
