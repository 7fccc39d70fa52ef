"""Thread actors: run_in_worker and dedicated workers never abandon a thread."""

from __future__ import annotations

import threading
from typing import Any

import pytest
import trio
import trio.testing

from emelex.runtime import (
    ActorKind,
    WorkerBusy,
    WorkerClosed,
    WorkerJob,
    WorkerJobAborted,
    open_dedicated_worker,
    open_supervisor,
    run_in_worker,
)


def emelex_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("emelex-worker")]


async def test_run_in_worker_returns_and_joins() -> None:
    async with open_supervisor("s") as sup, sup.open_actor("turn", "t"):
        seen: list[str] = []

        def blocking(x: int) -> int:
            seen.append(threading.current_thread().name)
            return x + 1

        assert await run_in_worker(blocking, 41, name="adder") == 42
        assert seen == ["emelex-worker:adder"]
        assert emelex_threads() == []
        assert sup.live_actors == 1  # only the turn


async def test_run_in_worker_raises_the_error() -> None:
    def failing() -> None:
        raise OSError("disk on fire")

    with pytest.raises(OSError, match="disk on fire"):
        await run_in_worker(failing)
    assert emelex_threads() == []


async def test_run_in_worker_visible_while_running_and_cancel_waits() -> None:
    entered = threading.Event()
    release = threading.Event()
    finished: list[bool] = []

    def blocking() -> None:
        entered.set()
        release.wait()
        finished.append(True)

    async with open_supervisor("s") as sup:
        with trio.CancelScope() as scope:
            async with sup.open_actor("turn", "t") as turn:

                async def watcher() -> None:
                    await trio.to_thread.run_sync(entered.wait)
                    (info,) = sup.snapshot().find(ActorKind.WORKER_THREAD)
                    assert info.thread_alive is True
                    scope.cancel()
                    try:
                        with trio.CancelScope(shield=True):
                            await trio.testing.wait_all_tasks_blocked()
                        # Cancelled, but the caller still waits for the thread.
                        (waiting,) = sup.snapshot().find(ActorKind.WORKER_THREAD)
                        assert waiting.state.value == "finishing"
                    finally:
                        release.set()

                turn._nursery.start_soon(watcher)
                await run_in_worker(blocking, name="blocker")
        assert scope.cancelled_caught
        assert finished == [True]  # the thread finished before the cancellation returned
        assert emelex_threads() == []
        assert sup.live_actors == 0


async def test_dedicated_worker_setup_runs_on_thread_and_teardown_at_exit() -> None:
    names: dict[str, str] = {}

    def setup() -> dict[str, int]:
        names["setup"] = threading.current_thread().name
        return {"loaded": 1}

    def teardown(resource: dict[str, int]) -> None:
        names["teardown"] = threading.current_thread().name

    def use(job: WorkerJob[dict[str, int], int], add: int) -> int:
        names["job"] = threading.current_thread().name
        return job.resource["loaded"] + add

    async with open_supervisor("s") as sup:
        async with open_dedicated_worker("model", setup=setup, teardown=teardown) as worker:
            assert await worker.run(use, 1) == 2
            assert worker.jobs_completed == 1
            (info,) = sup.snapshot().find(ActorKind.WORKER_THREAD)
            assert info.thread_alive
        assert len(set(names.values())) == 1
        assert names["setup"] == "emelex-worker:model"
        assert emelex_threads() == []
        assert sup.live_actors == 0


async def test_dedicated_worker_setup_error_surfaces_in_caller() -> None:
    def setup() -> None:
        raise FileNotFoundError("no such model")

    with pytest.raises(FileNotFoundError, match="no such model"):
        async with open_dedicated_worker("model", setup=setup):
            pytest.fail("the body must not run")
    assert emelex_threads() == []


