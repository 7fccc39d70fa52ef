"""Search blocks: the store's candidates, checked by the exact matcher, find exactly what
matching every row finds (the oracle), under a fence, across pages, after migration."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import emelex.store._search as blocks
from emelex.contracts import SearchHit, arguments_text, find_matches
from emelex.contracts._casefold import simple_fold_table
from emelex.model import Message, ToolCall
from emelex.runtime import open_supervisor
from emelex.service.ops._searching import match_rows
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
def small_blocks(block: int, scan: int, candidates: int, misses: int = 16) -> Iterator[None]:
    """Tiny blocks and pages, so a few rows span many of both; closed blocks join up
    to three blocks' bytes and five rows."""
    names = (
        "BLOCK_BYTES",
        "SCAN_BYTES_PER_PAGE",
        "CANDIDATES_PER_PAGE",
        "MAX_ANCHOR_MISSES",
        "CLOSED_BLOCK_BYTES",
        "CLOSED_BLOCK_ROWS",
    )
    values = (block, scan, candidates, misses, 3 * block, 5)
    saved = [getattr(blocks, name) for name in names]
    for name, value in zip(names, values, strict=True):
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
            fields += [("toolArguments", arguments_text(c.arguments)) for c in row.tool_calls]
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
    store: SqliteStore,
    query: str,
    through: int,
    *,
    case_sensitive: bool,
    whole_word: bool,
    spans: bool = False,
) -> tuple[list[tuple[int, int, str, int, int]], int]:
    """Every hit through candidate pages, and the number of pages; with ``spans`` the
    scan matches the rows it can itself (``SearchHit``), as the Host asks it to."""
    hits: list[tuple[int, int, str, int, int]] = []
    after = None
    pages = 0
    while True:
        page = await store.search_candidates_as(
            "s",
            query,
            lambda page: page,
            case_sensitive=case_sensitive,
            through=through,
            after=after,
            spans=spans,
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
    check_search_equals_oracle(
        tmp_path_factory, texts, query, case_sensitive, whole_word, block, misses=16
    )


# ASCII letters that only their case partner folds onto, beside those with non-ASCII
# partners (s: LONG S, k: KELVIN SIGN) and letters that never match as bytes: queries
# drawn from it mix byte needles of every length with the characters that split them.
NEEDLES = "abAB sSkK\u212a\u017f\u00df\u00e9\u00c9_"
FOLDS_ALIKE = {
    c: group
    for group in ("aA", "bB", "sS\u017f", "kK\u212a", "\u00df\u1e9e", "\u00e9\u00c9")
    for c in group
}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    texts=st.lists(
        st.tuples(st.text(NEEDLES, max_size=40), st.none() | st.text(NEEDLES, max_size=8)),
        min_size=1,
        max_size=16,
    ),
    query=st.text(NEEDLES, min_size=1, max_size=6),
    case_sensitive=st.booleans(),
    whole_word=st.booleans(),
    block=st.sampled_from([1, 32, 4096]),
    misses=st.sampled_from([0, 1, 16]),
    data=st.data(),
)
def test_byte_needles_and_rare_byte_anchors_lose_no_match(
    tmp_path_factory: pytest.TempPathFactory,
    texts: list[tuple[str, str | None]],
    query: str,
    case_sensitive: bool,
    whole_word: bool,
    block: int,
    misses: int,
    data: st.DataObject,
) -> None:
    """Case-insensitive byte needles (whole queries and partial runs) and the rare-byte
    anchor with its fallback to ``bytes.find`` after few or many false anchors."""
    # One row holds the query with each character swapped for one that folds alike.
    variant = "".join(data.draw(st.sampled_from(FOLDS_ALIKE.get(c, c))) for c in query)
    at = data.draw(st.integers(0, len(texts) - 1))
    texts = [*texts[:at], (f"a{variant} ", None), *texts[at:]]
    check_search_equals_oracle(
        tmp_path_factory, texts, query, case_sensitive, whole_word, block, misses=misses
    )


