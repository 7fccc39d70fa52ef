"""Actor nodes, their lifecycle states and the immutable snapshot types."""

from __future__ import annotations

import enum
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import attrs

from emelex.runtime._mailbox import MailboxStatistics

if TYPE_CHECKING:
    import trio
    from opentelemetry.trace import Span

    from emelex.runtime._mailbox import Mailbox


class ActorKind(enum.StrEnum):
    """The built-in actor kinds. Any other non-empty string is a custom kind."""

    SESSION = "session"
    TURN = "turn"
    MODEL_JOB = "model_job"
    APPROVAL = "approval"
    TOOL = "tool"
    WORKER_THREAD = "worker_thread"
    WORKER_JOB = "worker_job"
    PROCESS = "process"
    SERVICE = "service"


class ActorState(enum.StrEnum):
    """Lifecycle of an actor. ``DONE`` and ``FAILED`` are terminal."""

    STARTING = "starting"
    RUNNING = "running"
    CANCELLING = "cancelling"
    FINISHING = "finishing"
    DONE = "done"
    FAILED = "failed"


def kind_name(kind: ActorKind | str) -> str:
    return kind.value if isinstance(kind, ActorKind) else kind


class Actor:
    """A registered node of the actor tree (mutable; owned by the runtime).

    User code sees actors through :class:`ActorInfo` snapshots and handles; the runtime
    mutates ``state`` as the actor moves through its lifecycle.
    """

    __slots__ = (
        "cancel_requested",
        "cancel_scope",
        "children",
        "id",
        "kind",
        "mailbox",
        "name",
        "parent",
        "span",
        "started_at",
        "state",
        "thread",
    )

    def __init__(
        self, actor_id: int, kind: str, name: str, parent: Actor | None, started_at: float
    ) -> None:
        self.id = actor_id
        self.kind = kind
        self.name = name
        self.parent = parent
        self.started_at = started_at
        self.state = ActorState.STARTING
        # Insertion-ordered set of live children (dict keys keep spawn order for snapshots).
        self.children: dict[Actor, None] = {}
        self.mailbox: Mailbox[Any] | None = None
        self.thread: threading.Thread | None = None
        self.cancel_scope: trio.CancelScope | None = None
        self.cancel_requested = False
        # The actor's OpenTelemetry span, only while a tracer provider is configured.
        self.span: Span | None = None

    def describe(self) -> str:
        text = f"{self.kind} {self.name!r} (#{self.id}, {self.state.value}"
        if self.thread is not None and self.thread.is_alive():
            text += ", thread alive"
        return text + ")"

    def walk(self) -> Iterator[Actor]:
        """This actor's live descendants, depth first (not including itself)."""
        for child in list(self.children):
            yield child
            yield from child.walk()

    def __repr__(self) -> str:
        return f"<Actor {self.describe()}>"


@attrs.frozen
class ActorInfo:
    """An immutable view of one actor at snapshot time."""

    id: int
    kind: str
    name: str
    state: ActorState
    parent: int | None
    started_at: float
    mailbox: MailboxStatistics | None
    cancel_requested: bool
    thread_alive: bool | None
    children: tuple[ActorInfo, ...] = ()

    def walk(self) -> Iterator[ActorInfo]:
        """This actor and all its descendants, depth first."""
        yield self
        for child in self.children:
            yield from child.walk()

    def to_json_dict(self, now: float) -> dict[str, Any]:
        data: dict[str, Any] = {
            "id": self.id,
            "kind": self.kind,
            "name": self.name,
            "state": self.state.value,
            "parent": self.parent,
            "age_seconds": round(max(0.0, now - self.started_at), 6),
            "cancel_requested": self.cancel_requested,
            "children": [child.to_json_dict(now) for child in self.children],
        }
        if self.thread_alive is not None:
            data["thread_alive"] = self.thread_alive
        if self.mailbox is not None:
            data["mailbox"] = attrs.asdict(self.mailbox)
        return data


@attrs.frozen
class ActorTree:
    """An immutable snapshot of a supervisor's whole actor tree."""

    supervisor: str
    taken_at: float
    roots: tuple[ActorInfo, ...]

    def walk(self) -> Iterator[ActorInfo]:
        for root in self.roots:
            yield from root.walk()

    def __len__(self) -> int:
        return sum(1 for _ in self.walk())

    def find(self, kind: ActorKind | str) -> tuple[ActorInfo, ...]:
        wanted = kind_name(kind)
        return tuple(info for info in self.walk() if info.kind == wanted)

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "supervisor": self.supervisor,
            "taken_at": self.taken_at,
            "actors": len(self),
            "roots": [root.to_json_dict(self.taken_at) for root in self.roots],
        }


def info_of(actor: Actor) -> ActorInfo:
    return ActorInfo(
        id=actor.id,
        kind=actor.kind,
        name=actor.name,
        state=actor.state,
        parent=actor.parent.id if actor.parent is not None else None,
        started_at=actor.started_at,
        mailbox=actor.mailbox.statistics() if actor.mailbox is not None else None,
        cancel_requested=actor.cancel_requested,
        thread_alive=actor.thread.is_alive() if actor.thread is not None else None,
        children=tuple(info_of(child) for child in list(actor.children)),
    )
