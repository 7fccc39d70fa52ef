"""Temporal workers for an emelex session: Temporal's worker on asyncio, the work on Trio.

* :func:`open_worker` (Trio): a worker inside a Trio application; the activities' work
  runs on the calling Trio loop, Temporal's worker on an asyncio loop of its own thread.
* :func:`run_worker` (blocking): a worker process; asyncio on the main thread, one
  dedicated Trio thread owning the session's model and tools. Stops on SIGTERM/SIGINT.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta
from typing import Any

import attrs
import trio
from temporalio.client import Client
from temporalio.service import RPCError
from temporalio.worker import Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from emelex.agent import AgentSession
from emelex.temporal._activities import EventSideChannel, TurnActivities
from emelex.temporal._bridge import TrioPortal, open_asyncio_thread, open_trio_thread
from emelex.temporal._errors import TemporalUnavailable
from emelex.temporal._workflow import TurnWorkflow

DEFAULT_TASK_QUEUE = "emelex"
DEFAULT_NAMESPACE = "default"
#: How long connecting to the server may take before TemporalUnavailable.
CONNECT_DEADLINE = 30.0

#: Modules the workflow sandbox shares with the worker instead of re-importing them for
#: every workflow run: emelex's pure values and turn core, and the libraries they use.
#: The workflow module itself imports them through ``imports_passed_through``.
PASSTHROUGH = ("emelex", "attrs", "cattrs", "jsonschema", "referencing", "rpds", "re2", "trio")


def workflow_runner(*passthrough: str) -> SandboxedWorkflowRunner:
    """Temporal's sandbox, sharing emelex (and ``passthrough`` modules) with the worker."""
    modules = (*PASSTHROUGH, *passthrough)
    return SandboxedWorkflowRunner(
        restrictions=SandboxRestrictions.default.with_passthrough_modules(*modules)
    )


async def connect(address: str, namespace: str = DEFAULT_NAMESPACE) -> Client:
    """Connect (asyncio side), mapping failure to TemporalUnavailable."""
    try:
        return await asyncio.wait_for(
            Client.connect(address, namespace=namespace), timeout=CONNECT_DEADLINE
        )
    except (TimeoutError, RPCError, RuntimeError, OSError) as exc:
        raise TemporalUnavailable(f"cannot reach Temporal at {address}: {exc}") from exc


@attrs.frozen
class WorkerOptions:
    """How a worker polls. ``max_cached_workflows=0`` turns off sticky execution: every
    workflow task may go to any worker (what a fleet that loses workers often wants)."""

    task_queue: str = DEFAULT_TASK_QUEUE
    namespace: str = DEFAULT_NAMESPACE
    max_concurrent_activities: int = 100
    max_cached_workflows: int = 1000
    sticky_timeout: float = 10.0
    heartbeat_interval: float = 1.0
    identity: str | None = None
    #: The application's own workflows, served beside the turn workflow, and modules
    #: they need the sandbox to share rather than re-import every run.
    workflows: tuple[type, ...] = ()
    passthrough: tuple[str, ...] = ()


def make_worker(client: Client, activities: TurnActivities, options: WorkerOptions) -> Worker:
    extra: dict[str, Any] = {} if options.identity is None else {"identity": options.identity}
    return Worker(
        client,
        task_queue=options.task_queue,
        workflows=[TurnWorkflow, *options.workflows],
        activities=activities.activities(),
        workflow_runner=workflow_runner(*options.passthrough),
        max_concurrent_activities=options.max_concurrent_activities,
        max_cached_workflows=options.max_cached_workflows,
        sticky_queue_schedule_to_start_timeout=timedelta(seconds=options.sticky_timeout),
        **extra,
    )


@attrs.frozen
class RunningWorker:
    """A worker serving a task queue; ``digest`` is its authority snapshot's digest."""

    task_queue: str
    digest: str


@contextlib.asynccontextmanager
async def open_worker(
    session: AgentSession,
    address: str,
    *,
    options: WorkerOptions = WorkerOptions(),
    on_event: EventSideChannel | None = None,
) -> AsyncIterator[RunningWorker]:
    """Serve turns of ``session``'s agent until the block ends (Trio). The session's
    model and tools run on this Trio loop; the session stays the caller's to close."""
    portal = TrioPortal.current(threads=options.max_concurrent_activities)
    activities = TurnActivities(
        session, portal, on_event=on_event, heartbeat_interval=options.heartbeat_interval
    )
    try:
        async with open_asyncio_thread("emelex-temporal-worker") as aio:
            # Temporal's worker must be made on the loop it runs on.
            worker = await aio.run(lambda: _connected_worker(activities, address, options))
            running = aio.submit(worker.run)
            try:
                yield RunningWorker(options.task_queue, activities.digest)
            finally:
                with trio.CancelScope(shield=True):
                    await aio.run(worker.shutdown)
                    failure = await trio.to_thread.run_sync(running.exception)
            if failure is not None:  # the body ended well, but the worker had died
                raise TemporalUnavailable(f"the Temporal worker failed: {failure}") from failure
    finally:
        portal.close()


def run_worker(
    make_session: Callable[[], Awaitable[AgentSession]],
    address: str,
    *,
    options: WorkerOptions = WorkerOptions(),
    on_event: EventSideChannel | None = None,
) -> None:
    """Run a worker process until SIGTERM or SIGINT. ``make_session`` is awaited in the
    process's Trio thread (e.g. ``lambda: engine.create(agent).start()`` then its
    ``agent_session``); the session is closed when the worker stops."""
    with open_trio_thread("emelex-temporal-trio") as portal:
        session = trio.from_thread.run(make_session, trio_token=portal.token)
        try:
            # Describing the session reads its tools: that is Trio-side work too.
            activities = trio.from_thread.run_sync(
                lambda: TurnActivities(
                    session,
                    portal,
                    on_event=on_event,
                    heartbeat_interval=options.heartbeat_interval,
                ),
                trio_token=portal.token,
            )
            asyncio.run(_serve(activities, address, options))
        finally:
            trio.from_thread.run_sync(session.close, trio_token=portal.token)


async def _connected_worker(
    activities: TurnActivities, address: str, options: WorkerOptions
) -> Worker:
    return make_worker(await connect(address, options.namespace), activities, options)


async def _serve(activities: TurnActivities, address: str, options: WorkerOptions) -> None:
    worker = await _connected_worker(activities, address, options)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    async with worker:
        await stop.wait()
