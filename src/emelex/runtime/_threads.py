"""Threads as actors: one-shot blocking calls and dedicated long-lived workers.

Neither abandons a thread. A cancelled caller waits (shielded) until the thread has
finished with its work, then the cancellation proceeds; threads are joined and their
actors deregistered before the awaiting call returns.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections import deque
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, Generic, TypeVar, cast, overload

import trio

from emelex.runtime._actor import Actor, ActorKind, ActorState
from emelex.runtime._errors import WorkerBusy, WorkerClosed, WorkerJobAborted
from emelex.runtime._supervisor import Supervisor

T = TypeVar("T")
R = TypeVar("R")


def _name_of(fn: Callable[..., Any]) -> str:
    return str(getattr(fn, "__name__", "job"))


def _notify(token: trio.lowlevel.TrioToken, callback: Callable[[], object]) -> None:
    # RunFinishedError: the run ended under us, so nobody is waiting any more.
    with contextlib.suppress(trio.RunFinishedError):
        token.run_sync_soon(callback)


async def run_in_worker(
    fn: Callable[..., T],
    *args: Any,
    name: str | None = None,
    on_cancel: Callable[[], object] | None = None,
) -> T:
    """Run the blocking ``fn(*args)`` on a fresh thread registered as a worker_thread actor.

    Returns its result or raises its exception. Checkpoints. If cancelled, calls
    ``on_cancel()`` (in the Trio thread), waits (shielded) for ``fn`` to return, joins the
    thread, then re-raises ``trio.Cancelled``: the thread never outlives the call. ``fn``
    cannot be interrupted; give it its own abort flag (set by ``on_cancel``, for example
    ``threading.Event.set``) if it must stop early.
    """
    supervisor = Supervisor.current()
    actor = supervisor.register(ActorKind.WORKER_THREAD, name or _name_of(fn))
    token = trio.lowlevel.current_trio_token()
    done = trio.Event()
    outcome: list[tuple[bool, Any]] = []

    def main() -> None:
        try:
            outcome.append((True, fn(*args)))
        except BaseException as exc:
            outcome.append((False, exc))
        finally:
            _notify(token, done.set)

    thread = threading.Thread(target=main, name=f"emelex-worker:{actor.name}", daemon=True)
    actor.thread = thread
    actor.state = ActorState.RUNNING
    thread.start()
    try:
        try:
            await done.wait()
        except trio.Cancelled:
            actor.state = ActorState.FINISHING
            actor.cancel_requested = True
            if on_cancel is not None:
                on_cancel()
            with trio.CancelScope(shield=True):
                await done.wait()
            raise
    finally:
        # The thread's last act was to schedule done.set(); joining takes microseconds.
        thread.join()
        supervisor.close_actor(actor)
    ok, value = outcome[0]
    if not ok:
        raise value
    return cast("T", value)


class WorkerJob(Generic[R, T]):
    """One job of a :class:`DedicatedWorker`.

    Thread side (inside the job function): :attr:`resource`, :attr:`aborted`,
    :meth:`emit`. Trio side: :meth:`batches`, :meth:`result`, :meth:`abort`,
    :meth:`wait_left_worker`.
    """

    def __init__(
        self,
        worker: DedicatedWorker[R],
        fn: Callable[..., T],
        args: tuple[Any, ...],
        actor: Actor,
        emit_capacity: int,
    ) -> None:
        self._worker = worker
        self._fn = fn
        self._args = args
        self.actor = actor
        self._lock = threading.Lock()
        self._space = threading.Condition(self._lock)
        self._items: deque[Any] = deque()
        self._emit_capacity = emit_capacity
        self._aborted = False
        self._wake_pending = False
        self._wake_send, self._wake_receive = trio.open_memory_channel[None](1)
        self._left = trio.Event()
        self._ran = False
        self._ok = False
        self._value: Any = None

    # -- thread side ----------------------------------------------------------------------
    @property
    def resource(self) -> R:
        """The worker's resource (what its setup function returned)."""
        return cast("R", self._worker._resource)

    @property
    def aborted(self) -> bool:
        """True once the job was aborted; a job function should stop promptly."""
        return self._aborted

    def emit(self, item: Any) -> bool:
        """Hand ``item`` to the Trio side (batched: at most one wake-up in flight).

        Blocks the worker thread while ``emit_capacity`` items wait unread. Returns
        False (dropping the item) once the job is aborted.
        """
        with self._space:
            while len(self._items) >= self._emit_capacity and not self._aborted:
                self._space.wait()
            if self._aborted:
                return False
            self._items.append(item)
            if self._wake_pending:
                return True
            self._wake_pending = True
        _notify(self._worker._token, self._wake)
        return True

    def _execute(self) -> None:
        self._ran = True
        try:
            self._value = self._fn(self, *self._args)
            self._ok = True
        except BaseException as exc:
            self._value = exc
        _notify(self._worker._token, self._leave)

    def _skip(self) -> None:
        self._value = WorkerJobAborted(f"{self.actor.describe()} aborted before it started")
        _notify(self._worker._token, self._leave)

    # -- trio side ------------------------------------------------------------------------
    def _wake(self) -> None:
        with contextlib.suppress(trio.WouldBlock):  # a wake-up is already queued
            self._wake_send.send_nowait(None)

    def _leave(self) -> None:
        self._left.set()
        self._wake()
        self.actor.state = ActorState.DONE if self._ok else ActorState.FAILED
        self._worker._job_left(self)

    @property
    def left_worker(self) -> bool:
        return self._left.is_set()

    def abort(self) -> None:
        """Set the abort flag: a queued job is skipped, a running one should stop."""
        with self._space:
            self._aborted = True
            self._space.notify_all()
        self.actor.cancel_requested = True
        if not self._left.is_set():
            self.actor.state = ActorState.CANCELLING

    async def wait_left_worker(self) -> None:
        """Wait until the job has finished or been skipped. A checkpoint; if cancelled,
        aborts the job and still waits (shielded) before re-raising."""
        try:
            await self._left.wait()
        except trio.Cancelled:
            self.abort()
            with trio.CancelScope(shield=True):
                await self._left.wait()
            raise

    def batches(self) -> WorkerJob[R, T]:
        """Iterate over emitted items in order, in the batches they arrived, until the job
        ends (``async for batch in job.batches()``). A plain iterator, not a generator, so
        leaving the loop early needs no cleanup and does not abort the job; :meth:`result`
        or the context of :meth:`DedicatedWorker.job` decides that."""
        return self

    def __aiter__(self) -> WorkerJob[R, T]:
        return self

    async def __anext__(self) -> list[Any]:
        while True:
            with self._space:
                items = list(self._items)
                self._items.clear()
                self._wake_pending = False
                self._space.notify_all()
            if items:
                await trio.lowlevel.checkpoint()
                return items
            if self._left.is_set():
                await trio.lowlevel.checkpoint()
                raise StopAsyncIteration
            await self._wake_receive.receive()

    async def result(self) -> T:
        """Wait for the job to leave the worker and return its result (or raise its error,
        or :class:`WorkerJobAborted` if it was skipped). Cancellation aborts the job and
        waits until it has left the worker."""
        await self.wait_left_worker()
        if self._ok:
            return cast("T", self._value)
        raise cast("BaseException", self._value)


