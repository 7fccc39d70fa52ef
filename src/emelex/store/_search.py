"""Search blocks: a session's searchable text in blocks (the newest grows to about
32 KiB; closed blocks join up to 256 KiB).

Search answers with the service's exact matcher (``emelex.contracts.find_matches``), run
by the Host. Running it on every row of a long history costs a Python call per field per
row, and reading every row costs a statement each; a scan over blocks finds the few rows
that can match and hands their fields over without reading the rows again. Where a byte
match is a match (``scan_blocks(spans=True)``), the scan gives a body-only row's matches
as hits itself.

Each non-internal row contributes its searchable fields (body, thinking, the JSON of each
tool call's arguments, exactly as the Host matches them), back to back, UTF-8 encoded.
Beside the text a block keeps two arrays of little-endian 64-bit integers, read back at
C speed: ``rows`` holds four per row (source sequence, item index, the byte offset where
the row ends, the number of fields through this row) and ``fields`` the length of each
field in code points. Rows go to the session's newest block until it holds
:data:`BLOCK_BYTES`.

The scan is a sound prefilter for every matcher option. Case-sensitive: a literal that
occurs in a field occurs in the block's bytes (UTF-8 keeps substrings), and a block
without it is skipped after one ``bytes.find`` (C, memchr-driven: about the speed at which
ripgrep reads a file). Case-insensitive: simple case folding maps each code point to
one code point, so a match of the folded query in the folded field is a match in the
folded block, at the same code point offset. A block match that straddles two fields or
rows is merely a false candidate that the exact matcher rejects; a row is left out only
when it cannot match.

Case-insensitive queries mostly avoid decoding and folding the block (which costs ten
times the scan): an ASCII character that no other code point folds to (every ASCII
character but ``k`` and ``s``, the targets of KELVIN SIGN and LONG S) is matched only by
itself and its ASCII case partner, so a run of such characters in the folded query occurs
in the block's bytes after ``bytes.lower()`` (ASCII-only, same length) wherever the query
matches. The longest such run becomes the block's byte needle; only a query without a
usable run (``ß``, ``é``, ``k``) decodes and folds blocks.

Over 700 lines, with one function (``_spans``) over 80, on purpose: the block scan is
the search's hot loop, and its steps stay in one module and its row loop in one
function because each call and attribute lookup taken out of it was measured in the
100 MiB search benchmark (docs/service/search.md).
"""

from __future__ import annotations

import json
import mmap
import re
import sqlite3
import sys
from array import array
from bisect import bisect_right
from collections.abc import Callable, Iterable, Sequence
from itertools import accumulate
from typing import Any, Final

import attrs

from emelex._builders import flat_builder, positional_builder
from emelex.contracts import (
    MAX_FIELD_CHARS,
    SearchHit,
    arguments_text,
    fold_for,
    simple_casefold,
)
from emelex.contracts import Position as WirePosition
from emelex.store._log import Position
from emelex.store._segment import Segment, _SegmentError, segment_of

#: The ``meta`` key of the search segment's high-water mark (the bytes blocks name).
SEGMENT_END_KEY: Final = "search_segment_end"
#: A block is closed once it holds this many bytes (a longer row gets a block alone).
BLOCK_BYTES: Final = 32 * 1024
#: Closed blocks that lie back to back in the search segment join up to this many bytes
#: of text and rows: a scan pays per block (a row of the table, its arrays, a call), so
#: fewer, larger closed blocks scan faster, while the open block, rewritten by every
#: append, stays small.
CLOSED_BLOCK_BYTES: Final = 256 * 1024
CLOSED_BLOCK_ROWS: Final = 4096
#: Text scanned per search page, at most (whole blocks), when the query has a byte
#: needle (about 10 ms of CPU, past the rows that hold it, which CANDIDATES_PER_PAGE
#: bounds); half that when blocks are lowered first (any case), an eighth when they
#: are decoded and folded. Fewer, larger pages: under load each page's thread hop
#: waits for a CPU.
SCAN_BYTES_PER_PAGE: Final = 64 * 1024 * 1024
#: Candidate rows and hits a search page hands to the Host, at most.
CANDIDATES_PER_PAGE: Final = 5000
#: Matches in one common row the scan gives as hits; a row with more goes to the
#: exact matcher (which bounds a page's hits).
MAX_ROW_HITS: Final = 16
#: ASCII characters that some other code point simply case-folds to (U+017F LONG S and
#: U+212A KELVIN SIGN): lowering bytes cannot find their non-ASCII partners.
ASCII_FOLD_TARGETS: Final = frozenset("sk")
#: False occurrences of a needle's rare byte checked before a find falls back to
#: ``bytes.find`` (bounds the Python work when the "rare" byte is common in a text).
MAX_ANCHOR_MISSES: Final = 16
#: Bytes by how common they are in prose, code and JSON, most common first; any other
#: byte (capitals past these, most punctuation, UTF-8 bytes) counts as rare.
_COMMON_BYTES: Final = (
    b" etaoinsrhldcumfpgwybvkxjqz\n\",.:_-/=()0123456789'{}[]\tETAOINSRHLDCUMFPGWYBVKXJQZ"
)
_BYTE_RANK: Final = bytes(
    len(_COMMON_BYTES) - _COMMON_BYTES.index(b) if b in _COMMON_BYTES else 0 for b in range(256)
)
#: A case-insensitive byte needle shorter than the query must have this many characters
#: (a shorter one lets too many rows through to the matcher).
MIN_PARTIAL_NEEDLE: Final = 3

