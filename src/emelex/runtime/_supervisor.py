"""The supervisor: actor registry, actor scopes, child actors and cancellation policies."""

from __future__ import annotations

import contextvars
import enum
import itertools
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from types import TracebackType
from typing import Any, Generic, TypeVar, cast

import trio

from emelex.runtime._actor import (
    Actor,
    ActorInfo,
    ActorKind,
    ActorState,
    ActorTree,
    info_of,
    kind_name,
)
from emelex.runtime._errors import ActorError, ActorStartupError, DetachedWorkError, MailboxClosed
from emelex.runtime._groups import open_unwrapping_nursery, single_leaf
from emelex.runtime._mailbox import Mailbox

T = TypeVar("T")

_current_supervisor: contextvars.ContextVar[Supervisor | None] = contextvars.ContextVar(
    "emelex_supervisor", default=None
)
_current_actor: contextvars.ContextVar[Actor | None] = contextvars.ContextVar(
    "emelex_actor", default=None
)


class _Current(enum.Enum):
    ACTOR = "current actor"


#: Sentinel for ``parent=``: use the actor of the calling task (or none at top level).
CURRENT = _Current.ACTOR


def current_actor() -> Actor | None:
    """The actor whose task is running (None outside any actor)."""
    return _current_actor.get()


class CancellationPolicy(enum.Enum):
    """How an owner treats a child call when the owner is cancelled.

    ``DROP``: the child is cancelled with the owner, immediately.
    ``AWAIT_COMPLETION``: the child runs shielded; it receives a cooperative signal
    (:attr:`ActorContext.cancel_requested`) and the owner waits for it to finish.
    ``FINISH_ONCE_STARTED``: before the child passes its start point
    (:meth:`ActorContext.start_point`) it is dropped; after it, the owner waits,
    shielded, for exactly one terminal result, then the cancellation proceeds.
    """

    DROP = "drop"
    AWAIT_COMPLETION = "await_completion"
    FINISH_ONCE_STARTED = "finish_once_started"


class Supervisor:
    """Registry of live actors; checks that no actor outlives its owner.

    Use :func:`open_supervisor` to get one with its own nursery (for long-lived
    top-level actors), or :meth:`current` for the innermost one (a process-wide,
    registry-only default exists so sessions work without ceremony).
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self._ids = itertools.count(1)
        self._roots: dict[Actor, None] = {}
        self._live = 0
        self._spawned = 0
        self._nursery: ActorNursery | None = None

    @staticmethod
    def current() -> Supervisor:
        """The supervisor opened by the nearest enclosing :func:`open_supervisor`."""
        return _current_supervisor.get() or _DEFAULT

    # -- registry -------------------------------------------------------------------------
    def register(
        self, kind: ActorKind | str, name: str, parent: Actor | _Current | None = CURRENT
    ) -> Actor:
        """Register an actor node. Low level: prefer :meth:`open_actor` and ActorNursery."""
        kind_text = kind_name(kind)
        if not kind_text:
            raise ValueError("actor kind must be a non-empty string")
        resolved = _current_actor.get() if parent is CURRENT else parent
        actor = Actor(next(self._ids), kind_text, name, resolved, trio.current_time())
        if resolved is None:
            self._roots[actor] = None
        else:
            resolved.children[actor] = None
        self._live += 1
        self._spawned += 1
        return actor

    def deregister(self, actor: Actor) -> None:
        """Remove ``actor`` from the registry (idempotent)."""
        parent = actor.parent
        removed = False
        if parent is not None and actor in parent.children:
            del parent.children[actor]
            removed = True
        if actor in self._roots:
            del self._roots[actor]
            removed = True
        if removed:
            self._live -= 1

    def check_subtree(self, actor: Actor) -> None:
        """Raise :class:`DetachedWorkError` if any descendant of ``actor`` is registered.

        Leaked actors are re-homed as roots so diagnostics keep showing them until they end.
        """
        leaked = list(actor.walk())
        if not leaked:
            return
        for child in list(actor.children):
            self._roots[child] = None
        actor.children.clear()
        raise DetachedWorkError(actor.describe(), [each.describe() for each in leaked])

    def close_actor(self, actor: Actor) -> None:
        """Check that ``actor``'s subtree is empty, then deregister it."""
        try:
            self.check_subtree(actor)
        finally:
            self.deregister(actor)

    # -- views ----------------------------------------------------------------------------
    def snapshot(self) -> ActorTree:
        """An immutable copy of the live actor tree. Synchronous; O(number of actors)."""
        return ActorTree(
            supervisor=self.name,
            taken_at=trio.current_time(),
            roots=tuple(info_of(root) for root in list(self._roots)),
        )

    def info(self, actor: Actor) -> ActorInfo:
        return info_of(actor)

    @property
    def live_actors(self) -> int:
        return self._live

    @property
    def spawned_actors(self) -> int:
        return self._spawned

    # -- scopes ---------------------------------------------------------------------------
    def open_actor(
        self, kind: ActorKind | str, name: str, *, parent: Actor | _Current | None = CURRENT
    ) -> AbstractAsyncContextManager[ActorNursery]:
        """Run the calling task as an actor that owns a nursery of child actors.

        On exit the nursery is joined and the subtree must be empty, otherwise
        :class:`DetachedWorkError` is raised. Errors of the body propagate unwrapped.
        Checkpoints on exit (joining the nursery); cancellation follows Trio rules.
        """
        return _ActorScope(self, kind, name, parent)

    @property
    def actors(self) -> ActorNursery:
        """Spawner for top-level actors; only inside :func:`open_supervisor`."""
        if self._nursery is None:
            raise ActorError(f"supervisor {self.name!r} has no nursery: use open_supervisor()")
        return self._nursery

    def __repr__(self) -> str:
        return f"<Supervisor {self.name!r} live={self._live}>"


