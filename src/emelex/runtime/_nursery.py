"""ActorNursery: spawns an owner's child actors; ActorHandle: a started child."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

import trio

from emelex.runtime import _tracing
from emelex.runtime._actor import Actor, ActorInfo, ActorKind, ActorState, info_of
from emelex.runtime._call import ActorCall, CancellationPolicy
from emelex.runtime._context import ActorContext, current_actor_var
from emelex.runtime._errors import ActorStartupError, MailboxClosed
from emelex.runtime._mailbox import Mailbox

if TYPE_CHECKING:
    from emelex.runtime._supervisor import Supervisor

T = TypeVar("T")

ActorFunction = Callable[..., Awaitable[Any]]


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
        current_actor_var.set(actor)
        token = _tracing.enter(actor) if actor.span is not None else None
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
            _tracing.note_cancelled(actor)
            raise
        except BaseException as exc:
            actor.state = ActorState.FAILED
            _tracing.note_failed(actor, exc)
            raise
        finally:
            if actor.mailbox is not None:
                actor.mailbox.close()
            if token is not None:
                _tracing.leave(token)
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
        token = current_actor_var.set(actor)
        span_token = None
        if actor.span is not None:
            _tracing.set_policy(actor, policy.value)
            span_token = _tracing.enter(actor)
        actor.state = ActorState.RUNNING
        # No cancel scope of its own: nobody holds a handle to cancel this actor alone,
        # and it is cancelled with its owner's scope, which is exactly DROP.
        try:
            value = await fn(ActorContext(supervisor, actor), *args)
        except trio.Cancelled:
            actor.state = ActorState.DONE
            _tracing.note_cancelled(actor)
            raise
        except BaseException as exc:
            actor.state = ActorState.FAILED
            _tracing.note_failed(actor, exc)
            raise
        else:
            actor.state = ActorState.DONE
            return value
        finally:
            if span_token is not None:
                _tracing.leave(span_token)
            current_actor_var.reset(token)
            supervisor.close_actor(actor)