class DedicatedWorker(Generic[R]):
    """One long-lived thread owning a resource (e.g. a loaded model), with a bounded
    job queue. Create it with :func:`open_dedicated_worker`."""

    def __init__(self, actor: Actor, queue_capacity: int, emit_capacity: int) -> None:
        if queue_capacity < 1 or emit_capacity < 1:
            raise ValueError("worker capacities must be at least 1")
        self.actor = actor
        self._supervisor = Supervisor.current()
        self.queue_capacity = queue_capacity
        self._emit_capacity = emit_capacity
        self._token = trio.lowlevel.current_trio_token()
        self._queue: queue.SimpleQueue[WorkerJob[R, Any] | None] = queue.SimpleQueue()
        self._slots = trio.Semaphore(queue_capacity)
        self._outstanding: set[WorkerJob[R, Any]] = set()
        self._resource: Any = None
        self._closing = False
        self.jobs_completed = 0

    @property
    def outstanding(self) -> int:
        """Jobs queued or running."""
        return len(self._outstanding)

    def _check_open(self) -> None:
        if self._closing:
            raise WorkerClosed(f"{self.actor.describe()} is closed")

    def _enqueue(self, fn: Callable[..., T], args: tuple[Any, ...], name: str) -> WorkerJob[R, T]:
        actor = self._supervisor.register(ActorKind.WORKER_JOB, name)
        actor.state = ActorState.RUNNING
        job: WorkerJob[R, T] = WorkerJob(self, fn, args, actor, self._emit_capacity)
        self._outstanding.add(job)
        self._queue.put(job)
        return job

    def _job_left(self, job: WorkerJob[R, Any]) -> None:
        self._outstanding.discard(job)
        self._slots.release()
        self.jobs_completed += 1
        self._supervisor.close_actor(job.actor)

    async def submit(
        self, fn: Callable[..., T], *args: Any, name: str | None = None
    ) -> WorkerJob[R, T]:
        """Queue ``fn(job, *args)``; waits while the queue is full. Raises WorkerClosed.

        The job is registered as a worker_job actor under the calling actor until it has
        left the worker. Prefer :meth:`job` or :meth:`run`, which never leave it behind.
        """
        self._check_open()
        await self._slots.acquire()
        try:
            self._check_open()  # it may have closed while we waited for a slot
        except WorkerClosed:
            self._slots.release()
            raise
        return self._enqueue(fn, args, name or _name_of(fn))

    def submit_nowait(
        self, fn: Callable[..., T], *args: Any, name: str | None = None
    ) -> WorkerJob[R, T]:
        """Queue without waiting. Raises WorkerBusy when the queue is full, WorkerClosed."""
        self._check_open()
        try:
            self._slots.acquire_nowait()
        except trio.WouldBlock:
            raise WorkerBusy("worker job queue", self.queue_capacity) from None
        return self._enqueue(fn, args, name or _name_of(fn))

    @asynccontextmanager
    async def job(
        self, fn: Callable[..., T], *args: Any, name: str | None = None
    ) -> AsyncIterator[WorkerJob[R, T]]:
        """Submit a job; on leaving the block for any reason, abort it unless it finished
        and wait (shielded) until it has left the worker."""
        handle = await self.submit(fn, *args, name=name)
        try:
            yield handle
        finally:
            if not handle.left_worker:
                handle.abort()
                with trio.CancelScope(shield=True):
                    await handle.wait_left_worker()

    async def run(self, fn: Callable[..., T], *args: Any, name: str | None = None) -> T:
        """Run ``fn(job, *args)`` on the worker and return its result. Cancellation sets
        the job's abort flag and waits until it has left the worker."""
        async with self.job(fn, *args, name=name) as handle:
            return await handle.result()

    def _thread_main(
        self,
        setup: Callable[[], R] | None,
        teardown: Callable[[R], object] | None,
        report: Callable[[bool, Any], None],
        exited: Callable[[], None],
    ) -> None:
        try:
            try:
                self._resource = setup() if setup is not None else None
            except BaseException as exc:
                report(False, exc)
                return
            report(True, None)
            while True:
                job = self._queue.get()
                if job is None:
                    break
                if job.aborted:
                    job._skip()
                else:
                    job._execute()
            if teardown is not None:
                teardown(self._resource)
        finally:
            self._resource = None
            exited()