class _ActorScope:
    """The async context manager behind :meth:`Supervisor.open_actor` (a class rather
    than a generator: it sits on every turn's path)."""

    __slots__ = ("_actor", "_kind", "_name", "_nursery_cm", "_parent", "_supervisor", "_token")

    def __init__(
        self,
        supervisor: Supervisor,
        kind: ActorKind | str,
        name: str,
        parent: Actor | _Current | None,
    ) -> None:
        self._supervisor = supervisor
        self._kind = kind
        self._name = name
        self._parent = parent

    async def __aenter__(self) -> ActorNursery:
        actor = self._supervisor.register(self._kind, self._name, self._parent)
        self._actor = actor
        self._token = _current_actor.set(actor)
        actor.state = ActorState.RUNNING
        self._nursery_cm = trio.open_nursery()
        try:
            nursery = await self._nursery_cm.__aenter__()
        except BaseException:
            _current_actor.reset(self._token)
            self._supervisor.close_actor(actor)
            raise
        actor.cancel_scope = nursery.cancel_scope
        return ActorNursery(self._supervisor, actor, nursery)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        actor = self._actor
        try:
            try:
                suppressed = await self._nursery_cm.__aexit__(exc_type, exc, tb)
            except BaseExceptionGroup as group:
                leaf = single_leaf(group)
                if leaf is None:
                    raise
                context, suppress = leaf.__context__, leaf.__suppress_context__
                try:
                    raise leaf
                finally:
                    leaf.__context__, leaf.__suppress_context__ = context, suppress
            actor.state = ActorState.DONE if suppressed or exc is None else ActorState.FAILED
            if isinstance(exc, trio.Cancelled):
                actor.state = ActorState.DONE
            return bool(suppressed)
        except trio.Cancelled:
            actor.state = ActorState.DONE
            raise
        except BaseException:
            actor.state = ActorState.FAILED
            raise
        finally:
            _current_actor.reset(self._token)
            self._supervisor.close_actor(actor)


_DEFAULT = Supervisor("emelex")