def check_search_equals_oracle(
    tmp_path_factory: pytest.TempPathFactory,
    texts: list[tuple[str, str | None]],
    query: str,
    case_sensitive: bool,
    whole_word: bool,
    block: int,
    *,
    misses: int,
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
            if not whole_word:
                assert (await searched(store, query, fence, **options, spans=True))[0] == expected

    with small_blocks(block, scan=block * 2, candidates=3, misses=misses):
        trio.run(main)


async def test_a_page_ends_at_the_candidate_limit_and_resumes_after_it(tmp_path: Path) -> None:
    with small_blocks(64, scan=1 << 20, candidates=2):
        async with open_supervisor("t"), open_sqlite_store(str(tmp_path / "s.db")) as store:
            await store.create_session("s", "{}")
            rows = tuple(Message.user(f"needle {n}") for n in range(5))
            await store.append_events("s", [NewEvent("turn.input", "t", rows=rows)])
            first = await store.search_candidates("s", "needle", case_sensitive=True)
            assert [r.position.item_index for r in first.candidate_rows()] == [0, 1]
            assert first.next_after == Position(1, 1)
            second = await store.search_candidates(
                "s", "NEEDLE", case_sensitive=False, after=first.next_after
            )
            assert [r.position.item_index for r in second.candidate_rows()] == [2, 3]
            assert second.candidate_rows()[0].fields == (("body", "needle 2"), ("thinking", ""))


async def test_a_spans_scan_matches_common_rows_itself(tmp_path: Path) -> None:
    """Body-only rows come as their ``SearchHit``s, at code point offsets on either side
    of long non-ASCII text; a row with more matches than MAX_ROW_HITS, a row with
    thinking and a match that only straddles into the next row are left to the
    matcher."""
    filler = "é" * 40_000  # longer than a block: its row gets a block alone
    many = "needle " * (blocks.MAX_ROW_HITS + 1)
    bodies = [
        f"{filler}needle ü",  # one match near the end: decoded from the end
        f"ü needle {filler}",  # near the start: decoded from the start
        "plain needle",  # ASCII: bytes are code points
        "needle and ü needle",  # two matches: two hits
        "ends with nee",  # "nee" + "dle ..." only straddles into the next row
        "dle here",
        many,  # too many matches for hits: a candidate row
    ]
    async with open_supervisor("t"), open_sqlite_store(str(tmp_path / "s.db")) as store:
        await store.create_session("s", "{}")
        rows = [Message.user(body) for body in bodies]
        rows.append(Message("assistant", "a needle", reasoning="why"))
        await store.append_events("s", [NewEvent("turn.input", "t", rows=tuple(rows))])
        page = await store.search_candidates_as(
            "s", "needle", lambda page: page, case_sensitive=True, spans=True
        )
    assert page.next_after is None
    assert [
        (h.position.source_sequence, h.position.item_index, h.start, h.end)
        if isinstance(h, SearchHit)
        else h.position.item_index
        for h in page.rows
    ] == [
        (1, 0, 40_000, 40_006),
        (1, 1, 2, 8),
        (1, 2, 6, 12),
        (1, 3, 0, 6),
        (1, 3, 13, 19),
        6,
        7,
    ]


async def test_a_spans_scan_matches_any_case_when_the_bytes_decide(tmp_path: Path) -> None:
    """Any case: a folded query of ASCII characters that only their case partners fold
    to matches in the lowered bytes, so common rows come as hits; a query with ``s``
    (LONG S folds to it) leaves them to the matcher."""
    async with open_supervisor("t"), open_sqlite_store(str(tmp_path / "s.db")) as store:
        await store.create_session("s", "{}")
        rows = tuple(Message.user(body) for body in ("é A NeEdLe", "needle", "\u017f NEEDLES"))
        await store.append_events("s", [NewEvent("turn.input", "t", rows=rows)])

        async def scan(query: str) -> list[object]:
            page = await store.search_candidates_as(
                "s", query, lambda page: page, case_sensitive=False, spans=True
            )
            return [
                (h.position.item_index, h.start, h.end)
                if isinstance(h, SearchHit)
                else h.position.item_index
                for h in page.rows
            ]

        assert await scan("NEEDLE") == [(0, 4, 10), (1, 0, 6), (2, 2, 8)]
        # "s" (LONG S folds to it): every row holding "needle" is left to the matcher.
        assert await scan("needles") == [0, 1, 2]


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
        assert (1, ("toolArguments", '{"text":"Straße"}')) in [
            (r.position.item_index, r.fields[-1]) for r in page.candidate_rows()
        ]
        hits, _ = match_rows(page.rows, "straße", case_sensitive=False, whole_word=False)
        assert [(h.position.item_index, h.field, h.call, h.start) for h in hits] == [
            (1, "toolArguments", 0, 9)
        ]
        assert (await store.search_candidates("s", "strasse", case_sensitive=False)).rows
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT value FROM meta WHERE key='schema'").fetchone() == (
            str(SCHEMA_VERSION),
        )
    db.close()


