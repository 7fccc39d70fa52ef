"""A session's runner: one loop that serves a Host alone and a group of Hosts alike.

claim (with other Hosts: the session's lease) -> resume or settle what a lost Host left ->
start the oldest queued work -> run its turn -> commit how it ended -> repeat; it sleeps
while there is nothing to do. A turn's rows, the end of its invocation and the settlement
of its interactions commit together, through the session.
"""

from __future__ import annotations

import pathlib
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Final

import attrs
import trio

from emelex._errors import EmelexError
from emelex._ids import new_id
from emelex._text import clip
from emelex.agent import AgentCancellation, AgentError, TurnProgress
from emelex.app import Agent, Engine, Harness
from emelex.app import Session as AppSession
from emelex.contracts import to_wire
from emelex.model import Client, Completed, GenerationOptions, GenerationRequest, Message
from emelex.service._diagnostics import DIAGNOSTIC_RECORDED, classify
from emelex.service._events import QUEUE_FINISHED, QUEUE_STARTED, SESSION_TITLED
from emelex.service._queue import Work
from emelex.service._recovery import (
    Resumption,
    diagnostic_for,
    interaction_settlements,
    resume_or_settle,
)
from emelex.service._registry import SessionRegistry
from emelex.service._session import HostSession
from emelex.service._turn_hooks import TurnHooks
from emelex.store import NewEvent, Store, StoreError, turn_events

if TYPE_CHECKING:
    from emelex.service._cluster import Cluster

#: How long the automatic title call of a session may take.
TITLE_SECONDS: Final = 60.0


