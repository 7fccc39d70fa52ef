"""Live drafts: the text a model step is streaming, offered to live watchers before it
commits.

A draft is not durable. The Host keeps one :class:`Draft` per model step of the running
invocation (shared by every watcher) and each live watcher a :class:`DraftMark`: its
offsets into that draft and whether a mark is already waiting in its buffer. A delta
only queues a mark when none is waiting, so however far behind a watcher falls, it
holds at most one mark per step and receives the accumulated text in one update (or
a few of ``MAX_DRAFT_CHUNK_CHARS``): drafts coalesce instead of filling the buffer, and
the model stream never waits for anyone.

Watchers that keep up are still not woken for every token: a draft is published at
most once per ``interval`` (the first delta at once; the rest of an interval's deltas
by a short timer task), so a fast model with many remote watchers costs one frame per
watcher per interval, not one per token.
"""

from __future__ import annotations

import bisect
from collections.abc import Awaitable, Callable, Set
from typing import TYPE_CHECKING, Final, Protocol, get_args

import trio

from emelex.contracts import (
    MAX_DRAFT_CHUNK_CHARS,
    DraftCleared,
    DraftClearReason,
    DraftUpdated,
    trusted,
)

#: Seconds between two publications of one draft (the Host's default).
DRAFT_INTERVAL: Final = 0.05

#: Starts a background task (the Host's nursery's ``start_soon``).
Spawn = Callable[[Callable[[], Awaitable[None]]], None]

_REASONS: dict[str, DraftClearReason] = {r: r for r in get_args(DraftClearReason)}

if TYPE_CHECKING:
    from collections.abc import Iterable


class DraftWatcher(Protocol):
    """What live drafts need of a watcher (the watch's Subscriber is one)."""

    def offer_draft(self, draft: Draft) -> None: ...

    def drafts_cleared(self, drafts: list[Draft], update: DraftCleared) -> None: ...


class _Text:
    """Appended pieces and where each starts, so reading from an offset costs only the
    length read (not the whole text so far)."""

    __slots__ = ("_parts", "_starts", "length")

    def __init__(self) -> None:
        self._parts: list[str] = []
        self._starts: list[int] = []
        self.length = 0

    def append(self, piece: str) -> None:
        if piece:
            self._parts.append(piece)
            self._starts.append(self.length)
            self.length += len(piece)

    def read(self, offset: int, limit: int) -> str:
        """At most ``limit`` code points from ``offset``."""
        if offset >= self.length:
            return ""
        index = bisect.bisect_right(self._starts, offset) - 1
        pieces = [self._parts[index][offset - self._starts[index] :]]
        size = len(pieces[0])
        index += 1
        while size < limit and index < len(self._parts):
            pieces.append(self._parts[index])
            size += len(self._parts[index])
            index += 1
        return "".join(pieces)[:limit]


class Draft:
    """One model step's answer and reasoning so far."""

    __slots__ = (
        "cleared",
        "invocation_id",
        "last_key",
        "last_update",
        "next_publish",
        "publish_pending",
        "step",
        "text",
        "thinking",
    )

    def __init__(self, invocation_id: str, step: int) -> None:
        self.invocation_id = invocation_id
        self.step = step
        self.text = _Text()
        self.thinking = _Text()
        self.cleared = False
        #: Trio time before which deltas wait for the pending publication.
        self.next_publish = float("-inf")
        self.publish_pending = False
        # Watchers that keep up take the same update: build it once for all of them
        # (one object, so the server's frame cache encodes it once too).
        self.last_key: tuple[int, int, int, int] | None = None
        self.last_update: DraftUpdated | None = None


class DraftMark:
    """A live watcher's place in one draft; ``queued`` while it waits in the buffer."""

    __slots__ = ("draft", "queued", "text_offset", "thinking_offset")

    def __init__(self, draft: Draft) -> None:
        self.draft = draft
        self.text_offset = 0
        self.thinking_offset = 0
        self.queued = False

    @property
    def behind(self) -> bool:
        draft = self.draft
        return not draft.cleared and (
            self.text_offset < draft.text.length or self.thinking_offset < draft.thinking.length
        )

    def take(self) -> DraftUpdated | None:
        """The next chunk this watcher has not seen (None when none, or when the draft
        was cleared: its committed rows supersede it)."""
        if not self.behind:
            return None
        draft = self.draft
        key = (self.text_offset, self.thinking_offset, draft.text.length, draft.thinking.length)
        if key == draft.last_key and draft.last_update is not None:
            update = draft.last_update
            self.text_offset += len(update.text)
            self.thinking_offset += len(update.thinking)
            return update
        text = draft.text.read(self.text_offset, MAX_DRAFT_CHUNK_CHARS)
        thinking = draft.thinking.read(self.thinking_offset, MAX_DRAFT_CHUNK_CHARS)
        update = trusted(
            DraftUpdated,
            kind="draft",
            invocation_id=draft.invocation_id,
            step=draft.step,
            text_offset=self.text_offset,
            text=text,
            thinking_offset=self.thinking_offset,
            thinking=thinking,
        )
        draft.last_key, draft.last_update = key, update
        self.text_offset += len(text)
        self.thinking_offset += len(thinking)
        return update