async def test_a_schema_6_store_reindexes_tool_arguments_as_their_canonical_text(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Schema 6 indexed arguments as ``json.dumps`` spaced them; after the migration a
    hit's offsets count in ``arguments_text``, and rows without calls keep their
    blocks."""
    path = str(tmp_path / "s.db")
    call = ToolCall("c1", "note", {"text": "milk", "n": 2})
    with monkeypatch.context() as patch:
        patch.setattr(blocks, "arguments_text", lambda a: json.dumps(a, ensure_ascii=False))
        async with open_supervisor("t"), open_sqlite_store(path) as store:
            for session_id in ("plain", "calls"):
                await store.create_session(session_id, "{}")
            plain = (Message.user("just words"), Message("assistant", "words back"))
            await store.append_events("plain", [NewEvent("turn.input", "t", rows=plain)])
            rows = (Message.user("note"), Message("assistant", "", tool_calls=(call,)))
            await store.append_events("calls", [NewEvent("turn.input", "t", rows=rows)])
            spaced = await store.search_candidates("calls", '"text": "milk"', case_sensitive=True)
            assert spaced.rows  # as schema 6 indexed it
    with sqlite3.connect(path) as db:
        db.execute("UPDATE meta SET value='6' WHERE key='schema'")
        plain_blocks = db.execute(
            "SELECT rows, fields, text FROM search_blocks WHERE session_id='plain'"
        ).fetchall()
    db.close()
    async with open_supervisor("t"), open_sqlite_store(path) as store:
        assert not (await store.search_candidates("calls", '"n": 2', case_sensitive=True)).rows
        page = await store.search_candidates("calls", '"text":"milk"', case_sensitive=True)
        hits, _ = match_rows(page.rows, '"text":"milk"', case_sensitive=True, whole_word=False)
        assert [(h.field, h.call, h.start, h.end) for h in hits] == [("toolArguments", 0, 1, 14)]
        assert (await store.search_candidates("plain", "words", case_sensitive=True)).rows
    kept = "SELECT rows, fields, text FROM search_blocks WHERE session_id='plain'"
    assert select(path, kept) == plain_blocks
    assert select(path, "SELECT value FROM meta WHERE key='schema'") == [(str(SCHEMA_VERSION),)]


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


@settings(max_examples=300, deadline=None)
@given(
    haystack=st.binary(max_size=80).map(lambda b: bytes(x % 4 + 0x61 for x in b)),
    needle=st.binary(min_size=1, max_size=4).map(lambda b: bytes(x % 4 + 0x61 for x in b)),
    start=st.integers(0, 90),
    end=st.integers(0, 90),
    misses=st.sampled_from([0, 1, 2, 16]),
)
def test_byte_finder_finds_what_bytes_find_finds(
    haystack: bytes, needle: bytes, start: int, end: int, misses: int
) -> None:
    with small_blocks(4096, scan=1 << 20, candidates=1000, misses=misses):
        expected = haystack.find(needle, start, end)
        assert blocks.ByteFinder(needle).find(haystack, start, end) == expected


def test_byte_finder_anchors_on_the_rarest_byte() -> None:
    finder = blocks.ByteFinder(b"RareNeedle")
    assert (finder.anchor, finder.offset) == (b"R", 0)
    assert blocks.ByteFinder(b"the caf\xc3\xa9").anchor == b"\xc3"
    with pytest.raises(ValueError, match="empty"):
        blocks.ByteFinder(b"")


@pytest.mark.parametrize(
    ("query", "case_sensitive", "needle"),
    [
        ("RareNeedle", True, (b"RareNeedle", False)),
        ("Straße", True, ("Straße".encode(), False)),
        ("RareNeedle", False, (b"rareneedle", True)),
        # s and k have non-ASCII partners (LONG S, KELVIN SIGN): they split the run.
        ("Straße", False, (b"tra", True)),
        ("ASK", False, (None, False)),  # a run too short to select rows
        ("ß", False, (None, False)),
        ("K", False, (None, False)),
        ("ab-cd", False, (b"ab-cd", True)),
    ],
)
def test_byte_needles(query: str, case_sensitive: bool, needle: tuple[bytes | None, bool]) -> None:
    assert blocks.byte_needle(query, case_sensitive=case_sensitive) == needle


def test_no_other_code_point_folds_onto_an_ascii_character_but_s_and_k() -> None:
    table = simple_fold_table()
    onto_ascii = {chr(v) for k, v in table.items() if k >= 0x80 and v < 0x80}
    assert onto_ascii == blocks.ASCII_FOLD_TARGETS


# -- the search segment: closed blocks' text in a file beside the store ---------------------


def select(path: str, sql: str) -> list[Any]:
    """The rows of one query on the closed store at ``path``."""
    with sqlite3.connect(path) as db:
        found = db.execute(sql).fetchall()
    db.close()
    return found


def segment_rows(path: str) -> list[tuple[bytes, int | None, int | None]]:
    return select(
        path,
        "SELECT text, segment_offset, segment_length FROM search_blocks"
        " ORDER BY first_sequence, first_index",
    )


Hits = list[tuple[int, int, str, int, int]]


def fill_and_search(path: str, texts: list[str], query: str) -> tuple[Hits, Hits]:
    """Append ``texts`` (one event each, to session "s", created when missing), then
    search case-sensitively: the hits through candidate pages and the oracle's."""
    return trio.run(_fill_and_search, path, texts, query)


async def _fill_and_search(path: str, texts: list[str], query: str) -> tuple[Hits, Hits]:
    async with open_supervisor("t"), open_sqlite_store(path) as store:
        if not await store.list_sessions():
            await store.create_session("s", "{}")
        if texts:
            events = [NewEvent("turn.input", "t", rows=(Message.user(t),)) for t in texts]
            await store.append_events("s", events)
        fence = await store.last_sequence("s")
        options = {"case_sensitive": True, "whole_word": False}
        found, _pages = await searched(store, query, fence, **options)
        return found, await oracle(store, query, fence, **options)


TEXTS = [f"row {n} has a needle and é {n}" for n in range(40)]


def test_closed_blocks_keep_their_text_in_the_segment(tmp_path: Path) -> None:
    path = str(tmp_path / "s.db")
    with small_blocks(64, scan=256, candidates=7):
        found, expected = fill_and_search(path, TEXTS[:20], "needle")
        assert found == expected and len(found) == 20
        # Two appends: the second one closes the block the first left open.
        found, expected = fill_and_search(path, TEXTS[20:], "é 3")
        assert found == expected and len(found) == 11
    blocks = segment_rows(path)
    *closed, newest = blocks
    assert closed and all(text == b"" and offset is not None for text, offset, _ in closed)
    assert newest[0] and newest[1] is None  # the newest block still grows in SQLite
    ends = [(offset or 0) + (length or 0) for _, offset, length in closed]
    assert ends == sorted(ends)
    assert Path(path + "-search").stat().st_size == ends[-1]
    assert oct(Path(path + "-search").stat().st_mode & 0o777) == "0o600"


def test_closed_blocks_join_while_they_lie_back_to_back(tmp_path: Path) -> None:
    """A closed block joins the session's last closed block when its text lands right
    after it and both fit the closed limits; another session's block in between, or
    bytes no block names, keep them apart."""
    path = str(tmp_path / "s.db")

    async def append(session_id: str, texts: list[str]) -> None:
        async with open_supervisor("t"), open_sqlite_store(path) as store:
            if session_id not in [s.id for s in await store.list_sessions()]:
                await store.create_session(session_id, "{}")
            events = [NewEvent("turn.input", "t", rows=(Message.user(t),)) for t in texts]
            await store.append_events(session_id, events)

    with small_blocks(64, scan=256, candidates=7):
        trio.run(append, "s", TEXTS[:20])
        trio.run(append, "other", TEXTS[:10])  # its closed blocks land in between
        found, expected = fill_and_search(path, TEXTS[20:], "needle")
    assert found == expected and len(found) == len(TEXTS)
    closed = select(
        path,
        "SELECT session_id, rows, segment_offset, segment_length FROM search_blocks"
        " WHERE segment_offset IS NOT NULL ORDER BY session_id, first_sequence",
    )
    mine = [(offset, length, len(rows) // 32) for sid, rows, offset, length in closed if sid == "s"]
    # Up to three blocks' bytes and five rows each; some joined, and none across the
    # other session's blocks.
    assert all(length <= 3 * 64 and count <= 5 for _, length, count in mine)
    assert any(length > 64 for _, length, _ in mine)
    theirs = [(offset, offset + length) for sid, _, offset, length in closed if sid != "s"]
    for offset, length, _ in mine:
        assert not any(offset < end and start < offset + length for start, end in theirs)


def test_closed_blocks_keep_latin1_text_when_every_character_fits(tmp_path: Path) -> None:
    """A closed block whose characters all fit one byte is stored in Latin-1 (its byte
    offsets are then character offsets); one with any other character stays UTF-8, and
    blocks of the two kinds never join. Searches find the same either way."""
    path = str(tmp_path / "s.db")
    wide = [text.replace("é", "ő") for text in TEXTS]  # "ő" has no Latin-1 form
    with small_blocks(64, scan=256, candidates=7):
        fill_and_search(path, TEXTS[:20] + wide[:20] + TEXTS[20:], "needle")
        for query in ("é 3", "ő 1", "needle and é", "1"):
            found, expected = fill_and_search(path, [], query)
            assert found == expected and found, query
    closed = select(
        path,
        "SELECT first_sequence, last_sequence, segment_offset, segment_length,"
        " segment_latin1 FROM search_blocks WHERE segment_offset IS NOT NULL"
        " ORDER BY first_sequence",
    )
    segment = Path(path + "-search").read_bytes()
    kinds = set()
    for first, last, offset, length, latin1 in closed:
        text = segment[offset : offset + length]
        # Rows 21-40 (sequences) are the wide ones: a block holding any is UTF-8.
        holds_wide = first <= 40 and last >= 21
        assert latin1 == (None if holds_wide else 1)
        if latin1:
            assert "é".encode("latin-1") in text or text.isascii()
            assert "é".encode() not in text
        kinds.add(latin1)
    assert kinds == {None, 1}


def test_a_schema_5_store_keeps_its_utf8_blocks_and_closes_new_ones_latin1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = str(tmp_path / "s.db")
    with monkeypatch.context() as patch, small_blocks(64, scan=256, candidates=7):
        # As schema 5 wrote them: every closed block UTF-8.
        patch.setattr(blocks, "_narrowed", lambda text, rows, fields: (text, rows, False))
        fill_and_search(path, TEXTS[:20], "needle")
    with sqlite3.connect(path) as db:
        db.execute("ALTER TABLE search_blocks DROP COLUMN segment_latin1")
        db.execute("UPDATE meta SET value='5' WHERE key='schema'")
    db.close()
    with small_blocks(64, scan=256, candidates=7):
        found, expected = fill_and_search(path, TEXTS[20:], "é 2")
    assert found == expected and len(found) == 11
    flags = select(
        path,
        "SELECT segment_latin1 FROM search_blocks WHERE segment_offset IS NOT NULL"
        " ORDER BY first_sequence",
    )
    assert flags[0] == (None,) and flags[-1] == (1,)  # the old blocks as they were; new ones
    assert select(path, "SELECT value FROM meta WHERE key='schema'") == [(str(SCHEMA_VERSION),)]


@pytest.mark.parametrize("damage", ["missing", "short", "empty"])
def test_a_segment_that_lost_bytes_is_rebuilt_on_open(
    tmp_path: Path, damage: str, caplog: pytest.LogCaptureFixture
) -> None:
    path = str(tmp_path / "s.db")
    segment = Path(path + "-search")
    with small_blocks(64, scan=256, candidates=7):
        fill_and_search(path, TEXTS, "needle")
        size = segment.stat().st_size
        if damage == "missing":
            segment.unlink()
        else:
            with segment.open("r+b") as file:
                file.truncate(size - 1 if damage == "short" else 0)
        with caplog.at_level("WARNING", logger="emelex.store"):
            found, expected = fill_and_search(path, ["one more needle"], "needle")
    assert "rebuilding the search blocks" in caplog.text
    assert found == expected and len(found) == len(TEXTS) + 1
    blocks = segment_rows(path)
    assert any(offset is not None for _, offset, _ in blocks)
    if damage != "missing":  # the rebuilt blocks follow the bytes that were left
        assert min(offset for _, offset, _ in blocks if offset is not None) == (
            size - 1 if damage == "short" else 0
        )


def test_bytes_no_block_names_are_never_read(tmp_path: Path) -> None:
    """A crash between appending to the segment and committing leaves bytes at its end
    that no block names: later blocks go after them, and searches never see them."""
    path = str(tmp_path / "s.db")
    segment = Path(path + "-search")
    with small_blocks(64, scan=256, candidates=7):
        fill_and_search(path, TEXTS[:20], "needle")
        with segment.open("ab") as file:
            file.write(b"needle \xff torn write needle" * 10)
        found, expected = fill_and_search(path, TEXTS[20:], "needle")
    assert found == expected and len(found) == len(TEXTS)
    assert not any(hit[2] != "body" for hit in found)


def test_a_segment_with_foreign_bytes_is_store_corrupt(tmp_path: Path) -> None:
    path = str(tmp_path / "s.db")
    segment = Path(path + "-search")
    with small_blocks(64, scan=256, candidates=7):
        # "ő" has no Latin-1 form: the closed blocks stay UTF-8.
        fill_and_search(path, [text.replace("é", "ő") for text in TEXTS], "needle")
        # The right size, no longer UTF-8 (a block without the needle is never decoded:
        # the rows that hold it are damaged too).
        segment.write_bytes(segment.read_bytes().replace("ő".encode(), b"\xff\xfe"))
        with pytest.raises(StoreCorrupt) as caught:
            fill_and_search(path, [], "needle")
    assert caught.value.field == "search_blocks"


def test_a_schema_4_store_keeps_its_blocks_and_closes_new_ones_into_the_segment(
    tmp_path: Path,
) -> None:
    path = str(tmp_path / "s.db")
    with small_blocks(1 << 20, scan=1 << 20, candidates=100):
        fill_and_search(path, TEXTS[:20], "needle")  # one open block, in SQLite
    with sqlite3.connect(path) as db:  # as schema 4 left it
        db.execute("ALTER TABLE search_blocks DROP COLUMN segment_offset")
        db.execute("ALTER TABLE search_blocks DROP COLUMN segment_length")
        db.execute("UPDATE meta SET value='4' WHERE key='schema'")
    db.close()
    with small_blocks(64, scan=256, candidates=7):
        found, expected = fill_and_search(path, TEXTS[20:], "needle")
    assert found == expected and len(found) == len(TEXTS)
    blocks = segment_rows(path)
    assert len(blocks[0][0]) > 64 and blocks[0][1] is None  # the schema 4 block, as it was
    assert any(offset is not None for _, offset, _ in blocks)
    with sqlite3.connect(path) as db:
        version = db.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
    db.close()
    assert version == (str(SCHEMA_VERSION),)