SEARCH_BLOCKS_TABLE: Final = """
CREATE TABLE IF NOT EXISTS search_blocks (
    session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    first_sequence INTEGER NOT NULL,
    first_index INTEGER NOT NULL,
    last_sequence INTEGER NOT NULL,
    last_index INTEGER NOT NULL,
    rows BLOB NOT NULL,
    fields BLOB NOT NULL,
    text BLOB NOT NULL,
    segment_offset INTEGER,
    segment_length INTEGER,
    segment_latin1 INTEGER,
    PRIMARY KEY (session_id, first_sequence, first_index)
) WITHOUT ROWID
"""
#: The columns schema 5 added: where a closed block's text lies in the search segment
#: (both NULL while the text is in ``text``; see ``_segment``).
SEGMENT_COLUMNS: Final = ("segment_offset", "segment_length")
#: The column schema 6 added: 1 when a closed block's text is Latin-1, NULL for UTF-8.
LATIN1_COLUMN: Final = "segment_latin1"
#: A block's text encoding by its Latin-1 flag.
_ENCODINGS: Final = ("utf-8", "latin-1")

#: Field names of a row's searchable fields: body, thinking, then one per tool call.
BODY: Final = "body"
THINKING: Final = "thinking"
TOOL_ARGUMENTS: Final = "toolArguments"


@attrs.frozen(weakref_slot=False)  # fast builders (emelex._builders)
class CandidateRow:
    """A row that may hold the query: its position and its searchable fields, in the
    order body, thinking (empty when it has none), each tool call's arguments."""

    position: Position
    fields: tuple[tuple[str, str], ...]


@attrs.frozen
class CandidatePage:
    """A search page's candidates under the fence ``through``; ``next_after`` is the last
    row scanned while rows remain (None: the scan is finished)."""

    through: int
    rows: tuple[CandidateRow | SearchHit, ...]
    next_after: Position | None

    def candidate_rows(self) -> tuple[CandidateRow, ...]:
        """The rows of a page scanned without ``spans``, all of them ``CandidateRow``s;
        raises ``TypeError`` for a page that holds a ``SearchHit``."""
        for row in self.rows:
            if not isinstance(row, CandidateRow):
                raise TypeError(f"the page holds a hit: {row}")
        return self.rows  # type: ignore[return-value]  # checked above


def searchable(
    body: str, thinking: str | None, arguments: Iterable[dict[str, Any]]
) -> tuple[list[int], str]:
    """A row's searchable fields: their lengths (code points) and their text (each
    call's arguments as ``arguments_text``, so hits count offsets in that text)."""
    fields = [body, thinking or ""]
    fields += [arguments_text(args) for args in arguments]
    return [len(field) for field in fields], "".join(fields)


def arguments_of(tool_calls_json: str | None) -> list[dict[str, Any]]:
    """The arguments of a row's stored calls (``[[id, name, arguments], ...]``), as the
    Host reads them back for matching."""
    if tool_calls_json is None:
        return []
    return [dict(call[2]) for call in json.loads(tool_calls_json)]


def byte_needle(query: str, *, case_sensitive: bool) -> tuple[bytes | None, bool]:
    """The bytes a block must contain to hold a match of ``query``, and whether they
    are looked up in the block's lowered bytes; ``(None, False)`` when no byte needle
    is sound and selective (the scan then folds the decoded block)."""
    if case_sensitive:
        return query.encode("utf-8", "surrogatepass"), False
    best = ""
    for run in _NOT_ASCII_CLOSED.split(simple_casefold(query)):
        if len(run) > len(best):
            best = run
    if best and (len(best) == len(query) or len(best) >= MIN_PARTIAL_NEEDLE):
        return best.encode("ascii"), True
    return None, False


