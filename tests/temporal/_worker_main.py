"""A worker process for the kill tests: ``python -m tests.temporal._worker_main ADDRESS
QUEUE WORKSPACE PAUSE``. Its append_line tool writes WORKSPACE/journal.txt, marks
WORKSPACE/started.txt, then waits PAUSE seconds (the window a kill lands in)."""

from __future__ import annotations

import sys
from pathlib import Path

from emelex.agent import AgentSession
from emelex.temporal import WorkerOptions, run_worker
from tests.temporal._agents import AppendLine, Guarded, IdempotentAppend, build_session


def main() -> None:
    address, queue, workspace, pause = sys.argv[1:5]
    root = Path(workspace)
    first = not (root / "spawned").exists()
    (root / "spawned").touch()

    async def make() -> AgentSession:
        journal = root / "journal.txt"
        return build_session(
            root,
            AppendLine(journal, float(pause), marker=root / "started.txt"),
            Guarded(journal),
            # Pauses only in the first worker process: the retry on the next one returns.
            IdempotentAppend(journal, float(pause) if first else 0.0, marker=root / "started.txt"),
        )

    # No sticky cache: a restarted worker takes the workflow's next task at once.
    options = WorkerOptions(task_queue=queue, max_cached_workflows=0, heartbeat_interval=0.2)
    run_worker(make, address, options=options)


if __name__ == "__main__":
    main()
