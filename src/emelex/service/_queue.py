"""A session's work queue as a pure state machine (no I/O, no Trio).

Invocations are admitted in order, run one at a time, and leave the queue when they
finish or are stopped while still queued. Every change bumps ``revision``, which watchers
see with each snapshot. The Host drives it and makes each change durable first.
"""

from __future__ import annotations

from typing import Literal

import attrs

from emelex.service._errors import QueueFull, UnknownInvocation

State = Literal["queued", "running"]


@attrs.frozen
class Work:
    """One admitted invocation: what to run, and the operation that admitted it."""

    invocation_id: str
    operation: str
    text: str
    admitted_sequence: int
    kind: Literal["send", "execute", "workerTask"] = "send"


@attrs.frozen
class Entry:
    work: Work
    state: State


class WorkQueue:
    """Admitted, unfinished invocations of one session, oldest first."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError("a work queue holds at least one invocation")
        self.capacity = capacity
        self.revision = 0
        self._entries: dict[str, Entry] = {}

    @property
    def entries(self) -> tuple[Entry, ...]:
        return tuple(self._entries.values())

    @property
    def running(self) -> Entry | None:
        for entry in self._entries.values():
            if entry.state == "running":
                return entry
        return None

    def __contains__(self, invocation_id: object) -> bool:
        return invocation_id in self._entries

    def check_room(self) -> None:
        """Raise :class:`QueueFull` when one more admission would not fit."""
        if len(self._entries) >= self.capacity:
            raise QueueFull(
                f"the session's queue already holds {len(self._entries)} unfinished"
                f" invocations (the most it takes is {self.capacity})"
            )

    def admit(self, work: Work) -> None:
        self.check_room()
        self.record(work)

    def record(self, work: Work) -> None:
        """Add logged work whatever the capacity: the capacity is checked before an
        admission is written, and a log written by other Hosts is the truth."""
        if work.invocation_id in self._entries:
            raise ValueError(f"invocation {work.invocation_id} is already queued")
        self._entries[work.invocation_id] = Entry(work, "queued")
        self.revision += 1

    def next_to_run(self) -> Work | None:
        """The oldest queued work when nothing runs, else None."""
        if self.running is not None:
            return None
        for entry in self._entries.values():
            return entry.work
        return None

    def start(self, invocation_id: str) -> Work:
        entry = self._get(invocation_id)
        if entry.state != "queued" or self.running is not None:
            raise ValueError(f"invocation {invocation_id} cannot start now")
        self._entries[invocation_id] = Entry(entry.work, "running")
        self.revision += 1
        return entry.work

    def remove(self, invocation_id: str) -> Entry:
        """Take an invocation out (it finished, or was stopped while queued)."""
        entry = self._get(invocation_id)
        del self._entries[invocation_id]
        self.revision += 1
        return entry

    def _get(self, invocation_id: str) -> Entry:
        try:
            return self._entries[invocation_id]
        except KeyError:
            raise UnknownInvocation(f"invocation {invocation_id} is not queued") from None