class ByteFinder:
    """``bytes.find`` for one needle, driven by ``memchr`` on its rarest byte.

    CPython's ``bytes.find`` runs at a few hundred MB/s on prose when the needle's bytes
    are common letters; ``memchr`` (one byte) runs at memory speed. Each occurrence of
    the rarest byte is checked in place. A byte that turns out to be common in this
    text (more than :data:`MAX_ANCHOR_MISSES` false occurrences in one call) ends the
    call with plain ``bytes.find``, and once false occurrences outnumber true ones the
    finder uses plain ``bytes.find`` for good. Finds exactly what ``bytes.find`` finds:
    every match starting at or after ``start`` has its rare byte at or after
    ``start + offset``, and the occurrences are visited in order. The haystack may be a
    ``bytes`` or a memory map (a block's text in the search segment, searched in place).
    """

    def __init__(self, needle: bytes) -> None:
        if not needle:
            raise ValueError("the needle is empty")
        self.needle = needle
        self.offset = min(range(len(needle)), key=lambda i: _BYTE_RANK[needle[i]])
        self.anchor = needle[self.offset : self.offset + 1]
        self.anchored = len(needle) > 1
        self._misses = 0
        self._hits = 0

    def find(self, haystack: Haystack, start: int, end: int) -> int:
        """The first offset at or after ``start`` where the needle occurs within
        ``haystack[start:end]``, else -1 (``haystack.find(needle, start, end)``)."""
        needle = self.needle
        if not self.anchored:
            return haystack.find(needle, start, end)
        anchor, offset, size = self.anchor, self.offset, len(needle)
        at = haystack.find(anchor, start + offset, end)
        misses = 0
        while at >= 0:
            begin = at - offset
            if begin + size <= end and haystack.find(needle, begin, begin + size) == begin:
                self._hits += 1
                return begin
            misses += 1
            if misses > MAX_ANCHOR_MISSES:
                self._misses += misses
                if self._misses > 4 * self._hits + MAX_ANCHOR_MISSES:
                    self.anchored = False  # the "rare" byte is common here
                # No match starts before begin + 1 (every anchor up to here was checked).
                return haystack.find(needle, begin + 1, end)
            at = haystack.find(anchor, at + 1, end)
        self._misses += misses
        return -1


#: What a block's text is searched in: its bytes, or the search segment's memory map.
Haystack = bytes | mmap.mmap


def _ints(data: bytes) -> array[int]:
    values = array("q")
    values.frombytes(data)
    if sys.byteorder == "big":
        values.byteswap()
    return values


def _blob(values: array[int]) -> bytes:
    if sys.byteorder == "big":
        values = array("q", values)
        values.byteswap()
    return values.tobytes()


def append_to_blocks(
    db: sqlite3.Connection,
    session_id: str,
    entries: Sequence[tuple[int, int, tuple[list[int], str]]],
) -> None:
    """Add rows ``(source_sequence, item_index, searchable(...))``, in history order, to
    the session's blocks (inside the caller's write transaction). A block that fills up
    is closed: its text goes to the connection's search segment, synced before this
    returns (so before the caller commits); the newest block stays in SQLite."""
    if not entries:
        return
    newest = db.execute(
        "SELECT first_sequence, first_index, rows, fields, text, segment_offset"
        " FROM search_blocks WHERE session_id=?"
        " ORDER BY first_sequence DESC, first_index DESC LIMIT 1",
        (session_id,),
    ).fetchone()
    segment = segment_of(db)
    block = _Block()
    if newest is not None and newest[5] is None and len(newest[4]) < BLOCK_BYTES:
        block.first = (newest[0], newest[1])
        block.rows = _ints(newest[2])
        block.fields = _ints(newest[3])
        block.text += newest[4]
    previous: _Closed | None = None
    looked = False
    for sequence, index, (lengths, fields) in entries:
        encoded = fields.encode("utf-8", "surrogatepass")
        if block.text and len(block.text) + len(encoded) > BLOCK_BYTES:
            if segment is None:
                block.write(db, session_id)
            else:
                if not looked:
                    previous, looked = _last_closed(db, session_id, block), True
                previous = block.close(db, session_id, segment, previous)
            block = _Block()
        if block.first is None:
            block.first = (sequence, index)
        block.text += encoded
        block.fields.extend(lengths)
        block.rows.extend((sequence, index, len(block.text), len(block.fields)))
    block.write(db, session_id)
    if segment is not None:
        segment.sync()


@attrs.frozen
class _Closed:
    """A closed block as its last writer left it (what the next closed block may join)."""

    first: tuple[int, int]
    rows: array[int]
    fields: array[int]
    offset: int
    length: int
    latin1: bool


