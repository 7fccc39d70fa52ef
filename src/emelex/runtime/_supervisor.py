"""The supervisor: the actor registry, actor scopes and the checks that no actor
outlives its owner."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from types import TracebackType

import trio
from opentelemetry.trace import Tracer, TracerProvider

from emelex.runtime import _tracing
from emelex.runtime._actor import (
    Actor,
    ActorInfo,
    ActorKind,
    ActorState,
    ActorTree,
    info_of,
    kind_name,
)
from emelex.runtime._context import CURRENT, _Current, current_actor_var, current_supervisor_var
from emelex.runtime._diagnostics import start_env_diagnostics
from emelex.runtime._errors import ActorError, DetachedWorkError
from emelex.runtime._groups import open_unwrapping_nursery, single_leaf
from emelex.runtime._nursery import ActorNursery


class Supervisor:
    """Registry of live actors; checks that no actor outlives its owner.

    Use :func:`open_supervisor` to get one with its own nursery (for long-lived
    top-level actors), or :meth:`current` for the innermost one (a process-wide,
    registry-only default exists so sessions work without ceremony).

    ``tracer_provider`` records every actor as an OpenTelemetry span; without one the
    globally configured provider is used, and with none configured nothing is traced.
    """

    def __init__(self, name: str, *, tracer_provider: TracerProvider | None = None) -> None:
        self.name = name
        self._ids = itertools.count(1)
        self._roots: dict[Actor, None] = {}
        self._live = 0
        self._spawned = 0
        self._nursery: ActorNursery | None = None
        self._tracer: Tracer | None = (
            _tracing.tracer_of(tracer_provider) if tracer_provider is not None else None
        )

    @staticmethod
    def current() -> Supervisor:
        """The supervisor opened by the nearest enclosing :func:`open_supervisor`."""
        return current_supervisor_var.get() or _DEFAULT

    # -- registry -------------------------------------------------------------------------
    def register(
        self, kind: ActorKind | str, name: str, parent: Actor | _Current | None = CURRENT
    ) -> Actor:
        """Register an actor node. Low level: prefer :meth:`open_actor` and ActorNursery."""
        kind_text = kind_name(kind)
        if not kind_text:
            raise ValueError("actor kind must be a non-empty string")
        resolved = current_actor_var.get() if parent is CURRENT else parent
        actor = Actor(next(self._ids), kind_text, name, resolved, trio.current_time())
        if resolved is None:
            self._roots[actor] = None
        else:
            resolved.children[actor] = None
        self._live += 1
        self._spawned += 1
        # Inline test first: an untraced parent (the common case) costs no call.
        if resolved is None or resolved.span is not None:
            tracer = _tracing.tracer_for(actor, self._tracer)
            if tracer is not None:
                _tracing.start_span(tracer, actor, self.name)
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
        if actor.span is not None:
            _tracing.end_span(actor)

    def check_subtree(self, actor: Actor) -> None:
        """Raise :class:`DetachedWorkError` if any descendant of ``actor`` is registered.

        Leaked actors are re-homed as roots so diagnostics keep showing them until they end.
        """
        if not actor.children:  # the common case: no walk, no list
            return
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

    def open_children(self, actor: Actor) -> AbstractAsyncContextManager[ActorNursery]:
        """A nursery for ``actor``'s children, checked on exit like :meth:`open_actor`
        (what :meth:`ActorContext.open_children` opens)."""
        return _open_children(self, actor)

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

    __slots__ = (
        "_actor",
        "_kind",
        "_name",
        "_nursery_cm",
        "_parent",
        "_span_token",
        "_supervisor",
        "_token",
    )

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
        self._token = current_actor_var.set(actor)
        self._span_token = _tracing.enter(actor) if actor.span is not None else None
        actor.state = ActorState.RUNNING
        self._nursery_cm = trio.open_nursery()
        try:
            nursery = await self._nursery_cm.__aenter__()
        except BaseException:
            _tracing.leave(self._span_token)
            current_actor_var.reset(self._token)
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
                _tracing.note_cancelled(actor)
            elif exc is not None and not suppressed:
                _tracing.note_failed(actor, exc)
            return bool(suppressed)
        except trio.Cancelled:
            actor.state = ActorState.DONE
            _tracing.note_cancelled(actor)
            raise
        except BaseException as error:
            actor.state = ActorState.FAILED
            _tracing.note_failed(actor, error)
            raise
        finally:
            _tracing.leave(self._span_token)
            current_actor_var.reset(self._token)
            self._supervisor.close_actor(actor)


@asynccontextmanager
async def _open_children(supervisor: Supervisor, actor: Actor) -> AsyncIterator[ActorNursery]:
    try:
        async with open_unwrapping_nursery() as nursery:
            yield ActorNursery(supervisor, actor, nursery)
    finally:
        supervisor.check_subtree(actor)


_DEFAULT = Supervisor("emelex")


@asynccontextmanager
async def open_supervisor(
    name: str, *, tracer_provider: TracerProvider | None = None
) -> AsyncIterator[Supervisor]:
    """Open a supervisor that owns a nursery and a registry.

    Inside the block, :meth:`Supervisor.current` returns it. On exit the nursery is
    joined and every actor must have ended, otherwise :class:`DetachedWorkError`.
    ``tracer_provider``: see :class:`Supervisor`.
    """
    supervisor = Supervisor(name, tracer_provider=tracer_provider)
    token = current_supervisor_var.set(supervisor)
    actor_token = current_actor_var.set(None)
    try:
        async with open_unwrapping_nursery() as nursery:
            supervisor._nursery = ActorNursery(supervisor, None, nursery)
            endpoint = await start_env_diagnostics(supervisor)
            try:
                yield supervisor
            finally:
                if endpoint is not None:
                    endpoint.cancel()
    finally:
        supervisor._nursery = None
        current_actor_var.reset(actor_token)
        current_supervisor_var.reset(token)
        leaked = list(supervisor._roots)
        if leaked:
            raise DetachedWorkError(
                f"supervisor {name!r}",
                [each.describe() for root in leaked for each in (root, *root.walk())],
            )
