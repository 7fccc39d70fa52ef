"""TemporalEngine: emelex sessions whose turns run as Temporal workflows, in Trio terms.

A session is a chain of turn workflows, one run per turn, all under the workflow id
``emelex-session-<session id>``: Temporal then runs at most one turn of a session at a
time, and any client that knows the session id can list, answer or cancel what its
current turn waits for. Each run's result is the committed batch; the session's
history is those batches in order (the next turn's input).

Temporal's client lives on an asyncio loop in a thread of its own; every method here is
Trio-native and maps Temporal's errors to emelex's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, final

import attrs
import trio
from temporalio.client import (
    Client,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowUpdateFailedError,
)
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import CancelledError, WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from emelex._facade import NoPublicConstructor
from emelex._ids import new_id
from emelex.agent import AgentTurn, Approve, Deny, TurnCancelled, TurnInProgress
from emelex.model import GenerationOptions, Message, Part, TextPart
from emelex.temporal._bridge import AsyncioThread
from emelex.temporal._errors import (
    AuthorityDrift,
    NoPendingApproval,
    RemoteTurnFailed,
    TemporalUnavailable,
    TurnNotRunning,
    TurnWorkflowFailed,
)
from emelex.temporal._spec import (
    AgentDescription,
    ApprovalAnswer,
    ApprovalMode,
    PendingApproval,
    Timeouts,
    TurnInput,
    TurnResult,
    decode_messages,
    decode_turn,
    encode_message,
    encode_messages,
    encode_options,
    from_data,
    to_data,
)
from emelex.temporal._worker import DEFAULT_NAMESPACE, DEFAULT_TASK_QUEUE, connect
from emelex.temporal._workflow import PENDING, RESPOND, WORKFLOW

#: How long a cancelled caller waits for the workflow's cancellation to be requested.
CANCEL_DEADLINE = 10.0


def workflow_id(session_id: str) -> str:
    return f"emelex-session-{session_id}"


def _user_message(content: str | Sequence[Part | str]) -> Message:
    parts = [content] if isinstance(content, str) else list(content)
    return Message("user", [TextPart(p) if isinstance(p, str) else p for p in parts])


@attrs.frozen
class SessionSettings:
    """How a session's turns run: approvals ``"deny"`` (default, as in process) or
    ``"ask"`` (wait for :meth:`TemporalSession.respond`, up to ``approval_timeout``
    seconds, forever when None)."""

    approvals: ApprovalMode = "deny"
    approval_timeout: float | None = None
    max_turn_tokens: int | None = None
    timeouts: Timeouts = attrs.field(factory=Timeouts)


class TemporalEngine(trio.abc.AsyncResource):
    """Starts sessions whose turns run on Temporal workers serving ``task_queue``.

    The one line an application changes: ``engine = Engine()`` becomes
    ``engine = TemporalEngine("temporal:7233")``; ``engine.create(agent).start()`` and
    ``session.send_and_wait(text)`` stay."""

    def __init__(
        self,
        address: str,
        *,
        namespace: str = DEFAULT_NAMESPACE,
        task_queue: str = DEFAULT_TASK_QUEUE,
        settings: SessionSettings = SessionSettings(),
    ) -> None:
        self.address = address
        self.namespace = namespace
        self.task_queue = task_queue
        self.settings = settings
        self._aio: AsyncioThread | None = None
        self._client: Client | None = None
        self._lock = trio.Lock()

    async def _connected(self) -> tuple[AsyncioThread, Client]:
        async with self._lock:
            if self._aio is None:
                self._aio = AsyncioThread("emelex-temporal-client")
            if self._client is None:
                self._client = await self._aio.run(lambda: connect(self.address, self.namespace))
            return self._aio, self._client

    async def _call(self, session_id: str, method: str, *args: Any) -> Any:
        """``handle.method(*args)`` on the session's current run, errors mapped."""
        aio, client = await self._connected()
        handle: WorkflowHandle[Any, Any] = client.get_workflow_handle(workflow_id(session_id))

        async def call() -> Any:
            return await getattr(handle, method)(*args)

        try:
            return await aio.run(call)
        except WorkflowUpdateFailedError as exc:
            raise NoPendingApproval(str(exc.cause or exc)) from exc
        except RPCError as exc:
            if exc.status in (RPCStatusCode.NOT_FOUND, RPCStatusCode.FAILED_PRECONDITION):
                raise TurnNotRunning(f"session {session_id} has no running turn") from exc
            raise TemporalUnavailable(f"Temporal refused {method}: {exc}") from exc

    # -- the Engine-shaped API ---------------------------------------------------------------
    def create(self, agent: object = None) -> _Starter:
        """A starter, as ``Engine.create(agent)``: the agent itself lives on the workers
        (they serve this engine's task queue), so only its sessions start here."""
        return _Starter(self)

    async def start(
        self,
        *,
        session_id: str | None = None,
        history: Sequence[Message] = (),
        settings: SessionSettings | None = None,
        agent: AgentDescription | None = None,
    ) -> TemporalSession:
        """A new session (nothing runs until its first turn). ``agent`` pins the
        authority from the first turn (``describe_session(session)`` of the agent you
        expect); without it the first turn pins whatever its worker describes."""
        await self._connected()
        session = TemporalSession._create(
            self, session_id or new_id(), tuple(history), settings or self.settings
        )
        session._agent = agent
        return session

    async def pending_approvals(self, session_id: str) -> tuple[PendingApproval, ...]:
        """What the session's running turn waits for (from any client)."""
        data = await self._call(session_id, "query", PENDING)
        return tuple(from_data(item, PendingApproval) for item in data)

    async def respond(self, session_id: str, call_id: str, decision: Approve | Deny) -> None:
        """Answer one pending approval; NoPendingApproval if it is not waiting."""
        answer = ApprovalAnswer(
            call_id, isinstance(decision, Approve), getattr(decision, "reason", "")
        )
        await self._call(session_id, "execute_update", RESPOND, to_data(answer))

    async def cancel(self, session_id: str) -> None:
        """The running turn's AgentCancellation: its workflow is cancelled."""
        await self._call(session_id, "cancel")

    async def aclose(self) -> None:
        aio, self._aio, self._client = self._aio, None, None
        if aio is not None:
            await trio.to_thread.run_sync(aio.close)