def _last_closed(db: sqlite3.Connection, session_id: str, block: _Block) -> _Closed | None:
    """The session's block before ``block``, if it is closed and well formed."""
    assert block.first is not None
    found = db.execute(
        "SELECT first_sequence, first_index, rows, fields, segment_offset, segment_length,"
        " segment_latin1 FROM search_blocks"
        " WHERE session_id=? AND (first_sequence, first_index) < (?, ?)"
        " ORDER BY first_sequence DESC, first_index DESC LIMIT 1",
        (session_id, *block.first),
    ).fetchone()
    if found is None:
        return None
    first_sequence, first_index, rows, fields, offset, length, latin1 = found
    if type(offset) is not int or type(length) is not int:
        return None  # its text is in SQLite
    if latin1 not in (None, 1):
        return None  # damaged: the scan says so
    if type(rows) is not bytes or type(fields) is not bytes:
        return None  # damaged: the scan says so; new blocks stay apart from it
    try:
        _check_shape(rows, fields, length)
    except _BadBlock:
        return None
    return _Closed(
        (first_sequence, first_index), _ints(rows), _ints(fields), offset, length, latin1 == 1
    )


class _Block:
    def __init__(self) -> None:
        self.first: tuple[int, int] | None = None
        self.rows = array("q")
        self.fields = array("q")
        self.text = bytearray()

    def write(self, db: sqlite3.Connection, session_id: str) -> None:
        """Store the block with its text in SQLite (the open block, or any block of a
        connection without a segment), UTF-8."""
        self._insert(db, session_id, self.rows, bytes(self.text), None, None, None)

    def close(
        self,
        db: sqlite3.Connection,
        session_id: str,
        segment: Segment,
        previous: _Closed | None,
    ) -> _Closed:
        """Store the full block, its text in ``segment``. When it lands right after the
        ``previous`` closed block, which has room, it joins it: one block, one row, one
        array pair for the scan. Returns the session's last closed block."""
        assert self.first is not None
        text, rows, latin1 = _narrowed(bytes(self.text), self.rows, self.fields)
        offset = segment.append(text)
        _segment_end(db, offset + len(text))
        if (
            previous is None
            or previous.latin1 != latin1
            or previous.offset + previous.length != offset
            or previous.length + len(text) > CLOSED_BLOCK_BYTES
            or (len(previous.rows) + len(rows)) // 4 > CLOSED_BLOCK_ROWS
        ):
            self.write_closed(db, session_id, rows, offset, len(text), latin1)
            return _Closed(self.first, rows, self.fields, offset, len(text), latin1)
        rows = array("q", rows)
        text_before, fields_before = previous.length, previous.rows[-1]
        for at in range(2, len(rows), 4):
            rows[at] += text_before
            rows[at + 1] += fields_before
        joined = _Closed(
            previous.first,
            previous.rows + rows,
            previous.fields + self.fields,
            previous.offset,
            previous.length + len(text),
            latin1,
        )
        # This block's rows may be stored as the open block (the one that just filled).
        db.execute(
            "DELETE FROM search_blocks WHERE session_id=? AND first_sequence=? AND first_index=?",
            (session_id, *self.first),
        )
        db.execute(
            "UPDATE search_blocks SET last_sequence=?, last_index=?, rows=?, fields=?,"
            " segment_length=? WHERE session_id=? AND first_sequence=? AND first_index=?",
            (
                self.rows[-4],
                self.rows[-3],
                _blob(joined.rows),
                _blob(joined.fields),
                joined.length,
                session_id,
                *joined.first,
            ),
        )
        return joined

    def write_closed(
        self,
        db: sqlite3.Connection,
        session_id: str,
        rows: array[int],
        offset: int,
        length: int,
        latin1: bool,
    ) -> None:
        """Store the block whose text lies at ``offset`` in the segment (its ``rows``
        count the bytes of that text)."""
        self._insert(db, session_id, rows, b"", offset, length, 1 if latin1 else None)

    def _insert(
        self,
        db: sqlite3.Connection,
        session_id: str,
        rows: array[int],
        text: bytes,
        offset: int | None,
        length: int | None,
        latin1: int | None,
    ) -> None:
        assert self.first is not None
        db.execute(
            "INSERT OR REPLACE INTO search_blocks (session_id, first_sequence, first_index,"
            " last_sequence, last_index, rows, fields, text, segment_offset, segment_length,"
            " segment_latin1) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                session_id,
                self.first[0],
                self.first[1],
                rows[-4],
                rows[-3],
                _blob(rows),
                _blob(self.fields),
                text,
                offset,
                length,
                latin1,
            ),
        )


def _narrowed(text: bytes, rows: array[int], fields: array[int]) -> tuple[bytes, array[int], bool]:
    """A closing block's text in Latin-1 when every character fits one byte (most text
    in Western languages, and any ASCII): byte offsets are then character offsets, so
    a search counts no characters. Returns the text, the rows with their byte offsets
    in it, and whether it is Latin-1; else the UTF-8 as it was."""
    try:
        narrow = text.decode("utf-8", "surrogatepass").encode("latin-1")
    except UnicodeEncodeError:
        return text, rows, False
    if len(narrow) == len(text):
        return text, rows, True  # ASCII: the same bytes
    ends = list(accumulate(fields))
    narrowed = array("q", rows)
    for at in range(2, len(narrowed), 4):
        narrowed[at] = ends[narrowed[at + 1] - 1]
    return narrow, narrowed, True


