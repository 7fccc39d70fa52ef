"""emelex turns as Temporal workflows (``pip install 'emelex[temporal]'``).

The turn workflow runs emelex's pure turn core deterministically; each model round and
each tool call is an activity, run by a worker on its Trio loop. :class:`TemporalEngine`
starts sessions and runs their turns from Trio; :func:`open_worker` and
:func:`run_worker` serve them. See ``docs/temporal.md``.
"""

from emelex._facade import fix_module_names
from emelex.temporal._activities import TRANSPORT_ERRORS, EventSideChannel, describe_session
from emelex.temporal._bridge import AsyncioThread, TrioPortal, open_trio_thread
from emelex.temporal._devserver import dev_server, free_port, temporal_cli
from emelex.temporal._engine import (
    SessionSettings,
    TemporalEngine,
    TemporalSession,
    workflow_id,
)
from emelex.temporal._errors import (
    AuthorityDrift,
    Interrupted,
    NoPendingApproval,
    RemoteTurnFailed,
    TemporalError,
    TemporalUnavailable,
    TokenLimitExceeded,
    TurnNotRunning,
    TurnWorkflowFailed,
)
from emelex.temporal._spec import AgentDescription, PendingApproval, Timeouts
from emelex.temporal._worker import (
    DEFAULT_TASK_QUEUE,
    RunningWorker,
    WorkerOptions,
    open_worker,
    run_worker,
    workflow_runner,
)
from emelex.temporal._workflow import TurnWorkflow

__all__ = [
    "DEFAULT_TASK_QUEUE",
    "TRANSPORT_ERRORS",
    "AgentDescription",
    "AsyncioThread",
    "AuthorityDrift",
    "EventSideChannel",
    "Interrupted",
    "NoPendingApproval",
    "PendingApproval",
    "RemoteTurnFailed",
    "RunningWorker",
    "SessionSettings",
    "TemporalEngine",
    "TemporalError",
    "TemporalSession",
    "TemporalUnavailable",
    "Timeouts",
    "TokenLimitExceeded",
    "TrioPortal",
    "TurnNotRunning",
    "TurnWorkflow",
    "TurnWorkflowFailed",
    "WorkerOptions",
    "describe_session",
    "dev_server",
    "free_port",
    "open_trio_thread",
    "open_worker",
    "run_worker",
    "temporal_cli",
    "workflow_id",
    "workflow_runner",
]

fix_module_names(__name__, globals())