@attrs.define
class _Starter:
    engine: TemporalEngine
    _session_id: str | None = None
    _history: tuple[Message, ...] = ()
    _settings: SessionSettings | None = None
    _agent: AgentDescription | None = None

    def pin(self, agent: AgentDescription) -> _Starter:
        """Pin the authority from the first turn on (see :meth:`TemporalEngine.start`)."""
        self._agent = agent
        return self

    def session_id(self, session_id: str) -> _Starter:
        self._session_id = session_id
        return self

    def history(self, messages: Sequence[Message]) -> _Starter:
        self._history = tuple(messages)
        return self

    def settings(self, settings: SessionSettings) -> _Starter:
        self._settings = settings
        return self

    async def start(self) -> TemporalSession:
        return await self.engine.start(
            session_id=self._session_id,
            history=self._history,
            settings=self._settings,
            agent=self._agent,
        )


@final
class TemporalSession(metaclass=NoPublicConstructor):
    """One session; its turns are workflow runs. Make it with :meth:`TemporalEngine.start`."""

    def __init__(
        self,
        engine: TemporalEngine,
        session_id: str,
        history: tuple[Message, ...],
        settings: SessionSettings,
    ) -> None:
        self._engine = engine
        self.session_id = session_id
        self._committed = history
        self._settings = settings
        self._agent: AgentDescription | None = None

    @property
    def history(self) -> tuple[Message, ...]:
        """Every committed message: the agent's own prefix (its system prompt) once the
        first turn pinned it, then the committed turns."""
        prefix = () if self._agent is None else decode_messages(self._agent.history)
        return prefix + self._committed

    @property
    def authority(self) -> str | None:
        """The authority snapshot (JSON) the session pinned, None before its first turn."""
        return None if self._agent is None else self._agent.authority

    async def send_and_wait(
        self, content: str | Sequence[Part | str], *, options: GenerationOptions | None = None
    ) -> AgentTurn:
        """Run one turn on the workers and return the committed :class:`AgentTurn`.
        Raises TurnInProgress when one runs, TurnCancelled (``rolled_back`` and
        ``checkpoint`` set) when cancelled, RemoteTurnFailed when it failed there."""
        settings = self._settings
        spec = TurnInput(
            session_id=self.session_id,
            turn_id=new_id(),
            user_message=encode_message(_user_message(content)),
            history=encode_messages(self._committed),
            agent=self._agent,
            options=None if options is None else encode_options(options),
            approvals=settings.approvals,
            approval_timeout=settings.approval_timeout,
            max_turn_tokens=settings.max_turn_tokens,
            timeouts=settings.timeouts,
        )
        result = from_data(await self._run(spec), TurnResult)
        self._agent = result.agent
        if result.status == "committed":
            turn = decode_turn(result.turn)
            self._committed += turn.messages
            return turn
        kept = decode_messages(result.messages)
        self._committed += kept
        raise _failure(result, kept)

    async def _run(self, spec: TurnInput) -> Any:
        engine = self._engine
        aio, client = await engine._connected()

        async def start() -> WorkflowHandle[Any, Any]:
            handle: WorkflowHandle[Any, Any] = await client.start_workflow(
                WORKFLOW,
                to_data(spec),
                id=workflow_id(self.session_id),
                task_queue=engine.task_queue,
                id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
                id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
            )
            return handle

        try:
            handle = await aio.run(start)
        except WorkflowAlreadyStartedError as exc:
            raise TurnInProgress("a turn is already running in this session") from exc
        except RPCError as exc:
            raise TemporalUnavailable(f"cannot start the turn: {exc}") from exc

        async def result() -> Any:
            return await handle.result()

        try:
            return await aio.run(result)
        except trio.Cancelled:
            # The caller's scope was cancelled: the turn is cancelled too, as in process.
            with trio.move_on_after(CANCEL_DEADLINE) as scope:
                scope.shield = True
                await aio.run(handle.cancel)
            raise
        except WorkflowFailureError as exc:
            if isinstance(exc.cause, CancelledError):
                # Cancelled before the turn began (while its worker described the agent).
                cancelled = TurnCancelled("the turn was cancelled before it started")
                cancelled.rolled_back = True
                raise cancelled from exc
            raise TurnWorkflowFailed(f"the turn's workflow did not complete: {exc.cause}") from exc
        except RPCError as exc:
            raise TemporalUnavailable(f"lost the turn's result: {exc}") from exc

    async def pending_approvals(self) -> tuple[PendingApproval, ...]:
        return await self._engine.pending_approvals(self.session_id)

    async def respond(self, call_id: str, decision: Approve | Deny) -> None:
        await self._engine.respond(self.session_id, call_id, decision)

    async def cancel(self) -> None:
        await self._engine.cancel(self.session_id)


def _failure(result: TurnResult, kept: tuple[Message, ...]) -> Exception:
    """The error an in-process turn would raise where emelex has one for it."""
    if result.status == "cancelled":
        cancelled = TurnCancelled(result.message)
        cancelled.rolled_back, cancelled.checkpoint = result.rolled_back, kept
        return cancelled
    if result.error_type == "AuthorityDrift":
        return AuthorityDrift(result.message)
    return RemoteTurnFailed(result.error_type, result.message, result.rolled_back, kept)