@asynccontextmanager
async def open_supervisor(name: str) -> AsyncIterator[Supervisor]:
    """Open a supervisor that owns a nursery and a registry.

    Inside the block, :meth:`Supervisor.current` returns it. On exit the nursery is
    joined and every actor must have ended, otherwise :class:`DetachedWorkError`.
    """
    supervisor = Supervisor(name)
    token = _current_supervisor.set(supervisor)
    actor_token = _current_actor.set(None)
    try:
        async with open_unwrapping_nursery() as nursery:
            supervisor._nursery = ActorNursery(supervisor, None, nursery)
            endpoint = await _start_env_diagnostics(supervisor)
            try:
                yield supervisor
            finally:
                if endpoint is not None:
                    endpoint.cancel()
    finally:
        supervisor._nursery = None
        _current_actor.reset(actor_token)
        _current_supervisor.reset(token)
        leaked = list(supervisor._roots)
        if leaked:
            raise DetachedWorkError(
                f"supervisor {name!r}",
                [each.describe() for root in leaked for each in (root, *root.walk())],
            )


#: Set to a socket path to make the first supervisor of a process serve diagnostics there
#: (``emelex supervise -- PROGRAM`` sets it for the program it starts).
DIAGNOSTICS_ENV = "EMELEX_DIAGNOSTICS_SOCKET"
_env_diagnostics_claimed = False


async def _start_env_diagnostics(supervisor: Supervisor) -> ActorHandle | None:
    global _env_diagnostics_claimed
    path = os.environ.get(DIAGNOSTICS_ENV)
    if not path or _env_diagnostics_claimed:
        return None
    _env_diagnostics_claimed = True
    from emelex.runtime._diagnostics import serve_diagnostics

    async def serve(ctx: ActorContext) -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(serve_diagnostics, supervisor, path)
            ctx.started()

    return await supervisor.actors.start(serve, kind=ActorKind.SERVICE, name="diagnostics")


class ActorContext:
    """What an actor's function receives: its node, mailbox and cooperative signals."""

    __slots__ = (
        "_cancel_callbacks",
        "_cancel_event",
        "_start_scope",
        "_task_status",
        "actor",
        "supervisor",
    )

    def __init__(self, supervisor: Supervisor, actor: Actor) -> None:
        self.supervisor = supervisor
        self.actor = actor
        self._task_status: trio.TaskStatus[Any] | None = None
        self._cancel_event: trio.Event | None = None
        self._start_scope: trio.CancelScope | None = None
        self._cancel_callbacks: list[Callable[[], object]] | None = None

    def started(self, value: Any = None) -> None:
        """Finish the startup handshake of :meth:`ActorNursery.start` (idempotent no-op
        for actors started without a handshake)."""
        self.actor.state = ActorState.RUNNING
        if self._task_status is not None:
            status, self._task_status = self._task_status, None
            status.started(value)

    @property
    def mailbox(self) -> Mailbox[Any]:
        if self.actor.mailbox is None:
            raise ActorError(f"{self.actor.describe()} has no mailbox")
        return self.actor.mailbox

    @property
    def cancel_requested(self) -> bool:
        """True once the owner asked this actor to stop cooperatively."""
        return self.actor.cancel_requested

    async def wait_cancel_requested(self) -> None:
        """Block until the owner asks this actor to stop. A checkpoint."""
        if self.actor.cancel_requested:
            await trio.lowlevel.checkpoint()
            return
        if self._cancel_event is None:
            self._cancel_event = trio.Event()
        await self._cancel_event.wait()

    def request_cancel(self) -> None:
        """Deliver the cooperative stop signal (idempotent)."""
        if self.actor.cancel_requested and self._cancel_callbacks is None:
            return
        self.actor.cancel_requested = True
        if self._cancel_event is not None:
            self._cancel_event.set()
        callbacks, self._cancel_callbacks = self._cancel_callbacks, None
        for callback in callbacks or ():
            callback()

    def on_cancel_requested(self, callback: Callable[[], object]) -> None:
        """Call ``callback`` when the cooperative stop signal arrives (now, if it has)."""
        if self.actor.cancel_requested:
            callback()
            return
        if self._cancel_callbacks is None:
            self._cancel_callbacks = []
        self._cancel_callbacks.append(callback)

    async def start_point(self) -> None:
        """Pass the start point of a FINISH_ONCE_STARTED call.

        Raises ``trio.Cancelled`` if the call was already cancelled (it is then dropped);
        otherwise, from here on the call is shielded and its owner waits for its result.
        Harmless under the other policies.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        if self._start_scope is not None:
            self._start_scope.shield = True
            self._start_scope = None

    @property
    def past_start_point(self) -> bool:
        return self._start_scope is None

    def open_children(self) -> AbstractAsyncContextManager[ActorNursery]:
        """Open a nursery for this actor's own children (checked on exit like open_actor)."""
        return _open_children(self.supervisor, self.actor)


