"""Following a session on a Host in the terminal: rows as they commit, the queue, and
approvals answered through ``respond``. An invocation that ended with nothing committed
(the queue snapshot's ``settled``) is shown where it happened: its prompt is in no row."""

from __future__ import annotations

import datetime
import json
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, TextIO

import attrs
import trio

from emelex._text import clip
from emelex.cli._approvals import StdinLines
from emelex.cli._host_connect import operation_ref
from emelex.cli._render import bold, dim, safe
from emelex.contracts import (
    ApproveResponse,
    DenyResponse,
    HistoryRow,
    Interaction,
    InteractionsChanged,
    Position,
    QueueChanged,
    QueueSnapshot,
    RowsPublished,
    SettledInvocation,
    WatchEnded,
)

if TYPE_CHECKING:
    from emelex.service import HostClient

TOOL_RESULT_CHARS = 400
#: Questions the watch hands to the asking task before it waits for it.
QUESTIONS_BUFFERED = 64
#: What the model reads when the terminal's user said no.
DENIED_IN_TERMINAL = "the user declined this call at the terminal, so it was not run"


#: How an invocation that committed nothing ended, in words.
SETTLED_NOTES = {
    "stopped": "stopped before anything was committed",
    "failed": "failed before anything was committed",
    "interrupted": "interrupted (the Host stopped) before anything was committed",
}


def _arguments(arguments: object) -> str:
    return json.dumps(arguments, ensure_ascii=False, sort_keys=True)


def settled_note(item: SettledInvocation) -> str:
    """What happened to an invocation that committed nothing: how, when, by which stop."""
    note = SETTLED_NOTES.get(item.outcome, f"{item.outcome} before anything was committed")
    if item.outcome == "stopped" and not item.started:
        note += " (removed from the queue before it ran)"
    parts = [note]
    if item.finished_at_ms is not None:
        when = datetime.datetime.fromtimestamp(item.finished_at_ms / 1000, datetime.UTC)
        parts.append(when.astimezone().strftime("%Y-%m-%d %H:%M:%S %Z"))
    if item.stop_operation is not None:
        parts.append(f"by stop {item.stop_operation}")
    return " · ".join(parts)


