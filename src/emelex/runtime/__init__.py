"""The actor runtime: supervisors, actors, bounded mailboxes, cancellation policies,
thread actors and the diagnostics endpoint.

Every session, turn, model job, approval and tool invocation of emelex is an actor:
a Trio task (or a thread) registered with a :class:`Supervisor`, living inside a
nursery of its owner. When an owner's scope exits, the supervisor checks that its
subtree is empty and raises :class:`DetachedWorkError` otherwise.
"""

from emelex._facade import fix_module_names
from emelex.runtime._actor import Actor, ActorInfo, ActorKind, ActorState, ActorTree
from emelex.runtime._call import ActorCall, CancellationPolicy
from emelex.runtime._cancellation import AgentCancellation
from emelex.runtime._context import CURRENT, ActorContext, current_actor
from emelex.runtime._diagnostics import DIAGNOSTICS_ENV, serve_diagnostics
from emelex.runtime._errors import (
    ActorDropped,
    ActorError,
    ActorStartupError,
    DetachedWorkError,
    MailboxClosed,
    MailboxFull,
    WorkerBusy,
    WorkerClosed,
    WorkerJobAborted,
)
from emelex.runtime._groups import open_unwrapping_nursery
from emelex.runtime._mailbox import MAX_MAILBOX_CAPACITY, Mailbox, MailboxStatistics
from emelex.runtime._nursery import ActorHandle, ActorNursery
from emelex.runtime._supervisor import Supervisor, open_supervisor
from emelex.runtime._threads import DedicatedWorker, WorkerJob, open_dedicated_worker, run_in_worker

__all__ = [
    "open_unwrapping_nursery",
    "DIAGNOSTICS_ENV",
    "CURRENT",
    "MAX_MAILBOX_CAPACITY",
    "Actor",
    "AgentCancellation",
    "ActorCall",
    "ActorContext",
    "ActorDropped",
    "ActorError",
    "ActorHandle",
    "ActorInfo",
    "ActorKind",
    "ActorNursery",
    "ActorStartupError",
    "ActorState",
    "ActorTree",
    "CancellationPolicy",
    "DedicatedWorker",
    "DetachedWorkError",
    "Mailbox",
    "MailboxClosed",
    "MailboxFull",
    "MailboxStatistics",
    "Supervisor",
    "WorkerBusy",
    "WorkerClosed",
    "WorkerJob",
    "WorkerJobAborted",
    "current_actor",
    "open_dedicated_worker",
    "open_supervisor",
    "run_in_worker",
    "serve_diagnostics",
]

fix_module_names(__name__, globals())