def _segment_end(db: sqlite3.Connection, end: int) -> None:
    """Record the segment's high-water mark, what opening the store checks the file
    holds: appends only go forward, so the newest block's end is the largest."""
    db.execute(
        "INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (SEGMENT_END_KEY, str(end))
    )


class _BadBlock(Exception):
    """A stored block does not have the shape this module writes (the store maps it to
    ``StoreCorrupt``)."""


def scan_blocks(
    db: sqlite3.Connection,
    session_id: str,
    query: str,
    *,
    case_sensitive: bool,
    through: int,
    after: Position,
    spans: bool = False,
) -> CandidatePage:
    """The rows after ``after`` and under the fence that may hold ``query``; with
    ``spans``, when a byte match is a match (case-sensitive, or a folded query of ASCII
    characters that only their case partners fold to), a row whose body is its only
    searchable field comes as its matches (up to :data:`MAX_ROW_HITS`, one after the
    other), the wire's ``SearchHit``s, and such a row where the needle only straddles
    into the next row is left out.

    Scans whole blocks up to :data:`SCAN_BYTES_PER_PAGE` (less when the blocks must be
    lowered, or decoded and folded), and stops early after
    :data:`CANDIDATES_PER_PAGE` candidates (the cursor is then the last candidate).
    Runs inside the caller's read transaction.
    """
    start = db.execute(
        "SELECT first_sequence, first_index FROM search_blocks WHERE session_id=?"
        " AND (first_sequence, first_index) <= (?, ?)"
        " ORDER BY first_sequence DESC, first_index DESC LIMIT 1",
        (session_id, after.source_sequence, after.item_index),
    ).fetchone() or (0, -1)
    blocks = db.execute(
        "SELECT rows, fields, text, last_sequence, last_index, segment_offset,"
        " segment_length, segment_latin1 FROM search_blocks"
        " WHERE session_id=? AND (first_sequence, first_index) >= (?, ?)"
        " AND first_sequence <= ? ORDER BY first_sequence, first_index",
        (session_id, start[0], start[1], through),
    )
    try:
        scan = _Scan(query, case_sensitive, through, after, spans=spans)
        found, cursor = scan.run(blocks, segment_of(db))
    finally:
        blocks.close()
    return CandidatePage(through=through, rows=tuple(found), next_after=cursor)