@asynccontextmanager
async def _open_children(supervisor: Supervisor, actor: Actor) -> AsyncIterator[ActorNursery]:
    try:
        async with open_unwrapping_nursery() as nursery:
            yield ActorNursery(supervisor, actor, nursery)
    finally:
        supervisor.check_subtree(actor)


class ActorHandle:
    """A started child actor: its node, startup value and mailbox."""

    __slots__ = ("_supervisor", "actor", "value")

    def __init__(self, supervisor: Supervisor, actor: Actor, value: Any) -> None:
        self._supervisor = supervisor
        self.actor = actor
        self.value = value

    def info(self) -> ActorInfo:
        return info_of(self.actor)

    @property
    def state(self) -> ActorState:
        return self.actor.state

    async def send(self, item: Any) -> None:
        """Put ``item`` into the actor's mailbox (waits while full). A checkpoint."""
        mailbox = self.actor.mailbox
        if mailbox is None:
            raise MailboxClosed(f"{self.actor.describe()} has no mailbox")
        await mailbox.put(item)

    def send_nowait(self, item: Any) -> None:
        mailbox = self.actor.mailbox
        if mailbox is None:
            raise MailboxClosed(f"{self.actor.describe()} has no mailbox")
        mailbox.put_nowait(item)

    def cancel(self) -> None:
        """Cancel the actor's task (it ends at its next checkpoint)."""
        self.actor.cancel_requested = True
        if self.actor.state in (ActorState.STARTING, ActorState.RUNNING):
            self.actor.state = ActorState.CANCELLING
        if self.actor.cancel_scope is not None:
            self.actor.cancel_scope.cancel()


class ActorDropped(ActorError):
    """A policy-governed call was dropped (cancelled before it produced a result)."""


