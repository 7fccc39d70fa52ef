"""A session's state as a function of its event log: the one place it changes.

:func:`apply` takes a :class:`SessionLog` and one logged event and brings the log's view
up to date. Nothing else assigns a session's log-derived fields: the live commit path
applies each event it has just appended, opening a store applies every stored event, and
a Host following another Host's writes applies what it reads back. All three therefore
agree by construction, and a state rebuilt from the log equals the live one.

Pure: no I/O, no clock, no Trio. ``apply`` is total: any sequence of events a store can
hold (one Host's, or several Hosts' interleaved) gives a state and never raises, so a
Host can always start again from what it finds. It mutates the log in place (a session's
log has exactly one owner, its :class:`~emelex.service._session.HostSession`) and returns
which parts changed, so the owner publishes only those.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

import attrs

from emelex.agent import TurnProgress
from emelex.contracts import (
    MAX_SAFE_INTEGER,
    MAX_SETTLED_INVOCATIONS,
    MAX_SETTLED_TEXT_CHARS,
    Diagnostic,
    Interaction,
    from_wire,
    to_wire,
)
from emelex.service._diagnostics import DIAGNOSTIC_RECORDED, DiagnosticLog
from emelex.service._events import (
    INTERACTION_REQUESTED,
    INTERACTION_RESOLVED,
    MAX_REQUESTS_KEPT,
    QUEUE_ADMITTED,
    QUEUE_FINISHED,
    QUEUE_RESUMED,
    QUEUE_STARTED,
    QUEUE_STOP,
    REQUEST_PREPARED,
    REQUEST_SETTLED,
    SESSION_TITLED,
    TURN_JOURNAL,
    WORKER_STARTED,
)
from emelex.service._queue import Work, WorkQueue
from emelex.store import MODEL_COMPLETION, TOOL_RESULT, TURN_INPUT

#: Turns whose committed rows the log keeps counting until their invocation finishes
#: (a turn's rows and its invocation's end commit together, so a few suffice; copied
#: turns of a fork never finish an invocation and fall out).
MAX_TURNS_COUNTED: Final = 64
#: How an invocation that committed nothing may have ended.
SETTLED_OUTCOMES: Final = frozenset({"stopped", "failed", "interrupted"})


class Change(enum.Flag):
    """Which parts of a session an event changed (what its owner must publish)."""

    NONE = 0
    QUEUE = enum.auto()
    INTERACTIONS = enum.auto()
    DIAGNOSTICS = enum.auto()
    TITLE = enum.auto()
    #: A stop of the running invocation was asked: whoever runs it cancels it.
    STOP = enum.auto()


@attrs.define
class RequestRecord:
    """One prepared main request: its event, summary and (once known) its end."""

    sequence: int
    payload: dict[str, Any]
    settled_at: int | None = None
    state: str = "running"
    tokens: int | None = None


@attrs.frozen
class Journal:
    """Where a turn stood when its Host last wrote it down (before each approval and
    tool start): what it commits if settled now, the calls it never started, the rounds
    it used and whether a tool may have run. Logs written before progress had fields
    hold a tool-start checkpoint only."""

    turn_id: str
    messages: tuple[Any, ...]
    open_calls: tuple[Any, ...] = ()
    rounds: Any = 1
    may_have_run: Any = True

    def progress(self) -> TurnProgress:
        """The record as a :class:`TurnProgress` (raises InvalidTurnProgress)."""
        return TurnProgress.from_wire(
            {
                "turnId": self.turn_id,
                "messages": list(self.messages),
                "openCalls": list(self.open_calls),
                "rounds": self.rounds,
                "mayHaveRun": self.may_have_run,
            }
        )


@attrs.frozen
class Settled:
    """An invocation that finished without committing a row of its own (its prompt is
    in no history row): what it asked, how it ended, and where in history it ended."""

    invocation_id: str
    operation: str
    work: str
    #: The prompt's first ``MAX_SETTLED_TEXT_CHARS`` code points (``clipped``: more).
    text: str
    clipped: bool
    outcome: str
    #: Whether it had started running (False: stopped while queued).
    started: bool
    #: The ``queue.finished`` event: it sits after every row of a lower sequence.
    finished_sequence: int
    #: The reference of the stop that asked for it (None: no stop did).
    stop_operation: str | None
    #: When the Host finished it, as the event says (None: an older log).
    finished_at_ms: int | None


@attrs.define(eq=False)
class SessionLog:
    """Everything a session's log says of it: configuration, queue, interactions,
    outcomes, context requests, workers, diagnostics and title.

    Compare two with :meth:`snapshot` (the differential tests do): equal snapshots
    mean equal answers from every operation that reads the log's state.
    """

    session_id: str
    agent_name: str
    workspace: str
    title: str | None
    created_at: float
    queue: WorkQueue
    branch: dict[str, Any] | None = None
    tools: tuple[str, ...] | None = None
    #: The workspace directory's (device, inode) when the session was created (None:
    #: a session stored before identities were recorded).
    workspace_identity: tuple[int, int] | None = None
    revision: int = 0
    #: The newest event that is not a title's (a title or a title failure): history
    #: reads fence here, so an automatic title never moves the history fence.
    history_revision: int = 0
    pending: dict[str, Interaction] = attrs.field(factory=dict)
    resolved: dict[str, Interaction] = attrs.field(factory=dict)
    finished: set[str] = attrs.field(factory=set)
    #: How each finished invocation ended (completed, failed, stopped, interrupted).
    outcomes: dict[str, str] = attrs.field(factory=dict)
    #: Invocations some Host started and nobody finished yet, oldest first.
    started: dict[str, None] = attrs.field(factory=dict)
    #: Running invocations whose stop was asked (their runner cancels them).
    stopping: set[str] = attrs.field(factory=set)
    #: The operation reference of each of those stops (the first one asked).
    stop_operations: dict[str, str] = attrs.field(factory=dict)
    #: Row events of the latest turns, by turn id (until their invocation finishes).
    turn_rows: dict[str, int] = attrs.field(factory=dict)
    #: The newest invocations that finished with nothing committed, oldest first.
    settled: list[Settled] = attrs.field(factory=list)
    journals: dict[str, Journal] = attrs.field(factory=dict)
    #: How often a restarted Host took up each started invocation again.
    resumes: dict[str, int] = attrs.field(factory=dict)
    #: The latest main requests the session prepared (for context reports).
    requests: list[RequestRecord] = attrs.field(factory=list)
    #: A coordinator's workers: (worker session, first task's invocation, operation).
    workers: list[tuple[str, str, str]] = attrs.field(factory=list)
    diagnostics: DiagnosticLog = attrs.field(factory=DiagnosticLog)

    @classmethod
    def from_config(
        cls, session_id: str, config: Mapping[str, Any], *, created_at: float, capacity: int
    ) -> SessionLog:
        """An empty log of a session stored with ``config`` (its creation events are
        applied next, like every other event)."""
        tools = config.get("tools")
        identity = config.get("workspaceIdentity")
        return cls(
            workspace_identity=None if identity is None else (int(identity[0]), int(identity[1])),
            session_id=session_id,
            agent_name=str(config["agent"]),
            workspace=str(config["workspace"]),
            title=config.get("title"),
            created_at=created_at,
            queue=WorkQueue(capacity),
            branch=config.get("branch"),
            tools=None if tools is None else tuple(str(t) for t in tools),
        )

    def snapshot(self) -> dict[str, Any]:
        """Every log-derived field as plain values (for comparisons and tests)."""
        return {
            "sessionId": self.session_id,
            "agent": self.agent_name,
            "workspace": self.workspace,
            "title": self.title,
            "branch": self.branch,
            "tools": self.tools,
            "workspaceIdentity": self.workspace_identity,
            "revision": self.revision,
            "historyRevision": self.history_revision,
            "queueRevision": self.queue.revision,
            "queue": [(e.work, e.state) for e in self.queue.entries],
            "pending": {k: to_wire(v) for k, v in self.pending.items()},
            "resolved": {k: to_wire(v) for k, v in self.resolved.items()},
            "finished": sorted(self.finished),
            "outcomes": dict(sorted(self.outcomes.items())),
            "started": list(self.started),
            "stopping": sorted(self.stopping),
            "stopOperations": dict(sorted(self.stop_operations.items())),
            "turnRows": list(self.turn_rows.items()),
            "settled": [attrs.astuple(s) for s in self.settled],
            "journals": dict(sorted(self.journals.items())),
            "resumes": dict(sorted(self.resumes.items())),
            "requests": [attrs.astuple(r) for r in self.requests],
            "workers": list(self.workers),
            "diagnostics": [to_wire(d) for d in self.diagnostics.items],
        }

    @property
    def running(self) -> str | None:
        """The invocation that runs now, by the log."""
        entry = self.queue.running
        return None if entry is None else entry.work.invocation_id

    def interrupted(self) -> list[str]:
        """Invocations a Host started and that never finished: after a crash, or when a
        Host takes over from one whose lease lapsed, these are settled as interrupted."""
        return [i for i in self.started if i in self.queue]


_Apply = Callable[[SessionLog, int, "str | None", dict[str, Any]], Change]


def _admitted(log: SessionLog, sequence: int, _: str | None, payload: dict[str, Any]) -> Change:
    invocation_id = str(payload["invocationId"])
    if invocation_id in log.queue or invocation_id in log.finished:
        return Change.NONE  # a log never admits twice; a corrupt one changes nothing
    work = Work(
        invocation_id,
        str(payload["operation"]),
        str(payload["text"]),
        sequence,
        kind=payload.get("work", "send"),
    )
    # The capacity is checked before an admission is written; the log is the truth.
    log.queue.record(work)
    return Change.QUEUE


def _started(log: SessionLog, _: int, __: str | None, payload: dict[str, Any]) -> Change:
    invocation_id = str(payload["invocationId"])
    if invocation_id not in log.queue:
        return Change.NONE  # stopped before it started (a start that lost the race)
    log.started[invocation_id] = None
    entry_running = log.queue.running
    if entry_running is None:
        log.queue.start(invocation_id)
        return Change.QUEUE
    # Two starts with no end between: a Host took over and the log holds the older
    # start too. The queue shows the first; both are settled as interrupted.
    return Change.NONE


def _stop(log: SessionLog, _: int, __: str | None, payload: dict[str, Any]) -> Change:
    invocation_id = str(payload["invocationId"])
    if invocation_id not in log.started or invocation_id not in log.queue:
        return Change.NONE
    log.stopping.add(invocation_id)
    operation = payload.get("operation")
    if isinstance(operation, str):
        log.stop_operations.setdefault(invocation_id, operation)
    return Change.STOP


def _finished(
    log: SessionLog, sequence: int, turn_id: str | None, payload: dict[str, Any]
) -> Change:
    invocation_id = str(payload["invocationId"])
    changed = Change.NONE
    # The turn's rows commit with the invocation's end, right before it.
    rows = 0 if turn_id is None else log.turn_rows.pop(turn_id, 0)
    if invocation_id in log.queue:
        entry = log.queue.remove(invocation_id)
        changed = Change.QUEUE
        if not rows:
            _record_settled(log, entry.work, sequence, payload)
        # The next start of the queue is the next start in the log.
        for other in log.started:
            if other in log.queue and log.queue.running is None:
                log.queue.start(other)
                break
    log.finished.add(invocation_id)
    log.outcomes.setdefault(invocation_id, str(payload.get("outcome", "failed")))
    log.started.pop(invocation_id, None)
    log.stopping.discard(invocation_id)
    log.stop_operations.pop(invocation_id, None)
    log.journals.pop(invocation_id, None)
    log.resumes.pop(invocation_id, None)
    return changed


def _record_settled(log: SessionLog, work: Work, sequence: int, payload: dict[str, Any]) -> None:
    """Keep what an invocation that committed nothing was (called before its end is
    applied to the rest of the log)."""
    outcome = payload.get("outcome", "failed")
    if not isinstance(outcome, str) or outcome not in SETTLED_OUTCOMES:
        return  # (a completed turn always commits its input)
    stop = payload.get("stopOperation", log.stop_operations.get(work.invocation_id))
    finished_at = payload.get("finishedAtMs")
    log.settled.append(
        Settled(
            invocation_id=work.invocation_id,
            operation=work.operation,
            work=work.kind,
            text=work.text[:MAX_SETTLED_TEXT_CHARS],
            clipped=len(work.text) > MAX_SETTLED_TEXT_CHARS,
            outcome=str(outcome),
            started=work.invocation_id in log.started,
            finished_sequence=sequence,
            stop_operation=stop if isinstance(stop, str) else None,
            finished_at_ms=(
                finished_at
                if type(finished_at) is int and 0 <= finished_at <= MAX_SAFE_INTEGER
                else None
            ),
        )
    )
    del log.settled[:-MAX_SETTLED_INVOCATIONS]


def _rows(log: SessionLog, _: int, turn_id: str | None, __: dict[str, Any]) -> Change:
    if turn_id is not None:
        counted = log.turn_rows.pop(turn_id, 0)
        log.turn_rows[turn_id] = counted + 1  # newest last
        while len(log.turn_rows) > MAX_TURNS_COUNTED:
            del log.turn_rows[next(iter(log.turn_rows))]
    return Change.NONE


def _requested(log: SessionLog, _: int, __: str | None, payload: dict[str, Any]) -> Change:
    interaction = from_wire(Interaction, payload)
    if interaction.id in log.resolved:
        return Change.NONE
    log.pending[interaction.id] = interaction
    return Change.INTERACTIONS


def _resolved(log: SessionLog, _: int, __: str | None, payload: dict[str, Any]) -> Change:
    interaction = from_wire(Interaction, payload)
    if interaction.id in log.resolved:
        return Change.NONE  # the first answer stands
    log.pending.pop(interaction.id, None)
    log.resolved[interaction.id] = interaction
    return Change.INTERACTIONS


def _journal(log: SessionLog, _: int, turn_id: str | None, payload: dict[str, Any]) -> Change:
    invocation_id = str(payload["invocationId"])
    if turn_id is not None and invocation_id in log.queue:
        # Kept as written: a record that does not read is settled by the checkpoint
        # rule, and checked when it is read (Journal.progress), never here.
        open_calls = payload.get("openCalls", ())
        log.journals[invocation_id] = Journal(
            turn_id,
            tuple(payload["messages"]),
            tuple(open_calls) if isinstance(open_calls, list) else (open_calls,),
            payload.get("rounds", 1),
            payload.get("mayHaveRun", True),
        )
    return Change.NONE


def _resumed(log: SessionLog, _: int, __: str | None, payload: dict[str, Any]) -> Change:
    invocation_id = str(payload["invocationId"])
    if invocation_id in log.started:
        log.resumes[invocation_id] = log.resumes.get(invocation_id, 0) + 1
    return Change.NONE


def _prepared(log: SessionLog, sequence: int, _: str | None, payload: dict[str, Any]) -> Change:
    request_id = payload.get("requestId")
    if request_id is not None and any(
        r.payload.get("requestId") == request_id for r in log.requests
    ):
        return Change.NONE  # written again after a commit whose outcome was unknown
    log.requests.append(RequestRecord(sequence, payload))
    del log.requests[:-MAX_REQUESTS_KEPT]
    return Change.NONE


def _settled(log: SessionLog, sequence: int, _: str | None, payload: dict[str, Any]) -> Change:
    # Records name their request by id; logs written before that, by its sequence.
    request_id = payload.get("requestId")
    for request in log.requests:
        if (
            request.payload.get("requestId") == request_id
            if request_id is not None
            else request.sequence == payload["preparedSequence"]
        ):
            request.settled_at = sequence
            request.state = str(payload["state"])
            request.tokens = payload["providerInputTokens"]
    return Change.NONE


def _worker(log: SessionLog, _: int, __: str | None, payload: dict[str, Any]) -> Change:
    log.workers.append(
        (str(payload["workerId"]), str(payload["invocationId"]), str(payload["operation"]))
    )
    return Change.NONE


def _diagnostic(log: SessionLog, _: int, __: str | None, payload: dict[str, Any]) -> Change:
    # Two Hosts may number one concurrently: the log's order decides the revision.
    recorded = from_wire(Diagnostic, dict(payload, revision=log.diagnostics.revision + 1))
    log.diagnostics.add(recorded)
    return Change.DIAGNOSTICS


def _titled(log: SessionLog, _: int, __: str | None, payload: dict[str, Any]) -> Change:
    log.title = str(payload["title"])
    return Change.TITLE


#: The table: each event kind the service writes, and how it changes a session.
#: Of turn events the log counts the row events (a turn that committed rows is in
#: history); patches and creation carry nothing else a session keeps.
APPLY: Final[Mapping[str, _Apply]] = {
    TURN_INPUT: _rows,
    MODEL_COMPLETION: _rows,
    TOOL_RESULT: _rows,
    QUEUE_ADMITTED: _admitted,
    QUEUE_STARTED: _started,
    QUEUE_STOP: _stop,
    QUEUE_FINISHED: _finished,
    INTERACTION_REQUESTED: _requested,
    INTERACTION_RESOLVED: _resolved,
    TURN_JOURNAL: _journal,
    QUEUE_RESUMED: _resumed,
    REQUEST_PREPARED: _prepared,
    REQUEST_SETTLED: _settled,
    WORKER_STARTED: _worker,
    DIAGNOSTIC_RECORDED: _diagnostic,
    SESSION_TITLED: _titled,
}


def apply(
    log: SessionLog, sequence: int, kind: str, turn_id: str | None, payload: dict[str, Any]
) -> Change:
    """Bring ``log`` up to the event ``sequence``; returns what changed. An event at or
    before the log's revision was applied already and changes nothing."""
    if sequence <= log.revision:
        return Change.NONE
    log.revision = sequence
    if not _of_a_title(kind, payload):
        log.history_revision = sequence
    handler = APPLY.get(kind)
    if handler is None:
        return Change.NONE
    return handler(log, sequence, turn_id, payload)


def _of_a_title(kind: str, payload: dict[str, Any]) -> bool:
    """Whether the event is an automatic title's: its title, or its failure recorded
    as a diagnostic (both publish no rows and touch only the diagnostics revision)."""
    if kind == SESSION_TITLED:
        return True
    return kind == DIAGNOSTIC_RECORDED and payload.get("kind") == "title"


def rebuild(log: SessionLog, events: Iterable[Any]) -> Change:
    """Apply stored events (anything with sequence, kind, turn_id and payload)."""
    changed = Change.NONE
    for event in events:
        changed |= apply(log, event.sequence, event.kind, event.turn_id, event.payload)
    return changed