class _Scan:
    def __init__(
        self, query: str, case_sensitive: bool, through: int, after: Position, *, spans: bool
    ) -> None:
        # A byte needle that must occur in the block's bytes (lowered for a
        # case-insensitive query); without one, the folded query must occur in the
        # folded (decoded) block.
        needle, self.lowered = byte_needle(query, case_sensitive=case_sensitive)
        utf8 = None if needle is None else ByteFinder(needle)
        # A Latin-1 block holds the query's Latin-1 bytes (a lowered needle is ASCII,
        # the same in both); a query without a Latin-1 form is in no such block.
        latin1 = utf8
        self.latin1_holds_none = False
        if needle is not None and case_sensitive and not query.isascii():
            try:
                latin1 = ByteFinder(query.encode("latin-1"))
            except UnicodeEncodeError:
                self.latin1_holds_none = True
        self.finders = (utf8, latin1)  # by the block's Latin-1 flag
        self.needle = utf8
        self.encoding = _ENCODINGS[0]
        # Only a case-insensitive scan folds (building the fold tables costs ~0.15 s of
        # CPU, once per process: a case-sensitive search must not pay it).
        self.folded = query if case_sensitive else simple_casefold(query)
        # Spans come from the bytes when a byte match is a match: always for a
        # case-sensitive query; for another when its byte needle is the whole folded
        # query (no character but ASCII ones that only their case partners fold to).
        self.spans = spans and needle is not None and (case_sensitive or len(needle) == len(query))
        self.length = len(query)
        self.through = through
        self.after = (after.source_sequence, after.item_index)
        self.found: list[CandidateRow | SearchHit] = []

    def run(
        self, blocks: sqlite3.Cursor, segment: Segment | None
    ) -> tuple[list[CandidateRow | SearchHit], Position | None]:
        scanned = 0
        budget = (
            SCAN_BYTES_PER_PAGE // 8
            if self.needle is None
            else SCAN_BYTES_PER_PAGE // 2
            if self.lowered
            else SCAN_BYTES_PER_PAGE
        )
        last: tuple[int, int] | None = None
        # Most blocks lack the needle's rare byte: one memchr says so, inline.
        quick = self.needle is not None and not self.lowered
        for rows, fields, data, last_sequence, last_index, offset, length, latin1 in blocks:
            if scanned >= budget and last is not None and last > self.after:
                # The page has moved past its cursor and more blocks remain.
                return self.found, Position(*last)
            if not (type(rows) is type(fields) is type(data) is bytes):
                raise _BadBlock("a search block's columns are not blobs")
            text: Haystack = data
            base, size = 0, len(data)
            if offset is not None:  # in the segment: searched in place, not copied
                text, base, size = _segment_view(segment, data, offset, length)
            scanned += size
            if latin1 is not None and (latin1 != 1 or type(latin1) is not int):
                raise _BadBlock("a search block's Latin-1 flag is neither 1 nor NULL")
            narrow = latin1 is not None
            finder = self.needle = self.finders[narrow]
            self.encoding = _ENCODINGS[narrow]
            if (narrow and self.latin1_holds_none) or (
                quick
                and finder is not None
                and text.find(finder.anchor, base + finder.offset, base + size) < 0
            ):
                cut = None  # the block cannot hold the query
            else:
                # Only a block whose arrays are used needs them checked.
                _check_shape(rows, fields, size)
                cut = self._block(rows, fields, text, base, size)
            if cut is not None:
                return self.found, cut
            if last_sequence > self.through:
                return self.found, None
            last = (last_sequence, last_index)
        return self.found, None

    def _block(
        self, rows: bytes, fields: bytes, text: Haystack, base: int, size: int
    ) -> Position | None:
        """Add the candidates of one block whose text is ``text[base:base + size]``."""
        try:
            if self.needle is not None:
                haystack: Haystack = text
                if self.lowered:  # lowering copies the block anyway
                    text = text[base : base + size]
                    base = 0
                    haystack = text.lower()
                found = self.needle.find(haystack, base, base + size)
                if found < 0:
                    return None
                if self.spans:
                    return self._spans(_ints(rows), _ints(fields), text, haystack, base, found)
                return self._bytes(_ints(rows), _ints(fields), text, haystack, base, found)
            return self._folded(_ints(rows), _ints(fields), text[base : base + size])
        except (IndexError, ValueError) as exc:  # arrays that do not fit the text
            raise _BadBlock(f"a search block's row arrays do not fit ({exc})") from exc

    def _bytes(
        self,
        rows: array[int],
        fields: array[int],
        data: Haystack,
        haystack: Haystack,
        base: int,
        found: int,
    ) -> Position | None:
        """Candidates of a byte-needle scan of the block at ``data[base:]``
        (``haystack`` is ``data`` or its lowering, at the same offsets): byte offsets
        map to rows directly, and only a candidate row's bytes are decoded."""
        # One tight loop per block: this runs for every row that holds the needle.
        ends = rows[2::4]
        count = len(ends)
        block_end = base + ends[-1]
        needle = self.needle
        assert needle is not None
        through = self.through
        after_sequence, after_index = self.after
        found_rows = self.found
        limit = CANDIDATES_PER_PAGE
        while found >= 0:
            number = bisect_right(ends, found - base)
            if number >= count:
                break  # past the last row (a damaged block): nothing more to find
            at = 4 * number
            sequence = rows[at]
            if sequence > through:
                return None
            index = rows[at + 1]
            end = ends[number]
            if sequence > after_sequence or (sequence == after_sequence and index > after_index):
                if number:
                    start, first = ends[number - 1], rows[at - 1]
                else:
                    start = first = 0
                # A bad byte raises UnicodeDecodeError, a ValueError: the caller maps it.
                text = data[base + start : base + end].decode(self.encoding, "surrogatepass")
                last = rows[at + 3]
                if last - first == 2 and not fields[first + 1] and fields[first] == len(text):
                    # The common row: a body and no thinking (lengths agree: no checks).
                    row = _candidate_row(_position(sequence, index), ((BODY, text), _NO_THINKING))
                else:
                    row = _candidate(sequence, index, fields, first, last, text)
                found_rows.append(row)
                if len(found_rows) >= limit:
                    return _position(sequence, index)
            # One candidate per row is enough.
            found = needle.find(haystack, base + end, block_end)
        return None

    def _spans(
        self,
        rows: array[int],
        fields: array[int],
        data: Haystack,
        haystack: Haystack,
        base: int,
        found: int,
    ) -> Position | None:
        """Candidates of a scan asked for spans whose byte matches are the query's
        matches: the needle is the query's UTF-8 (case-sensitive), or the whole folded
        query, all ASCII characters that only their case partners fold to, looked up in
        the lowered ``haystack``. A row whose only searchable field is its body becomes
        its ``SearchHit``s (up to :data:`MAX_ROW_HITS`; see ``_row_hits``), found in the block's
        bytes: UTF-8 keeps a match of valid UTF-8 on code point boundaries (and lowering
        changes ASCII letters alone), so the byte match is the text's match; its offset
        counts bytes in an ASCII body (whose byte length is its length) and the code
        points decoded before it in ``data`` otherwise. Other rows are candidates as in
        ``_bytes``."""
        # The tightest loop of a search: it runs for every row that holds the needle.
        ends = rows[2::4]
        block_end = base + ends[-1]
        finder = self.needle
        assert finder is not None
        needle, anchor, offset = finder.needle, finder.anchor, finder.offset
        size = len(needle)
        length = self.length
        through = self.through
        after_sequence, after_index = self.after
        found_rows = self.found
        append = found_rows.append
        # What holds for the whole block is not checked row by row.
        fenced = rows[-4] > through  # some row lies past the fence
        long_rows = ends[-1] > MAX_FIELD_CHARS  # (a row has no more code points than bytes)
        while True:
            # ``found`` lies before the block's end: in one of its rows.
            number = bisect_right(ends, found - base)
            at = 4 * number
            sequence = rows[at]
            if fenced and sequence > through:
                return None
            index = rows[at + 1]
            end = base + ends[number]
            if sequence > after_sequence or (sequence == after_sequence and index > after_index):
                if number:
                    start, first = base + ends[number - 1], rows[at - 1]
                else:
                    start = base
                    first = 0
                last = rows[at + 3]
                chars = fields[first]
                # The next rare byte: a second match in this row needs one before it ends.
                rare = haystack.find(anchor, found + size + offset, block_end)
                if (
                    last - first == 2
                    and not fields[first + 1]
                    and (not long_rows or chars <= MAX_FIELD_CHARS)
                ):
                    # The common row, a body alone.
                    if found + size > end:
                        pass  # the match straddles into the next row: none here
                    elif (
                        rare < 0
                        or rare - offset + size > end
                        or haystack.find(needle, found + size, end) < 0
                    ):
                        hit = found - start  # its one match
                        if chars != end - start:  # not ASCII: count code points
                            # On the shorter side of the match. A bad byte raises
                            # UnicodeDecodeError (a ValueError): the caller maps it.
                            if hit + hit < end - start:
                                hit = len(data[start:found].decode("utf-8", "surrogatepass"))
                            else:
                                hit = chars - len(data[found:end].decode("utf-8", "surrogatepass"))
                        append(_body_hit(sequence, index, hit, hit + length))
                    elif not _row_hits(
                        append,
                        data,
                        haystack,
                        needle,
                        self.encoding,
                        length,
                        sequence,
                        index,
                        start,
                        found,
                        end,
                    ):
                        text = data[start:end].decode(self.encoding, "surrogatepass")
                        append(_candidate(sequence, index, fields, first, last, text))
                else:
                    text = data[start:end].decode(self.encoding, "surrogatepass")
                    append(_candidate(sequence, index, fields, first, last, text))
                if len(found_rows) >= CANDIDATES_PER_PAGE:
                    return _position(sequence, index)
                if 0 <= rare < end + offset:  # its match would start in this row
                    rare = haystack.find(anchor, end + offset, block_end)
            else:
                rare = haystack.find(anchor, end + offset, block_end)
            # The next row's match, at the next rare byte (``ByteFinder.find``, inline).
            if rare < 0:
                return None
            found = rare - offset
            if found + size > block_end or haystack.find(needle, found, found + size) != found:
                found = finder.find(haystack, found + 1, block_end)
                if found < 0:
                    return None

    def _folded(self, rows: array[int], fields: array[int], data: bytes) -> Position | None:
        """Candidates of a case-insensitive scan: the block is decoded and folded once,
        and code point offsets map to rows."""
        text = _decode(data, self.encoding)
        folded = fold_for(text, self.folded)
        found = folded.find(self.folded)
        if found < 0:
            return None
        ends = list(accumulate(fields))
        row_ends = [ends[count - 1] if count else 0 for count in rows[3::4]]
        while found >= 0:
            number = bisect_right(row_ends, found)
            if number >= len(row_ends):
                break
            start = 0 if number == 0 else row_ends[number - 1]
            verdict = self._add(rows, fields, number, text[start : row_ends[number]])
            if verdict is not _NEXT:
                return _cut(rows, number, verdict)
            found = folded.find(self.folded, row_ends[number])
        return None

    def _add(self, rows: array[int], fields: array[int], number: int, text: bytes | str) -> str:
        """Add row ``number`` of the block as a candidate unless it lies before the
        cursor (``_NEXT``: go on), or past the fence (``_BEYOND``); ``_FULL`` when the
        page holds as many candidates as it may."""
        sequence, index = rows[4 * number], rows[4 * number + 1]
        if sequence > self.through:
            return _BEYOND
        if (sequence, index) <= self.after:
            return _NEXT
        if isinstance(text, bytes):
            text = _decode(text, self.encoding)
        first = 0 if number == 0 else rows[4 * number - 1]
        self.found.append(_candidate(sequence, index, fields, first, rows[4 * number + 3], text))
        return _FULL if len(self.found) >= CANDIDATES_PER_PAGE else _NEXT


