"""Event kinds the Host appends to a session's log beside the turn events of
emelex.store (shared by the Host and the scale-out follower that replays them)."""

from __future__ import annotations

from typing import Final

SESSION_CREATED: Final = "session.created"
QUEUE_ADMITTED: Final = "queue.admitted"
QUEUE_STARTED: Final = "queue.started"
QUEUE_FINISHED: Final = "queue.finished"
#: A stop of the running invocation was asked (its runner cancels the turn).
QUEUE_STOP: Final = "queue.stop"
INTERACTION_REQUESTED: Final = "interaction.requested"
INTERACTION_RESOLVED: Final = "interaction.resolved"
#: Before each approval is asked and each tool call may start: where the turn stands
#: (what it commits if the Host is lost then, and what a restart may continue).
TURN_JOURNAL: Final = "turn.journal"
#: A restarted Host continues an invocation a lost Host had started (from its last
#: journal, or from the start of its turn when none was written).
QUEUE_RESUMED: Final = "queue.resumed"
#: A main model request was prepared, and how it ended (context reports).
REQUEST_PREPARED: Final = "request.prepared"
REQUEST_SETTLED: Final = "request.settled"
#: Prepared requests a session keeps in memory for context reports.
MAX_REQUESTS_KEPT: Final = 64
#: A coordinator started a worker session (WorkHub).
WORKER_STARTED: Final = "workhub.worker"
#: The automatic title of a session (or a title failure, as a diagnostic).
SESSION_TITLED: Final = "session.titled"
#: A fork's operation reference, recorded in its source session's namespace.
FORK_RECORDED: Final = "fork.recorded"