@overload
def open_dedicated_worker(
    name: str,
    *,
    setup: None = None,
    teardown: Callable[[None], object] | None = None,
    queue_capacity: int = 8,
    emit_capacity: int = 4096,
) -> AbstractAsyncContextManager[DedicatedWorker[None]]: ...


@overload
def open_dedicated_worker(
    name: str,
    *,
    setup: Callable[[], R],
    teardown: Callable[[R], object] | None = None,
    queue_capacity: int = 8,
    emit_capacity: int = 4096,
) -> AbstractAsyncContextManager[DedicatedWorker[R]]: ...


def open_dedicated_worker(
    name: str,
    *,
    setup: Callable[[], Any] | None = None,
    teardown: Callable[[Any], object] | None = None,
    queue_capacity: int = 8,
    emit_capacity: int = 4096,
) -> AbstractAsyncContextManager[DedicatedWorker[Any]]:
    """Start a dedicated worker thread and yield it once ``setup()`` has succeeded.

    ``setup`` runs on the worker thread (errors surface here, unwrapped); ``teardown``
    runs there on exit. On exit, queued jobs are aborted, running ones are waited for,
    and the thread is joined before this returns. Cancellation during setup waits for
    setup to end (it cannot be interrupted), then propagates.
    """
    return _open_dedicated_worker(name, setup, teardown, queue_capacity, emit_capacity)


@asynccontextmanager
async def _open_dedicated_worker(
    name: str,
    setup: Callable[[], R] | None,
    teardown: Callable[[R], object] | None,
    queue_capacity: int,
    emit_capacity: int,
) -> AsyncIterator[DedicatedWorker[R]]:
    supervisor = Supervisor.current()
    actor = supervisor.register(ActorKind.WORKER_THREAD, name)
    worker: DedicatedWorker[R] = DedicatedWorker(actor, queue_capacity, emit_capacity)
    token = worker._token
    started = trio.Event()
    exited = trio.Event()
    startup: list[tuple[bool, Any]] = []

    def report(ok: bool, error: Any) -> None:
        startup.append((ok, error))
        _notify(token, started.set)

    thread = threading.Thread(
        target=worker._thread_main,
        args=(setup, teardown, report, lambda: _notify(token, exited.set)),
        name=f"emelex-worker:{name}",
        daemon=True,
    )
    actor.thread = thread
    thread.start()
    try:
        with trio.CancelScope(shield=True):
            await started.wait()
        ok, error = startup[0]
        if not ok:
            raise error
        actor.state = ActorState.RUNNING
        yield worker
    finally:
        worker._closing = True
        actor.state = ActorState.FINISHING
        for job in list(worker._outstanding):
            job.abort()
        worker._queue.put(None)
        with trio.CancelScope(shield=True):
            await exited.wait()
            # Jobs that were queued leave through callbacks scheduled before `exited`.
            while worker._outstanding:
                await trio.lowlevel.checkpoint()
        thread.join()
        actor.state = ActorState.DONE
        supervisor.close_actor(actor)
