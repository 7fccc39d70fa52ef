"""Update frames: encoded and framed once for every watcher, decoded once per client."""

from __future__ import annotations

import json

import pytest
from wsproto.frame_protocol import FrameProtocol

from emelex.contracts import (
    HistoryRow,
    Position,
    QueueChanged,
    QueueSnapshot,
    RowsPublished,
    SessionId,
    WatchEnded,
    WatchUpdate,
)
from emelex.service import TransportError
from emelex.service.transport._client import _frame_updates
from emelex.service.transport._frames import (
    BATCH_TEXT,
    MAX_CACHED_TEXT,
    batch_frame,
    batch_frames,
    hold,
    hold_all,
    update_frame,
)
from emelex.service.transport._wsserver import text_frame

QUEUE = QueueChanged(queue=QueueSnapshot(session_id=SessionId("s-1"), revision=3, entries=()))


def test_one_update_object_is_encoded_once_for_every_watcher() -> None:
    copy = QueueChanged(queue=QueueSnapshot(session_id=SessionId("s-1"), revision=3, entries=()))
    assert update_frame(QUEUE) is update_frame(QUEUE)
    assert batch_frame([QUEUE]) is batch_frame([QUEUE])
    assert batch_frame([QUEUE, copy]) is batch_frame([QUEUE, copy])
    # An equal copy is encoded again (hashing would cost as much), to the same text.
    assert update_frame(copy) == update_frame(QUEUE)
    assert batch_frame([copy, QUEUE]) == batch_frame([QUEUE, copy])
    assert json.loads(update_frame(QUEUE)) == {
        "update": json.loads(batch_frame([QUEUE]))["updates"][0]
    }
    ended = WatchEnded(reason="lagged", resume_after=Position(source_sequence=1, item_index=0))
    both = json.loads(batch_frame([QUEUE, ended]))["updates"]
    assert [u["kind"] for u in both] == ["queue", "end"]


@pytest.mark.parametrize("size", [0, 1, 125, 126, 127, 65535, 65536, 300_000])
def test_text_frames_are_what_wsproto_would_send(size: int) -> None:
    text = "é" * (size // 2) + "a" * (size % 2)  # multi-byte: the length is in bytes
    expected = FrameProtocol(client=False, extensions=[]).send_data(text, fin=True)
    assert text_frame(text) == expected
    assert text_frame(text) == expected  # from the cache the second time


def test_the_client_decodes_single_and_batched_frames_alike() -> None:
    single = _frame_updates(update_frame(QUEUE), WatchUpdate)
    batched = _frame_updates(batch_frame([QUEUE, QUEUE]), WatchUpdate)
    assert single == (QUEUE,)
    assert batched == (QUEUE, QUEUE)
    assert _frame_updates('{"end":null}', WatchUpdate) is None


@pytest.mark.parametrize(
    ("text", "error", "needle"),
    [
        ("[1]", TransportError, "not a JSON object"),
        ("not json", TransportError, "not JSON"),
        ('{"update":1,"end":null}', TransportError, "not one update"),
        ('{"updates":[]}', TransportError, "empty or malformed batch"),
        ('{"updates":{}}', TransportError, "empty or malformed batch"),
        ('{"surprise":1}', TransportError, "unknown frame"),
        ('{"update":{"kind":"queue"}}', Exception, "QueueChanged missing ['queue']"),
        ('{"updates":[{"kind":"what"}]}', Exception, "unknown kind 'what'"),
    ],
)
def test_malformed_frames_are_typed_errors(text: str, error: type, needle: str) -> None:
    from emelex import EmelexError

    with pytest.raises(EmelexError) as caught:
        _frame_updates(text, WatchUpdate)
    assert isinstance(caught.value, error)
    assert needle in str(caught.value)


@pytest.mark.parametrize("big", [2**63 - 1, 2**63, -(2**63) - 1, 10**30])
def test_integers_past_64_bits_travel_exactly(big: int) -> None:
    # A model's tool arguments may hold an integer past 64 bits: orjson refuses to encode
    # it and would decode it as a float; the standard library takes those.
    from emelex.contracts import HistoryRow, RowsPublished, ToolCallInfo

    call = ToolCallInfo(id="c1", name="add", arguments={"n": big, "deep": [[["x"]]]})
    row = HistoryRow(
        position=Position(source_sequence=2, item_index=0),
        turn_id="t-1",  # type: ignore[arg-type]
        role="assistant",
        body="",
        thinking=None,
        tool_calls=(call,),
        tool_call_id=None,
        tool_name=None,
        internal=False,
    )
    update = RowsPublished(through=2, rows=(row,), next_after=row.position)
    text = update_frame(update)
    assert str(big) in text
    assert _frame_updates(text, WatchUpdate) == (update,)


def test_runaway_nesting_from_the_host_is_a_transport_error() -> None:
    text = '{"update":' + "[" * 5000 + "]" * 5000 + "}"
    with pytest.raises(TransportError, match="not JSON"):
        _frame_updates(text, WatchUpdate)


def _rows(sequence: int, chars: int) -> RowsPublished:
    row = HistoryRow(
        position=Position(source_sequence=sequence, item_index=0),
        turn_id="t-1",  # type: ignore[arg-type]
        role="assistant",
        body="x" * chars,
        thinking=None,
        tool_calls=(),
        tool_call_id=None,
        tool_name=None,
        internal=False,
    )
    return RowsPublished(through=sequence, rows=(row,), next_after=row.position)


def test_batches_split_into_frames_of_bounded_size() -> None:
    small = [QUEUE, QUEUE, QUEUE]
    assert batch_frames(small) == [batch_frame(small)]
    pages = [_rows(n, BATCH_TEXT // 3) for n in range(1, 8)]
    frames = batch_frames(pages)
    assert 3 <= len(frames) <= 4
    assert all(len(frame) <= BATCH_TEXT + 1024 for frame in frames)
    carried = [u for frame in frames for u in json.loads(frame)["updates"]]
    assert [u["through"] for u in carried] == list(range(1, 8))
    # One update larger than the bound still travels, alone in its frame.
    huge = _rows(9, BATCH_TEXT + 10)
    assert batch_frames([QUEUE, huge, QUEUE]) == [
        batch_frame([QUEUE]),
        batch_frame([huge]),
        batch_frame([QUEUE]),
    ]


def test_a_large_encoding_is_shared_by_its_senders_until_the_last_lets_go() -> None:
    huge = _rows(1, MAX_CACHED_TEXT + 10)
    first, second = hold(huge), hold(huge)
    assert first is not None and first is second and first.senders == 2
    assert update_frame(huge) is update_frame(huge)  # one text for both senders
    assert batch_frames([huge]) == [batch_frame([huge])]
    assert batch_frame([huge]) is batch_frame([huge])
    first.release()
    assert update_frame(huge) is update_frame(huge)  # the second still sends it
    second.release()
    # Nobody sends it now: encoded anew for each sender, to the same text.
    assert update_frame(huge) is not update_frame(huge)
    assert update_frame(huge) == update_frame(huge)
    assert hold(QUEUE) is None  # small encodings are cached: nothing to hold
    leases = hold_all([QUEUE, huge, QUEUE])
    assert [lease.update for lease in leases] == [huge]
    for lease in leases:
        lease.release()
