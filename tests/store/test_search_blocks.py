"""Search blocks: the store's candidates, checked by the exact matcher, find exactly what
matching every row finds (the oracle), under a fence, across pages, after migration."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import emelex.store._search as blocks
from emelex.contracts import find_matches
from emelex.model import Message, ToolCall
from emelex.runtime import open_supervisor
from emelex.service._searching import match_rows
from emelex.store import (
    SCHEMA_VERSION,
    NewEvent,
    Position,
    SqliteStore,
    StoreCorrupt,
    open_sqlite_store,
)

# Letters whose simple folding, full folding and lowercase differ, combining marks, word
# and non-word neighbours: where a prefilter that folds differently would lose a match.
ALPHABET = "aAbsSßẞ\u017f\u03c3\u03c2\u03a3iI\u0130\u0131kK\u212aéE\u0301_1 .-\u200d\U0001d400"


@contextmanager
def small_blocks(block: int, scan: int, candidates: int) -> Iterator[None]:
    """Tiny blocks and pages, so a few rows span many of both."""
    names = ("BLOCK_BYTES", "SCAN_BYTES_PER_PAGE", "CANDIDATES_PER_PAGE")
    saved = [getattr(blocks, name) for name in names]
    for name, value in zip(names, (block, scan, candidates), strict=True):
        setattr(blocks, name, value)
    try:
        yield
    finally:
        for name, value in zip(names, saved, strict=True):
            setattr(blocks, name, value)


def message(n: int, text: str, thinking: str | None) -> Message:
    if n % 3 == 0:
        return Message.user(text)
    calls = (ToolCall(f"c{n}", "note", {"text": text, "n": n}),) if n % 3 == 2 else ()
    return Message("assistant", text, reasoning=thinking, tool_calls=calls)


async def oracle(
    store: SqliteStore, query: str, through: int, *, case_sensitive: bool, whole_word: bool
) -> list[tuple[int, int, str, int, int]]:
    """Every hit, by matching every row's fields (what search did before blocks)."""
    hits = []
    after = None
    while True:
        page = await store.history_page("s", through=through, after=after, limit=50)
        for row in page.rows:
            fields = [("body", row.fields.body), ("thinking", row.fields.thinking or "")]
            fields += [
                ("toolArguments", json.dumps(c.arguments, ensure_ascii=False))
                for c in row.tool_calls
            ]
            for name, value in fields:
                for start, end in find_matches(
                    value, query, case_sensitive=case_sensitive, whole_word=whole_word
                ):
                    p = row.position
                    hits.append((p.source_sequence, p.item_index, name, start, end))
        if page.next_after is None:
            return hits
        after = page.next_after


async def searched(
    store: SqliteStore, query: str, through: int, *, case_sensitive: bool, whole_word: bool
) -> tuple[list[tuple[int, int, str, int, int]], int]:
    """Every hit through candidate pages, and the number of pages."""
    hits: list[tuple[int, int, str, int, int]] = []
    after = None
    pages = 0
    while True:
        page = await store.search_candidates(
            "s", query, case_sensitive=case_sensitive, through=through, after=after
        )
        pages += 1
        assert page.through == through
        found, cut = match_rows(
            page.rows, query, case_sensitive=case_sensitive, whole_word=whole_word
        )
        assert cut is None
        for hit in found:
            p = hit.position
            hits.append((p.source_sequence, p.item_index, hit.field, hit.start, hit.end))
        if page.next_after is None:
            return hits, pages
        after = page.next_after


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    texts=st.lists(
        st.tuples(st.text(ALPHABET, max_size=30), st.none() | st.text(ALPHABET, max_size=8)),
        min_size=1,
        max_size=24,
    ),
    query=st.text(ALPHABET, min_size=1, max_size=3),
    case_sensitive=st.booleans(),
    whole_word=st.booleans(),
    block=st.sampled_from([1, 16, 64, 4096]),
)
def test_candidates_then_matcher_equal_matching_every_row(
    tmp_path_factory: pytest.TempPathFactory,
    texts: list[tuple[str, str | None]],
    query: str,
    case_sensitive: bool,
    whole_word: bool,
    block: int,
) -> None:
    path = str(tmp_path_factory.mktemp("blocks") / "s.db")

    async def main() -> None:
        async with open_supervisor("t"), open_sqlite_store(path) as store:
            await store.create_session("s", "{}")
            half = len(texts) // 2
            # Two appends: the second one grows the first one's last block.
            for part in (texts[:half], texts[half:]):
                rows = [message(n, text, thinking) for n, (text, thinking) in enumerate(part)]
                if rows:
                    events = [NewEvent("turn.input", "t", rows=(row,)) for row in rows]
                    await store.append_events("s", events)
            fence = await store.last_sequence("s")
            # Rows appended after the fence are not searched.
            await store.append_events(
                "s", [NewEvent("turn.input", "t", rows=(Message.user(query),))]
            )
            options = {"case_sensitive": case_sensitive, "whole_word": whole_word}
            expected = await oracle(store, query, fence, **options)
            found, pages = await searched(store, query, fence, **options)
            assert found == expected
            if block == 1:
                assert pages >= 1

    with small_blocks(block, scan=block * 2, candidates=3):
        trio.run(main)


