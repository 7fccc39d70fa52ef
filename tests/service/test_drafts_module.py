"""Live drafts inside one watcher: coalescing, chunking, bounds, clearing."""

from __future__ import annotations

import trio
import trio.testing

from emelex.contracts import (
    MAX_DRAFT_CHUNK_CHARS,
    DraftCleared,
    DraftUpdated,
    InteractionsChanged,
)
from emelex.service._drafts import LiveDrafts
from emelex.service._watch import Subscriber


async def drain(subscriber: Subscriber) -> list[object]:
    """Every update waiting now: read until the reader blocks, then stop it."""
    got: list[object] = []

    async def read() -> None:
        while (update := await subscriber.receive()) is not None:
            got.append(update)

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(read)
            await trio.testing.wait_all_tasks_blocked()
            nursery.cancel_scope.cancel()
    return got


async def test_deltas_coalesce_into_one_update_per_draft_and_never_lag() -> None:
    live = Subscriber(None, 1, live=True)
    subscribers = {live}
    drafts = LiveDrafts(subscribers)
    draft = drafts.begin("inv-1")
    for n in range(1000):
        drafts.append(draft, "ab", "t" if n % 2 else "")
    # A thousand deltas into a buffer of one: one waiting mark, no lag, and a row
    # still fits.
    live.offer(InteractionsChanged(pending=()))
    update = await live.receive()
    assert update == DraftUpdated(
        invocation_id="inv-1",  # type: ignore[arg-type]
        step=0,
        text_offset=0,
        text="ab" * 1000,
        thinking_offset=0,
        thinking="t" * 500,
    )
    assert await live.receive() == InteractionsChanged(pending=())
    drafts.append(draft, "c", "")
    got = await drain(live)
    assert got[0] == DraftUpdated(
        invocation_id="inv-1",  # type: ignore[arg-type]
        step=0,
        text_offset=2000,
        text="c",
        thinking_offset=500,
        thinking="",
    )
    assert got[1:] == []


async def test_a_long_draft_arrives_in_bounded_contiguous_chunks() -> None:
    live = Subscriber(None, 4, live=True)
    drafts = LiveDrafts({live})
    draft = drafts.begin("inv-1")
    text = "".join(chr(0x61 + n % 26) for n in range(2 * MAX_DRAFT_CHUNK_CHARS + 10))
    for start in range(0, len(text), 7):
        drafts.append(draft, text[start : start + 7], "")
    chunks = [u for u in await drain(live) if isinstance(u, DraftUpdated)]
    assert [len(c.text) for c in chunks] == [MAX_DRAFT_CHUNK_CHARS, MAX_DRAFT_CHUNK_CHARS, 10]
    assert [c.text_offset for c in chunks] == [0, MAX_DRAFT_CHUNK_CHARS, 2 * MAX_DRAFT_CHUNK_CHARS]
    assert "".join(c.text for c in chunks) == text


async def test_cleared_drafts_are_not_sent_and_steps_are_numbered() -> None:
    live = Subscriber(None, 4, live=True)
    plain = Subscriber(None, 4)
    drafts = LiveDrafts({live, plain})
    first = drafts.begin("inv-1")
    drafts.append(first, "will fail", "")
    drafts.step_failed(first)  # its waiting mark now yields nothing
    second = drafts.begin("inv-1")
    assert second.step == 1
    drafts.append(second, "kept", "")
    assert list(drafts.current()) == [second]
    drafts.finish("inv-1", "completed")
    assert list(drafts.current()) == []
    drafts.append(second, "late", "")  # after the end: ignored
    got = await drain(live)
    assert got == [
        DraftCleared(invocation_id="inv-1", step=0, reason="failed"),  # type: ignore[arg-type]
        DraftCleared(invocation_id="inv-1", step=None, reason="completed"),  # type: ignore[arg-type]
    ]
    # A watch that did not opt in gets neither drafts nor clears.
    assert await drain(plain) == []


async def test_a_full_buffer_drops_a_draft_clear_instead_of_lagging() -> None:
    live = Subscriber(None, 1, live=True)
    drafts = LiveDrafts({live})
    draft = drafts.begin("inv-1")
    drafts.append(draft, "text", "")
    live.offer(InteractionsChanged(pending=()))  # the buffer is now full
    drafts.finish("inv-1", "stopped")
    assert not live.ended
    assert await drain(live) == [InteractionsChanged(pending=())]


async def test_an_unknown_outcome_clears_as_failed() -> None:
    live = Subscriber(None, 4, live=True)
    drafts = LiveDrafts({live})
    drafts.append(drafts.begin("inv-1"), "", "thinking")
    drafts.finish("inv-1", "something new")
    got = await drain(live)
    assert got[0] == DraftCleared(invocation_id="inv-1", step=None, reason="failed")  # type: ignore[arg-type]


async def test_a_new_invocation_clears_drafts_left_over_from_another() -> None:
    live = Subscriber(None, 4, live=True)
    drafts = LiveDrafts({live})
    drafts.append(drafts.begin("inv-1"), "never finished", "")
    fresh = drafts.begin("inv-2")
    assert fresh.step == 0
    drafts.append(fresh, "new", "")
    assert list(drafts.current()) == [fresh]
    got = await drain(live)
    assert got == [
        DraftCleared(invocation_id="inv-1", step=None, reason="interrupted"),  # type: ignore[arg-type]
        DraftUpdated(
            invocation_id="inv-2",  # type: ignore[arg-type]
            step=0,
            text_offset=0,
            text="new",
            thinking_offset=0,
            thinking="",
        ),
    ]


async def test_a_draft_is_published_at_most_once_per_interval(
    mock_clock: trio.testing.MockClock,
) -> None:
    clock = mock_clock
    live = Subscriber(None, 4, live=True)
    drafts = LiveDrafts({live})
    draft = drafts.begin("inv-1")

    def texts(updates: list[object]) -> list[str]:
        return [u.text for u in updates if isinstance(u, DraftUpdated)]

    async with trio.open_nursery() as nursery:
        drafts.configure(1.0, nursery.start_soon)
        drafts.append(draft, "a", "")  # the first delta goes out at once
        assert texts(await drain(live)) == ["a"]
        drafts.append(draft, "b", "")
        drafts.append(draft, "c", "")
        assert texts(await drain(live)) == []  # waiting for the interval's end
        clock.jump(1.0)
        await trio.testing.wait_all_tasks_blocked()
        assert texts(await drain(live)) == ["bc"]
        # The step's end publishes what waits at once.
        drafts.append(draft, "e", "")
        assert texts(await drain(live)) == []
        drafts.flush(draft)
        assert texts(await drain(live)) == ["e"]
        clock.jump(1.0)
        await trio.testing.wait_all_tasks_blocked()
        assert texts(await drain(live)) == []  # the timer finds nothing left
        # A draft cleared while its publication waits is never sent.
        clock.jump(0.5)
        drafts.append(draft, "d", "")
        drafts.finish("inv-1", "completed")
        clock.jump(1.0)
        await trio.testing.wait_all_tasks_blocked()
        assert [type(u) for u in await drain(live)] == [DraftCleared]


async def test_watchers_in_step_share_one_update() -> None:
    first, second = Subscriber(None, 4, live=True), Subscriber(None, 4, live=True)
    drafts = LiveDrafts({first, second})
    drafts.append(drafts.begin("inv-1"), "same", "")
    (one,), (other,) = await drain(first), await drain(second)
    assert one is other  # built once; the server's frame cache encodes it once