class ActorCall(Generic[T]):
    """A child actor computing one result under a :class:`CancellationPolicy`.

    ``await call.result()`` waits for it. If the waiting owner is cancelled, the policy
    decides: drop the child, or signal it and wait (shielded) for its terminal result,
    which stays readable through :attr:`finished`, :attr:`value` and :attr:`error` while
    the ``trio.Cancelled`` propagates.
    """

    __slots__ = (
        "_abort_error",
        "_ctx",
        "_done",
        "_error",
        "_scope",
        "_value",
        "_waiter",
        "actor",
        "dropped",
        "finished",
        "policy",
    )

    def __init__(self, supervisor: Supervisor, actor: Actor, policy: CancellationPolicy) -> None:
        self.actor = actor
        self.policy = policy
        self._ctx = ActorContext(supervisor, actor)
        self._scope = trio.CancelScope(shield=policy is CancellationPolicy.AWAIT_COMPLETION)
        if policy is CancellationPolicy.FINISH_ONCE_STARTED:
            self._ctx._start_scope = self._scope
        actor.cancel_scope = self._scope
        self._done = trio.Event()
        self.finished = False
        self.dropped = False
        self._value: T | None = None
        self._error: Exception | None = None
        self._waiter: trio.lowlevel.Task | None = None
        self._abort_error: BaseException | None = None

    @property
    def value(self) -> T | None:
        return self._value

    @property
    def error(self) -> Exception | None:
        return self._error

    @property
    def past_start_point(self) -> bool:
        return self._ctx.past_start_point

    async def _body(self, fn: Callable[..., Awaitable[T]], args: tuple[Any, ...]) -> None:
        actor = self.actor
        _current_actor.set(actor)
        actor.state = ActorState.RUNNING
        try:
            with self._scope:
                try:
                    self._value = await fn(self._ctx, *args)
                except Exception as exc:
                    self._error = exc
                    actor.state = ActorState.FAILED
                else:
                    actor.state = ActorState.DONE
                self.finished = True
        finally:
            if not self.finished:
                self.dropped = True
                actor.state = ActorState.DONE
            self._done.set()
            waiter, self._waiter = self._waiter, None
            if waiter is not None:
                trio.lowlevel.reschedule(waiter)
            self._ctx.supervisor.close_actor(actor)

    def _drops_on_cancel(self) -> bool:
        policy = self.policy
        return policy is CancellationPolicy.DROP or (
            policy is CancellationPolicy.FINISH_ONCE_STARTED and not self._ctx.past_start_point
        )

    def _owner_cancelled(self) -> None:
        if self._done.is_set():
            return
        if self._drops_on_cancel():
            self.actor.state = ActorState.CANCELLING
            self.actor.cancel_requested = True
            self._scope.cancel()
        else:
            self.actor.state = ActorState.FINISHING
            self._ctx.request_cancel()

    def cancel(self) -> None:
        """Apply the policy now, as if the owner had been cancelled."""
        self._owner_cancelled()

    async def wait_finished(self) -> None:
        """Wait until the call has ended (result, error or dropped). Never raises the
        call's error; a checkpoint."""
        await self._done.wait()

    async def _wait_done(self) -> None:
        """Wait until the child has ended; a checkpoint.

        Not ``Event.wait``: Trio calls this wait's abort function synchronously inside
        the ``CancelScope.cancel()`` that cancels the owner. A child the policy keeps
        running (AWAIT_COMPLETION, or FINISH_ONCE_STARTED past its start point) is
        signalled right there, so it hears of the cancellation in the same scheduler
        pass instead of after its owner task is next scheduled.
        """
        if self._done.is_set():
            await trio.lowlevel.checkpoint()
            return
        if self._waiter is not None:
            raise RuntimeError(f"{self.actor.describe()} already has a task awaiting result()")
        self._waiter = trio.lowlevel.current_task()

        def abort(_raise_cancel: Any) -> trio.lowlevel.Abort:
            self._waiter = None
            if self._drops_on_cancel():
                return trio.lowlevel.Abort.SUCCEEDED  # result() drops it, as always
            try:
                self._owner_cancelled()
            except BaseException as exc:
                # An abort function must not raise: result() raises it instead.
                self._abort_error = exc
            return trio.lowlevel.Abort.SUCCEEDED

        await trio.lowlevel.wait_task_rescheduled(abort)

    async def result(self) -> T:
        """Wait for the result and return it (or raise the call's error).

        If cancelled while waiting, applies the policy, waits shielded until the child
        has ended, then re-raises ``trio.Cancelled``. Raises :class:`ActorDropped` if the
        call was dropped by :meth:`cancel`.
        """
        try:
            await self._wait_done()
        except trio.Cancelled as cancelled:
            error, self._abort_error = self._abort_error, None
            if error is not None:
                raise error from cancelled
            self._owner_cancelled()  # idempotent; applies it when the wait was a checkpoint
            with trio.CancelScope(shield=True):
                await self._done.wait()
            raise
        if self._error is not None:
            raise self._error
        if self.dropped:
            raise ActorDropped(f"{self.actor.describe()} was dropped")
        return cast("T", self._value)


ActorFunction = Callable[..., Awaitable[Any]]


