"""What an actor's function receives, and which actor and supervisor a task runs under."""

from __future__ import annotations

import contextvars
import enum
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any

import trio

from emelex.runtime._actor import Actor, ActorState
from emelex.runtime._errors import ActorError
from emelex.runtime._mailbox import Mailbox

if TYPE_CHECKING:
    from emelex.runtime._nursery import ActorNursery
    from emelex.runtime._supervisor import Supervisor

current_supervisor_var: contextvars.ContextVar[Supervisor | None] = contextvars.ContextVar(
    "emelex_supervisor", default=None
)
current_actor_var: contextvars.ContextVar[Actor | None] = contextvars.ContextVar(
    "emelex_actor", default=None
)


class _Current(enum.Enum):
    ACTOR = "current actor"


#: Sentinel for ``parent=``: use the actor of the calling task (or none at top level).
CURRENT = _Current.ACTOR


def current_actor() -> Actor | None:
    """The actor whose task is running (None outside any actor)."""
    return current_actor_var.get()


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
        return self.supervisor.open_children(self.actor)