#: What is not an ASCII character matched only by itself and its ASCII case partner.
_NOT_ASCII_CLOSED: Final = re.compile(
    "[^\\x00-\\x7f]|[" + "".join(sorted(ASCII_FOLD_TARGETS)) + "]"
)

_NEXT: Final = "next"
_BEYOND: Final = "beyond"
_FULL: Final = "full"


def _cut(rows: array[int], number: int, verdict: str) -> Position | None:
    """Where the page ends after a verdict other than ``_NEXT``: at row ``number`` when
    it is full, nowhere (None: the block is done) past the fence."""
    if verdict is _FULL:
        return Position(rows[4 * number], rows[4 * number + 1])
    return None


def _segment_view(
    segment: Segment | None, data: bytes, offset: object, length: object
) -> tuple[mmap.mmap, int, int]:
    """Where a closed block's text lies: the segment's map, its offset and length."""
    if data or type(offset) is not int or type(length) is not int:
        raise _BadBlock("a search block names both its text and a segment range")
    if segment is None:
        raise _BadBlock("a search block's text is in the segment, which is not open")
    try:
        return segment.view(offset, length), offset, length
    except _SegmentError as exc:
        raise _BadBlock(str(exc)) from exc


def _check_shape(rows: bytes, fields: bytes, size: int) -> None:
    """Raise ``_BadBlock`` unless the block's last row ends where its text does and
    counts all its fields (a block without the needle is never decoded: this is what
    proves its arrays and text belong together)."""
    if (
        not rows
        or len(rows) % 32
        or len(fields) % 8
        or int.from_bytes(rows[-16:-8], "little", signed=True) != size
        or int.from_bytes(rows[-8:], "little", signed=True) != len(fields) // 8
    ):
        raise _BadBlock("a search block's row arrays do not fit its text")