class LiveDrafts:
    """The drafts of one session's running invocation, published to its live watchers
    (``subscribers`` is the session's set of watchers; only live ones take drafts)."""

    def __init__(self, subscribers: Set[DraftWatcher]) -> None:
        self._subscribers = subscribers
        self._drafts: dict[str, list[Draft]] = {}
        # Until configured (as the Host does), every delta is published at once.
        self._interval = 0.0
        self._spawn: Spawn | None = None

    def configure(self, interval: float, spawn: Spawn) -> None:
        """Publish each draft at most once per ``interval`` seconds; ``spawn`` runs the
        timer that publishes an interval's last deltas."""
        self._interval = interval
        self._spawn = spawn

    def begin(self, invocation_id: str) -> Draft:
        """A new step of ``invocation_id`` (numbered from 0 within the invocation)."""
        # One invocation runs at a time per session: drafts of another one are left
        # over from a turn that never reached its end here (its lease lost, say).
        for stale in [i for i in self._drafts if i != invocation_id]:
            self.finish(stale, "interrupted")
        steps = self._drafts.setdefault(invocation_id, [])
        draft = Draft(invocation_id, len(steps))
        steps.append(draft)
        return draft

    def append(self, draft: Draft, text: str, thinking: str) -> None:
        if draft.cleared:
            return
        draft.text.append(text)
        draft.thinking.append(thinking)
        if draft.publish_pending:
            return  # the timer publishes this with the rest of its interval
        now = trio.current_time() if self._spawn is not None else 0.0
        if now >= draft.next_publish or self._spawn is None:
            self._publish(draft, now)
        else:
            draft.publish_pending = True
            self._spawn(lambda: self._publish_later(draft))

    def _publish(self, draft: Draft, now: float) -> None:
        draft.next_publish = now + self._interval
        for subscriber in self._subscribers:
            subscriber.offer_draft(draft)

    async def _publish_later(self, draft: Draft) -> None:
        await trio.sleep_until(draft.next_publish)
        self.flush(draft)

    def flush(self, draft: Draft) -> None:
        """Publish what waits for the interval's end now (the step ended)."""
        if draft.publish_pending:
            draft.publish_pending = False
            if not draft.cleared:
                self._publish(draft, trio.current_time())

    def current(self) -> Iterable[Draft]:
        """The drafts a watcher joining now starts from (from offset 0)."""
        for steps in self._drafts.values():
            for draft in steps:
                if not draft.cleared and (draft.text.length or draft.thinking.length):
                    yield draft

    def step_failed(self, draft: Draft) -> None:
        """One model step failed: its text will not commit (the turn may go on)."""
        if not draft.cleared:
            self._clear([draft], draft.invocation_id, draft.step, "failed")

    def finish(self, invocation_id: str, outcome: str) -> None:
        """The invocation ended with ``outcome`` (its rows, if any, were just published):
        drop its drafts."""
        steps = self._drafts.pop(invocation_id, [])
        reason = _REASONS.get(outcome, "failed")
        self._clear([d for d in steps if not d.cleared], invocation_id, None, reason)

    def _clear(
        self, drafts: list[Draft], invocation_id: str, step: int | None, reason: DraftClearReason
    ) -> None:
        shown = any(d.text.length or d.thinking.length for d in drafts)
        for draft in drafts:
            draft.cleared = True
        if not shown:
            return  # no watcher saw anything of these steps
        update = trusted(
            DraftCleared,
            kind="draftCleared",
            invocation_id=invocation_id,
            step=step,
            reason=reason,
        )
        for subscriber in self._subscribers:
            subscriber.drafts_cleared(drafts, update)