@attrs.define
class Follower:
    """Prints a session's rows and answers its approvals; remembers its cursor, so a
    watch that lagged or dropped resumes with no gap and no duplicate."""

    client: HostClient
    session_id: str
    lines: StdinLines | None  # None: never ask (other clients answer)
    cursor: Position | None = None
    show_user: bool = False
    hide_reasoning: bool = False
    out: TextIO = attrs.field(factory=lambda: sys.stdout)
    err: TextIO = attrs.field(factory=lambda: sys.stderr)
    _asked: set[str] = attrs.field(factory=set)
    _pending: set[str] = attrs.field(factory=set)
    #: The question on screen waiting for y/N, and the scope that stops the wait.
    _prompting: tuple[str, trio.CancelScope] | None = None
    #: Settled invocations known (shown, or older than what was shown), and those
    #: waiting for their place (oldest first).
    _settled_known: set[str] = attrs.field(factory=set)
    _settled_waiting: list[SettledInvocation] = attrs.field(factory=list)

    # -- rows ---------------------------------------------------------------------------
    def show(self, rows: tuple[HistoryRow, ...]) -> None:
        for row in rows:
            if self.cursor is not None and row.position <= self.cursor:
                continue  # already shown (a resumed read)
            self.cursor = row.position
            self._print_settled(before=row.position.source_sequence)
            if not row.internal:
                self._print_row(row)
        self.out.flush()

    def _print_settled(self, before: int | None = None) -> None:
        """Print the waiting settled invocations that ended before the event ``before``
        (None: all of them)."""
        while self._settled_waiting and (
            before is None or self._settled_waiting[0].finished_sequence < before
        ):
            item = self._settled_waiting.pop(0)
            if self.show_user:
                text = item.text + ("…" if item.text_clipped else "")
                print(bold("user> ") + safe(text), file=self.out, flush=True)
            print(dim(f"  ⊘ {safe(settled_note(item))}"), file=self.err, flush=True)

    def _wait_for_place(self, items: tuple[SettledInvocation, ...]) -> bool:
        """Note settled invocations not known yet; True when there are new ones."""
        fresh = [i for i in items if i.invocation_id not in self._settled_known]
        self._settled_known.update(i.invocation_id for i in fresh)
        self._settled_waiting = sorted(
            [*self._settled_waiting, *fresh], key=lambda i: i.finished_sequence
        )
        return bool(fresh)

    async def _show_settled(self, queue: QueueSnapshot) -> None:
        """Show newly settled invocations in place: the rows stored before each go first."""
        if self._wait_for_place(queue.settled):
            await self.catch_up()
            self._print_settled()

    def _print_row(self, row: HistoryRow) -> None:
        # As in a local run: answers on stdout, everything else dimmed on stderr.
        if row.role == "user":
            if self.show_user:
                print(bold("user> ") + safe(row.body), file=self.out)
        elif row.role == "assistant":
            if row.thinking and not self.hide_reasoning:
                print(dim(safe(row.thinking)), file=self.err)
            if row.body:
                print(safe(row.body), file=self.out, flush=True)
            for call in row.tool_calls:
                print(dim(f"→ {safe(call.name)} {safe(_arguments(call.arguments))}"), file=self.err)
        elif row.role == "tool":
            result = clip(row.body, TOOL_RESULT_CHARS)
            print(dim(f"← {safe(row.tool_name or 'tool')}: {safe(result)}"), file=self.err)
        self.err.flush()

    async def catch_up(self) -> None:
        """Print every stored row after the cursor (one fence for the whole scan)."""
        through: int | None = None
        after = self.cursor
        while True:
            page = await self.client.history(
                self.session_id, through=through, after=after, limit=500
            )
            through = page.through
            self.show(page.rows)
            if page.next_after is None:
                return
            after = page.next_after

    async def skip_to_end(self, keep: int) -> None:
        """Move the cursor to the newest row, printing only the last ``keep`` rows (and
        the settled invocations among and after them)."""
        # Taken first: every invocation it lists ended within the history read next.
        settled = (await self.client.queue(self.session_id)).settled
        through: int | None = None
        after: Position | None = None
        last: Position | None = None
        tail: list[HistoryRow] = []  # one row more than shown: is any row left out?
        while True:
            page = await self.client.history(
                self.session_id, through=through, after=after, limit=500
            )
            through = page.through
            if keep:
                tail = [*tail, *(r for r in page.rows if not r.internal)][-(keep + 1) :]
            if page.rows:
                last = page.rows[-1].position
            if page.next_after is None:
                break
            after = page.next_after
        begins = 0  # the whole history is shown: every settled invocation too
        if len(tail) > keep:  # else only those after the first row shown
            tail = tail[1:]
            begins = tail[0].position.source_sequence
        self._wait_for_place(tuple(s for s in settled if keep and s.finished_sequence > begins))
        self._settled_known.update(s.invocation_id for s in settled)
        self.cursor = None
        self.show(tuple(tail))
        self._print_settled()
        if last is not None:
            self.cursor = last

    # -- approvals ----------------------------------------------------------------------
    def _note_pending(self, pending: tuple[Interaction, ...]) -> None:
        """Record what is pending now; a question on screen that another client (the web
        page, another attach) settled meanwhile stops waiting for this terminal."""
        self._pending = {interaction.id for interaction in pending}
        if self._prompting is not None and self._prompting[0] not in self._pending:
            self._prompting[1].cancel()

    async def _ask_each(self, questions: trio.MemoryReceiveChannel[Interaction]) -> None:
        async for interaction in questions:
            if interaction.id in self._pending:
                await self._ask(interaction)

    async def _ask(self, interaction: Interaction) -> None:
        call = interaction.tool_call
        print(
            f"\n{bold('Approve ' + safe(call.name) + '?')} {safe(interaction.reason)}\n"
            f"  {dim(safe(_arguments(call.arguments)))}",
            file=self.err,
        )
        if self.lines is None:
            print(dim("  (waiting for another client to answer)"), file=self.err)
            return
        print("  [y/N] ", end="", file=self.err, flush=True)
        with trio.CancelScope() as scope:
            self._prompting = (interaction.id, scope)
            try:
                line = await self.lines.readline()
            finally:
                self._prompting = None
        if scope.cancelled_caught:
            await self._settled_elsewhere(interaction)
            return
        if line is None:
            self.lines = None  # no more input: leave approvals to other clients
            print(dim("\n  (no input left: another client can answer)"), file=self.err)
            return
        approve = line.strip().lower() in ("y", "yes")
        response = ApproveResponse() if approve else DenyResponse(reason=DENIED_IN_TERMINAL)
        await self._respond(interaction, response)

    async def _settled_elsewhere(self, interaction: Interaction) -> None:
        """Say, in place of the answer, how the question was settled without us."""
        from emelex.service import ServiceError

        try:
            settled = await self.client.interaction(self.session_id, interaction.id)
        except ServiceError:
            settled = None
        resolution = None if settled is None else settled.resolution
        if resolution is None:
            how = "settled elsewhere"
        elif resolution.by == "client":
            how = f"{resolution.outcome} by another client"
            if resolution.outcome == "denied" and resolution.reason:
                how += f": {safe(resolution.reason)}"
        elif resolution.by == "stop":
            how = "the turn was stopped"
        else:
            how = "the Host restarted"
        print(dim(f"\n  ({how}; not asking here any more)"), file=self.err, flush=True)

    async def _respond(
        self, interaction: Interaction, response: ApproveResponse | DenyResponse
    ) -> None:
        from emelex.service import InteractionSettled

        try:
            await self.client.respond(
                self.session_id, interaction.id, response, operation=operation_ref()
            )
        except InteractionSettled:
            print(dim("  (already answered by another client)"), file=self.err)

    # -- following ----------------------------------------------------------------------
    async def follow(
        self,
        done: Callable[[QueueSnapshot], bool],
        on_queue: Callable[[QueueSnapshot], None] | None = None,
    ) -> str:
        """Watch until ``done`` holds for a queue snapshot ("done") or the watch ends
        for good (its reason: "closed", "sessionDeleted"). Approvals are asked in a task
        of their own, so the watch goes on (and notices an answer from elsewhere) while
        the terminal waits for y/N."""
        send, receive = trio.open_memory_channel[Interaction](QUESTIONS_BUFFERED)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._ask_each, receive)
            async with send:
                ended = await self._watch(send, done, on_queue)
            nursery.cancel_scope.cancel()
        return ended

    async def _watch(
        self,
        questions: trio.MemorySendChannel[Interaction],
        done: Callable[[QueueSnapshot], bool],
        on_queue: Callable[[QueueSnapshot], None] | None,
    ) -> str:
        while True:
            async with self.client.watch(self.session_id, after=self.cursor) as updates:
                async for update in updates:
                    if isinstance(update, RowsPublished):
                        self.show(update.rows)
                    elif isinstance(update, QueueChanged):
                        await self._show_settled(update.queue)
                        if on_queue is not None:
                            on_queue(update.queue)
                        if done(update.queue):
                            # Rows of work that ended before this watch began arrive
                            # after its first snapshot: read them from the store.
                            await self.catch_up()
                            return "done"
                    elif isinstance(update, InteractionsChanged):
                        self._note_pending(update.pending)
                        for interaction in update.pending:
                            if interaction.id not in self._asked:
                                self._asked.add(interaction.id)
                                await questions.send(interaction)
                    elif isinstance(update, WatchEnded):
                        if update.reason != "lagged":
                            return update.reason
                        if update.resume_after is not None:
                            self.cursor = max(
                                self.cursor or update.resume_after, update.resume_after
                            )
                        break
                else:
                    return "closed"


def invocation_gone(invocation_id: str) -> Callable[[QueueSnapshot], bool]:
    """``done`` for one invocation: it has left the queue (finished, failed or stopped)."""

    def gone(queue: QueueSnapshot) -> bool:
        return all(entry.invocation_id != invocation_id for entry in queue.entries)

    return gone