class Runner:
    """Runs every session's work on this Host (see the module docs)."""

    def __init__(
        self,
        *,
        registry: SessionRegistry,
        store: Store,
        engine: Engine,
        agents: Mapping[str, Agent],
        harnesses: Mapping[str, Harness],
        spawn: Callable[..., Any],
        cluster: Callable[[], Cluster | None],
        titles: bool,
    ) -> None:
        self._registry = registry
        self._store = store
        self._engine = engine
        self._agents = agents
        self._harnesses = harnesses
        self._spawn = spawn
        self._cluster = cluster
        self._titles = titles
        self._asking: set[trio.CancelScope] = set()

    def start(self, state: HostSession) -> None:
        """Start the session's runner task (in the Host's nursery)."""
        self._spawn(self.run, state, name=f"host-session-{state.session_id}")

    async def run(self, state: HostSession) -> None:
        """The session's runner, on one Host or many: claim the session (with other
        Hosts: its lease), settle what a lost Host left started, start the oldest
        queued work, run it, repeat; sleep while there is nothing to do."""
        cluster = self._cluster()
        if cluster is not None:
            cluster.enter_runner(state)
        while not self._registry.is_closed():
            if (
                state.queue.next_to_run() is None
                and not state.log.interrupted()
                and (cluster is None or state.queue.running is None)
            ):
                state.wake = trio.Event()
                await state.wake.wait()
                continue
            try:
                if cluster is not None and not await cluster.claim(state):
                    continue
                async with state.lock:
                    # While this waited for the lock the Host may have begun closing,
                    # or a stop may have taken the work out of the queue.
                    if self._registry.is_closed():
                        return
                    mode = self._agents[state.agent_name].on_restart
                    resumption = await resume_or_settle(state, mode)
                    work = state.queue.next_to_run() if resumption is None else resumption.work
                    if work is None:
                        continue
                    # Set before the append awaits, so a close that begins meanwhile
                    # cancels this turn (it then settles at once, as interrupted); a
                    # close that began while the take-over above committed found no
                    # cancellation to cancel, so the turn starts cancelled.
                    cancellation = state.cancellation = AgentCancellation()
                    if self._registry.is_closed():
                        cancellation.cancel()
                    if resumption is None:
                        started = {"invocationId": work.invocation_id}
                        await state.commit([NewEvent(QUEUE_STARTED, None, started)])
                    if state.log.running != work.invocation_id:
                        state.cancellation = None
                        continue  # (only a log other Hosts wrote to can say otherwise)
                await self._run_turn(state, work, cancellation, resumption)
            except StoreError as exc:
                if cluster is None:
                    raise
                cluster.abandon(state, exc)  # LeaseLost, or a database lost mid-commit

    async def app_session(self, state: HostSession, *, stored: bool = True) -> AppSession:
        """The running engine session of ``state`` (started on first use from its
        stored history; ``stored=False`` starts a session not yet in the store)."""
        if state.app is None:
            defined = self._agents[state.agent_name]
            hooks = TurnHooks(state, self._spawn)
            agent = attrs.evolve(
                defined,
                client=Client(hooks.model(defined.client.model)),
                approver=hooks,
                workspace=pathlib.Path(state.workspace),
            )
            history = (await self._store.load_session(state.session_id)).messages if stored else ()
            starter = self._engine.create(agent)
            harness = self._harnesses.get(state.agent_name)
            if harness is not None:
                starter = starter.harness(harness)
            state.app = (
                await starter.session_id(state.session_id)
                # The store holds only what Hosts committed (turns, checkpoints, forks).
                .history(history, committed=True)
                .progress_journal(hooks.journal)
                .start()
            )
            if state.tools is not None:
                # A tool removed from the agent since the session narrowed its tools is
                # gone from the ceiling too: the narrowed set only ever shrinks.
                available = set(state.app.agent_session.available_tools)
                state.app.agent_session.set_enabled_tools(
                    name for name in state.tools if name in available
                )
        return state.app

    async def _run_turn(
        self,
        state: HostSession,
        work: Work,
        cancellation: AgentCancellation,
        resumption: Resumption | None = None,
    ) -> None:
        progress = None if resumption is None else resumption.progress
        turn_id = new_id() if progress is None else progress.turn_id
        outcome = "completed"
        error: dict[str, Any] | None = None
        failure: BaseException | None = None
        try:
            app = await self.app_session(state)
            if progress is not None:
                turn = await app.resume_and_wait(progress, cancellation=cancellation)
            else:
                turn = await app.send_and_wait(work.text, cancellation=cancellation)
            events = turn_events(turn.turn_id, turn.messages)
            turn_id = turn.turn_id
        except AgentError as exc:
            if cancellation.cancelled:
                outcome = "interrupted" if self._registry.is_closed() else "stopped"
            else:
                outcome = "failed"
            error = {"type": type(exc).__name__, "message": str(exc)[:4096]}
            failure = exc
            if exc.rolled_back is False:
                events = turn_events(turn_id, exc.checkpoint, outcome="checkpointed")
            else:
                events = _before_driving(turn_id, progress)
        except EmelexError as exc:
            # The session could not start (an integration failed, the agent is invalid):
            # nothing ran now, so only what ran before a restart is committed.
            outcome = "failed"
            error = {"type": type(exc).__name__, "message": str(exc)[:4096]}
            failure = exc
            events = _before_driving(turn_id, progress)
        if outcome == "interrupted" and self._agents[state.agent_name].on_restart == "resume":
            # The Host is closing: the invocation stays started, its interactions
            # pending, and the next Host continues the turn from its last journal
            # (written now if it still waited for the next commit).
            state.cancellation = None
            with trio.CancelScope(shield=True):
                async with state.lock:
                    await state.flush()
            return
        await self._finish(state, work, turn_id, outcome, error, failure, events)
        if self._titles and outcome == "completed" and state.title is None:
            # A title never delays work: the next queued turn starts while it is asked.
            self._spawn(self._titled, state, work.text, turn_id)

    async def _finish(
        self,
        state: HostSession,
        work: Work,
        turn_id: str,
        outcome: str,
        error: dict[str, Any] | None,
        failure: BaseException | None,
        events: list[NewEvent],
    ) -> None:
        """Commit how the invocation ended: its turn's rows, the settlement of its
        interactions, its end and (when it failed) a diagnostic, together."""
        with trio.CancelScope(shield=True):
            async with state.lock:
                settled = interaction_settlements(state, work.invocation_id, "stop")
                finished: dict[str, Any] = {
                    "invocationId": work.invocation_id,
                    "outcome": outcome,
                    "finishedAtMs": int(time.time() * 1000),
                }
                if error is not None:
                    finished["error"] = error
                batch = [*events, *settled, NewEvent(QUEUE_FINISHED, turn_id, finished)]
                if outcome == "failed" and failure is not None:
                    kind, code, message = classify(failure)
                    recorded = diagnostic_for(
                        state, kind, code, message, work.invocation_id, turn_id, len(batch)
                    )
                    batch.append(NewEvent(DIAGNOSTIC_RECORDED, turn_id, to_wire(recorded)))
                state.cancellation = None
                await state.commit(batch)

    def close(self) -> None:
        """The Host is closing: titles still being asked are dropped."""
        for scope in self._asking:
            scope.cancel()

    async def _titled(self, state: HostSession, text: str, turn_id: str) -> None:
        with trio.CancelScope() as scope:
            self._asking.add(scope)
            try:
                if not self._registry.is_closed():
                    await self._make_title(state, text, turn_id)
            finally:
                self._asking.discard(scope)

    async def _make_title(self, state: HostSession, text: str, turn_id: str) -> None:
        """Ask the agent's model for a short title; record it, or a title diagnostic."""
        client = self._agents[state.agent_name].client
        request = GenerationRequest(
            [
                Message.system(
                    "Reply with a title of at most eight words for a conversation that"
                    " starts with the user's message. Reply with the title only."
                ),
                Message.user(text[:2000]),
            ],
            options=GenerationOptions(max_tokens=24),
        )
        title = ""
        failure: str | None = None
        with trio.move_on_after(TITLE_SECONDS) as scope:
            try:
                async with client.generate(request) as stream:
                    async for event in stream:
                        if isinstance(event, Completed):
                            title = " ".join(event.response.text.split())
            except Exception as exc:  # any model's failure; a title never fails a turn
                failure = f"the title call failed ({type(exc).__name__})"
        if scope.cancelled_caught:
            failure = f"the title call took longer than {TITLE_SECONDS:g} s"
        title = clip(title.strip(" \"'"), 80)
        if failure is None and not title:
            failure = "the model answered the title call with no text"
        async with state.lock:
            if failure is not None:
                recorded = diagnostic_for(state, "title", "modelError", failure, None, turn_id, 1)
                await state.commit([NewEvent(DIAGNOSTIC_RECORDED, turn_id, to_wire(recorded))])
            else:
                await state.commit([NewEvent(SESSION_TITLED, None, {"title": title})])


def check_agents(agents: Mapping[str, Agent], harnesses: Mapping[str, Harness]) -> None:
    """Raise TypeError unless every agent is an Agent and every harness has one."""
    for name in harnesses:
        if name not in agents:
            raise TypeError(f"a harness is given for {name!r}, which is no agent")
    for name in agents:
        if not isinstance(agents[name], Agent):
            raise TypeError(f"agent {name!r} is not an emelex Agent")


def _before_driving(turn_id: str, progress: TurnProgress | None) -> list[NewEvent]:
    """The turn events of a turn that ended before it drove anything now: a resumed
    turn in which a tool may have run keeps its journalled checkpoint (harness rule),
    any other is rolled back."""
    if progress is not None and progress.may_have_run:
        return turn_events(turn_id, progress.messages, outcome="checkpointed")
    return turn_events(turn_id, (), outcome="rolled_back")