async def test_cancelling_a_job_sets_abort_and_waits_until_it_left() -> None:
    entered = threading.Event()
    observed_abort: list[bool] = []

    def loop(job: WorkerJob[None, str]) -> str:
        entered.set()
        while not job.aborted:
            job.emit("tick")
            threading.Event().wait(0.001)
        observed_abort.append(True)
        return "stopped"

    async with open_supervisor("s") as sup, open_dedicated_worker("w") as worker:
        with trio.CancelScope() as scope:
            async with worker.job(loop) as job:
                async for batch in job.batches():
                    assert set(batch) == {"tick"}
                    scope.cancel()
                    await trio.lowlevel.checkpoint()
        assert scope.cancelled_caught
        assert job.left_worker
        assert observed_abort == [True]
        assert sup.snapshot().find(ActorKind.WORKER_JOB) == ()


async def test_result_cancellation_aborts_running_job() -> None:
    def spin(job: WorkerJob[None, None]) -> None:
        while not job.aborted:
            threading.Event().wait(0.001)

    async with open_dedicated_worker("w") as worker:
        with trio.move_on_after(0.05) as scope:
            await worker.run(spin)
        assert scope.cancelled_caught
        assert worker.outstanding == 0


async def test_queue_is_bounded_and_queued_jobs_are_skipped_when_aborted() -> None:
    gate = threading.Event()
    ran: list[int] = []

    def blocker(job: WorkerJob[None, None]) -> None:
        gate.wait()

    def record(job: WorkerJob[None, None], n: int) -> None:
        ran.append(n)

    async with open_dedicated_worker("w", queue_capacity=2) as worker:
        first = worker.submit_nowait(blocker)
        queued = worker.submit_nowait(record, 1)
        with pytest.raises(WorkerBusy) as caught:
            worker.submit_nowait(record, 2)
        assert caught.value.maximum == 2
        queued.abort()
        gate.set()
        await first.result()
        with pytest.raises(WorkerJobAborted):
            await queued.result()
        assert ran == []
        assert worker.outstanding == 0
        await worker.run(record, 3)
    assert ran == [3]


async def test_submit_waits_for_a_slot() -> None:
    gate = threading.Event()

    def blocker(job: WorkerJob[None, None]) -> None:
        gate.wait()

    async with open_dedicated_worker("w", queue_capacity=1) as worker:
        first = await worker.submit(blocker)
        with trio.move_on_after(0.05) as scope:
            await worker.submit(blocker)
        assert scope.cancelled_caught  # no slot: submission waited
        gate.set()
        await first.result()
        second = await worker.submit(blocker)
        await second.result()


async def test_closing_worker_aborts_queued_jobs_and_refuses_new_ones() -> None:
    gate = threading.Event()
    started = threading.Event()

    def blocker(job: WorkerJob[None, None]) -> None:
        started.set()
        gate.wait()

    async with open_supervisor("s") as sup:
        async with open_dedicated_worker("w") as worker:
            running = worker.submit_nowait(blocker)
            queued = worker.submit_nowait(blocker)
            await trio.to_thread.run_sync(started.wait)
            gate.set()
        assert running.left_worker and queued.left_worker
        with pytest.raises(WorkerClosed):
            worker.submit_nowait(blocker)
        with pytest.raises(WorkerJobAborted):
            await queued.result()
        assert emelex_threads() == []
        assert sup.live_actors == 0


async def test_emit_is_bounded_and_batched() -> None:
    def produce(job: WorkerJob[None, int], count: int) -> int:
        for n in range(count):
            job.emit(n)
        return count

    async with open_dedicated_worker("w", emit_capacity=16) as worker:
        async with worker.job(produce, 1000) as job:
            received: list[Any] = []
            batches = 0
            async for batch in job.batches():
                assert len(batch) <= 16
                batches += 1
                received.extend(batch)
            assert await job.result() == 1000
    assert received == list(range(1000))
    assert batches < 1000  # hand-offs are batched, not one wake-up per item


async def test_job_error_propagates() -> None:
    def bad(job: WorkerJob[None, None]) -> None:
        raise ValueError("bad job")

    async with open_dedicated_worker("w") as worker:
        with pytest.raises(ValueError, match="bad job"):
            await worker.run(bad)
        assert await worker.run(lambda job: 5) == 5