class ActorNursery:
    """Spawns child actors of one owner actor into one trio nursery."""

    __slots__ = ("_nursery", "actor", "supervisor")

    def __init__(self, supervisor: Supervisor, actor: Actor | None, nursery: trio.Nursery) -> None:
        self.supervisor = supervisor
        self.actor = actor
        self._nursery = nursery

    @property
    def cancel_scope(self) -> trio.CancelScope:
        return self._nursery.cancel_scope

    def _spawn_node(
        self, kind: ActorKind | str, name: str, mailbox: int | None
    ) -> tuple[Actor, ActorContext]:
        actor = self.supervisor.register(kind, name, self.actor)
        if mailbox is not None:
            actor.mailbox = Mailbox(mailbox)
        return actor, ActorContext(self.supervisor, actor)

    async def start(
        self,
        fn: ActorFunction,
        *args: Any,
        kind: ActorKind | str,
        name: str,
        mailbox: int | None = None,
    ) -> ActorHandle:
        """Start ``fn(ctx, *args)`` as a child actor and wait for ``ctx.started(value)``.

        Errors raised before ``started`` surface here (unwrapped); an actor that returns
        without calling it raises :class:`ActorStartupError`. ``mailbox`` gives the actor
        a bounded mailbox of that capacity.
        """
        actor, ctx = self._spawn_node(kind, name, mailbox)
        try:
            value = await self._nursery.start(self._run, fn, args, actor, ctx, True)
        except RuntimeError as exc:
            if "without calling task_status.started" in str(exc):
                raise ActorStartupError(f"{actor.describe()} ended before it started") from exc
            raise
        return ActorHandle(self.supervisor, actor, value)

    def start_soon(
        self,
        fn: ActorFunction,
        *args: Any,
        kind: ActorKind | str,
        name: str,
        mailbox: int | None = None,
    ) -> ActorHandle:
        """Spawn ``fn(ctx, *args)`` as a child actor without a startup handshake."""
        actor, ctx = self._spawn_node(kind, name, mailbox)
        self._nursery.start_soon(self._run, fn, args, actor, ctx, False)
        return ActorHandle(self.supervisor, actor, None)

    async def _run(
        self,
        fn: ActorFunction,
        args: tuple[Any, ...],
        actor: Actor,
        ctx: ActorContext,
        handshake: bool,
        task_status: trio.TaskStatus[Any] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        _current_actor.set(actor)
        if handshake:
            ctx._task_status = task_status
        else:
            actor.state = ActorState.RUNNING
        try:
            with trio.CancelScope() as scope:
                actor.cancel_scope = scope
                await fn(ctx, *args)
            actor.state = ActorState.DONE
        except trio.Cancelled:
            actor.state = ActorState.DONE
            raise
        except BaseException:
            actor.state = ActorState.FAILED
            raise
        finally:
            if actor.mailbox is not None:
                actor.mailbox.close()
            self.supervisor.close_actor(actor)

    def call(
        self,
        fn: Callable[..., Awaitable[T]],
        *args: Any,
        kind: ActorKind | str,
        name: str,
        policy: CancellationPolicy = CancellationPolicy.DROP,
    ) -> ActorCall[T]:
        """Spawn ``fn(ctx, *args)`` as a child actor computing one result under ``policy``.

        Does not checkpoint. Await :meth:`ActorCall.result` for the outcome.
        """
        actor = self.supervisor.register(kind, name, self.actor)
        call: ActorCall[T] = ActorCall(self.supervisor, actor, policy)
        self._nursery.start_soon(call._body, fn, args)
        return call

    async def run(
        self,
        fn: Callable[..., Awaitable[T]],
        *args: Any,
        kind: ActorKind | str,
        name: str,
        policy: CancellationPolicy = CancellationPolicy.DROP,
    ) -> T:
        """Run ``fn(ctx, *args)`` as a child actor under ``policy`` and return its value.

        Under ``DROP`` the actor runs in the calling task inside its own cancel scope
        (same semantics as a separate task, without a spawn); the other policies need a
        task of their own so the owner can observe cancellation while the child is
        shielded. Errors propagate; a checkpoint.
        """
        if policy is not CancellationPolicy.DROP:
            return await self.call(fn, *args, kind=kind, name=name, policy=policy).result()
        supervisor = self.supervisor
        actor = supervisor.register(kind, name, self.actor)
        token = _current_actor.set(actor)
        actor.state = ActorState.RUNNING
        # No cancel scope of its own: nobody holds a handle to cancel this actor alone,
        # and it is cancelled with its owner's scope, which is exactly DROP.
        try:
            value = await fn(ActorContext(supervisor, actor), *args)
        except trio.Cancelled:
            actor.state = ActorState.DONE
            raise
        except BaseException:
            actor.state = ActorState.FAILED
            raise
        else:
            actor.state = ActorState.DONE
            return value
        finally:
            _current_actor.reset(token)
            supervisor.close_actor(actor)