def _decode(data: bytes, encoding: str) -> str:
    try:
        return data.decode(encoding, "surrogatepass")
    except UnicodeDecodeError as exc:
        raise _BadBlock(f"a search block's text does not decode ({exc})") from exc


def _row_hits(
    append: Callable[[SearchHit], object],
    data: Haystack,
    haystack: Haystack,
    needle: bytes,
    encoding: str,
    length: int,
    sequence: int,
    index: int,
    start: int,
    found: int,
    end: int,
) -> bool:
    """Append the hits of a body alone, ``data[start:end]``, that holds the needle more
    than once (the first at ``found``), leftmost first and not overlapping; False,
    appending nothing, when it holds more than :data:`MAX_ROW_HITS` (the matcher then
    decides, and bounds the page)."""
    size = len(needle)
    matches = [found]
    while len(matches) <= MAX_ROW_HITS:
        found = haystack.find(needle, found + size, end)
        if found < 0:
            break
        matches.append(found)
    else:
        return False
    position = _wire_position(sequence, index)
    at = 0  # code points before ``after``
    after = start
    for found in matches:
        # A bad byte raises UnicodeDecodeError (a ValueError): the caller maps it.
        at += len(data[after:found].decode(encoding, "surrogatepass"))
        append(_row_hit(position, at, at + length))
        at += length
        after = found + size
    return True


def _candidate(
    sequence: int, index: int, fields: array[int], first: int, last: int, text: str
) -> CandidateRow:
    """Row ``sequence, index`` whose fields have the lengths ``fields[first:last]``."""
    position = _position(sequence, index)
    if last - first == 2 and fields[first + 1] == 0 and fields[first] == len(text):
        # The common row: a body and no thinking (no checks needed: lengths agree).
        return _candidate_row(position, ((BODY, text), _NO_THINKING))
    parts = []
    start = 0
    for number, length in enumerate(fields[first:last]):
        name = BODY if number == 0 else THINKING if number == 1 else TOOL_ARGUMENTS
        parts.append((name, text[start : start + length]))
        start += length
    if start != len(text):
        raise _BadBlock("a search block's field lengths do not match its text")
    return _candidate_row(position, tuple(parts))


# Built from checked block arrays (integers, lengths that add up): no construction checks.
_position = positional_builder(Position)
_candidate_row = positional_builder(CandidateRow)
# A common row's matches, as the Host answers them (the field names are the wire's).
_body_hit = flat_builder(SearchHit, fixed={"field": BODY, "call": None}, position=WirePosition)
_row_hit = flat_builder(SearchHit, fixed={"field": BODY, "call": None})
_wire_position = positional_builder(WirePosition)
_NO_THINKING: Final = (THINKING, "")