async def test_a_page_ends_at_the_candidate_limit_and_resumes_after_it(tmp_path: Path) -> None:
    with small_blocks(64, scan=1 << 20, candidates=2):
        async with open_supervisor("t"), open_sqlite_store(str(tmp_path / "s.db")) as store:
            await store.create_session("s", "{}")
            rows = tuple(Message.user(f"needle {n}") for n in range(5))
            await store.append_events("s", [NewEvent("turn.input", "t", rows=rows)])
            first = await store.search_candidates("s", "needle", case_sensitive=True)
            assert [r.position.item_index for r in first.rows] == [0, 1]
            assert first.next_after == Position(1, 1)
            second = await store.search_candidates(
                "s", "NEEDLE", case_sensitive=False, after=first.next_after
            )
            assert [r.position.item_index for r in second.rows] == [2, 3]
            assert second.rows[0].fields == (("body", "needle 2"), ("thinking", ""))


async def test_a_schema_2_store_gets_its_blocks_on_open(tmp_path: Path) -> None:
    path = str(tmp_path / "s.db")
    async with open_supervisor("t"), open_sqlite_store(path) as store:
        await store.create_session("s", "{}")
        call = ToolCall("c1", "note", {"text": "Straße"})
        rows = (Message.user("find the STRASSE"), Message("assistant", "", tool_calls=(call,)))
        await store.append_events("s", [NewEvent("turn.input", "t", rows=rows)])
    with sqlite3.connect(path) as db:  # as schema 2 left it: no blocks
        db.execute("DROP TABLE search_blocks")
        db.execute("UPDATE meta SET value='2' WHERE key='schema'")
    db.close()
    async with open_supervisor("t"), open_sqlite_store(path) as store:
        page = await store.search_candidates("s", "straße", case_sensitive=False)
        assert [(r.position.item_index, r.fields[-1]) for r in page.rows] == [
            (1, ("toolArguments", '{"text": "Straße"}'))
        ]
        assert (await store.search_candidates("s", "strasse", case_sensitive=False)).rows
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT value FROM meta WHERE key='schema'").fetchone() == (
            str(SCHEMA_VERSION),
        )
    db.close()


@pytest.mark.parametrize(
    "sql",
    [
        "UPDATE search_blocks SET text='not a blob'",
        "UPDATE search_blocks SET text=x'ff'",
        "UPDATE search_blocks SET fields=x'0100000000000000'",
    ],
)
async def test_a_damaged_block_is_store_corrupt(tmp_path: Path, sql: str) -> None:
    path = str(tmp_path / "s.db")
    async with open_supervisor("t"), open_sqlite_store(path) as store:
        await store.create_session("s", "{}")
        await store.append_events(
            "s", [NewEvent("turn.input", "t", rows=(Message.user("a needle here"),))]
        )
    with sqlite3.connect(path) as db:
        db.execute(sql)
    db.close()
    async with open_supervisor("t"), open_sqlite_store(path) as store:
        with pytest.raises(StoreCorrupt) as caught:
            await store.search_candidates("s", "needle", case_sensitive=False)
        assert caught.value.field == "search_blocks"
