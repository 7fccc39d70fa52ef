"""ActorCall: a child actor computing one result under a cancellation policy."""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar, cast

import trio

from emelex.runtime import _tracing
from emelex.runtime._actor import Actor, ActorState
from emelex.runtime._context import ActorContext, current_actor_var
from emelex.runtime._errors import ActorDropped

if TYPE_CHECKING:
    from emelex.runtime._supervisor import Supervisor

T = TypeVar("T")


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
        "_raise_cancel",
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
        if actor.span is not None:
            _tracing.set_policy(actor, policy.value)
        self._done = trio.Event()
        self.finished = False
        self.dropped = False
        self._value: T | None = None
        self._error: Exception | None = None
        self._waiter: trio.lowlevel.Task | None = None
        self._abort_error: BaseException | None = None
        # The owner's pending cancellation, raised once a child kept running has ended.
        self._raise_cancel: Callable[[], object] | None = None

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
        current_actor_var.set(actor)
        token = _tracing.enter(actor) if actor.span is not None else None
        actor.state = ActorState.RUNNING
        try:
            with self._scope:
                try:
                    self._value = await fn(self._ctx, *args)
                except Exception as exc:
                    self._error = exc
                    actor.state = ActorState.FAILED
                    _tracing.note_failed(actor, exc)
                else:
                    actor.state = ActorState.DONE
                self.finished = True
        finally:
            if not self.finished:
                self.dropped = True
                actor.state = ActorState.DONE
                _tracing.note_dropped(actor)
            self._done.set()
            waiter, self._waiter = self._waiter, None
            if waiter is not None:
                trio.lowlevel.reschedule(waiter)
            if token is not None:
                _tracing.leave(token)
            self._ctx.supervisor.close_actor(actor)

    def _drops_on_cancel(self) -> bool:
        policy = self.policy
        return policy is CancellationPolicy.DROP or (
            policy is CancellationPolicy.FINISH_ONCE_STARTED and not self._ctx.past_start_point
        )

    def _owner_cancelled(self) -> None:
        if self._done.is_set():
            return
        _tracing.note_cancelled(self.actor)
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

        def abort(raise_cancel: Callable[[], object]) -> trio.lowlevel.Abort:
            if self._drops_on_cancel():
                self._waiter = None
                return trio.lowlevel.Abort.SUCCEEDED  # result() drops it, as always
            try:
                self._owner_cancelled()
            except BaseException as exc:
                # An abort function must not raise: result() raises it instead.
                self._waiter = None
                self._abort_error = exc
                return trio.lowlevel.Abort.SUCCEEDED
            # The owner waits for the child anyway: it stays blocked here until the
            # child's end reschedules it, then result() raises the cancellation (the
            # second way wait_task_rescheduled documents). Not woken now, it costs
            # the scheduler no step before the child has ended.
            self._raise_cancel = raise_cancel
            return trio.lowlevel.Abort.FAILED

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
            # A child that already ended (it ran earlier in the same scheduler pass)
            # needs no wait, so no extra pass for this owner.
            if not self._done.is_set():
                with trio.CancelScope(shield=True):
                    await self._done.wait()
            raise
        raise_cancel, self._raise_cancel = self._raise_cancel, None
        if raise_cancel is not None:
            raise_cancel()  # the child has ended: now the owner's cancellation proceeds
        if self._error is not None:
            raise self._error
        if self.dropped:
            raise ActorDropped(f"{self.actor.describe()} was dropped")
        return cast("T", self._value)
