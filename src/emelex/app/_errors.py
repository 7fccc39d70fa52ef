"""Errors of the application layer, rooted in :class:`AppError`.

Every configuration mistake :meth:`AgentBuilder.build` or :meth:`SessionStarter.start`
can find has its own class, so applications can tell them apart without parsing text.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import attrs

from emelex._errors import EmelexError, LimitExceeded
from emelex.agent import AgentError
from emelex.model import ModelError


class AppError(EmelexError):
    """Root of the application layer's errors (``emelex.app``)."""


class InvalidAgent(AppError):
    """Root of the errors :meth:`AgentBuilder.build` raises for a bad description."""


class InvalidAgentName(InvalidAgent):
    """The agent name is blank or not 1-64 letters, digits, ``_``, ``.``, ``-``."""


class BlankInstructions(InvalidAgent):
    """The instructions are missing or only whitespace."""


class MissingModel(InvalidAgent):
    """Neither ``client(...)`` nor ``model(...)`` was given."""


class DuplicateProvider(InvalidAgent):
    """The model was given more than once (``client`` and/or ``model`` twice)."""


class DuplicateTool(InvalidAgent):
    """Two tools of the agent have the same name."""


class InvalidApprover(InvalidAgent):
    """The approver does not implement ``ApprovalPolicy`` (``async decide(context)``)."""


class InvalidToolSchema(InvalidAgent):
    """A tool's name, description or JSON Schema is malformed."""


class NameCollision(InvalidAgent):
    """Two different sources (agent tools, capabilities, harness built-ins,
    integrations) provide a tool with the same name."""


class InvalidCapability(InvalidAgent):
    """A capability id is malformed or unknown, or the value is not a capability."""


class InvalidCapabilityConfig(InvalidCapability):
    """A built-in capability was given an unknown option or an invalid value."""


class DuplicateCapability(InvalidAgent):
    """The same capability id was added twice."""


class DuplicateMcpServer(InvalidAgent):
    """Two MCP servers have the same name."""


class InvalidMcpServer(InvalidAgent):
    """An MCP server configuration has no non-blank ``name``."""


class InvalidPlugin(InvalidAgent):
    """A plugin path is blank or was given twice, or the plugin does not compile
    (then it is a :class:`~emelex.app.PluginError` naming file and line)."""


class InvalidFile(InvalidAgent):
    """A seeded file path is absolute, empty, escapes with ``..``, or is given twice,
    or its content is not ``str``/``bytes``."""


class DuplicateSkill(InvalidAgent):
    """Two skills have the same name."""


class InvalidSkill(InvalidAgent):
    """A skill name is not lowercase letters, digits and ``-``, its description or
    instructions are blank, or one of its files has a bad path or content."""


class SkillTooLarge(LimitExceeded, InvalidSkill):
    """A skill's directory is over a bound: ``limit`` is ``"skill files"``, ``"skill
    file bytes"``, ``"skill bytes"`` or ``"skill depth"`` (``maximum`` and ``actual``
    as in :class:`~emelex.LimitExceeded`)."""

    def __init__(self, limit: str, maximum: int, actual: int | None, detail: str) -> None:
        super().__init__(limit, maximum, actual)
        self.args = (detail,)


class InvalidWorkspaceRoot(InvalidAgent):
    """``workspace(root)`` is not an existing directory."""


class WorkspaceConflict(InvalidAgent):
    """Seeded files and a real workspace root were both given: files are seeded only
    into a session's private temporary workspace."""


class InvalidPolicy(AppError):
    """A workspace policy is malformed (for example an invalid hidden-path glob)."""


class ApproverRequired(AppError):
    """Some tool may ask for approval (a gated tool, the shell, file writes) but the
    agent has no approver. Raised by ``build()`` or, for harness tools, ``start()``."""


class ShellNotAllowed(AppError):
    """The harness or a capability asks for the shell but the workspace policy is
    read-only: a shell can change anything, so it needs ``WorkspacePolicy.read_write()``."""


class UnresolvedCapability(AppError):
    """A capability reference could not be resolved by the engine."""


class IntegrationMissing(AppError):
    """The agent has MCP servers or plugins but no engine integration handles them."""


class SessionNotStarted(AppError):
    """A session starter was used after its session was started."""


class EventsLagged(AppError):
    """A ``Session.events()`` stream fell a whole buffer (``event_buffer``) behind and
    was dropped so that it could not stall the session; raised to its consumer after
    the events it had buffered. Subscribe again to follow later events."""


class InvalidBudget(AppError):
    """A budget setting is out of range (a non-positive or absurdly large token count,
    a bad bytes-per-token ratio, ...). Raised when the budget or harness is built."""


class InvalidTaskList(AppError):
    """A task list breaks its rules: too many tasks, a blank or oversized task, an
    unknown status, or more than one task in progress. The task tools report the same
    text to the model as an error result instead of raising."""


class BudgetExceeded(LimitExceeded, AppError, AgentError):
    """A session budget refused a model call.

    Raised from the model call of a running turn, so it is also an
    :class:`~emelex.agent.AgentError`: the turn fails with it unchanged and its
    ``rolled_back`` / ``checkpoint`` say what happened to history (rolled back in the
    turn's first round, checkpointed after a tool ran). ``limit``, ``maximum`` and
    ``actual`` come from :class:`~emelex.LimitExceeded`.
    """

    def __init__(self, limit: str, maximum: int, actual: int | None, detail: str) -> None:
        super().__init__(limit, maximum, actual)
        # LimitExceeded's generic text is replaced by one that says what to do.
        self.args = (detail,)


class ContextBudgetExceeded(BudgetExceeded):
    """Even after shortening older tool results and dropping the oldest exchanges, the
    request does not fit the context budget (``actual`` is the smallest estimate the
    filter reached). Also raised by ``Session.inspect()``."""


class UsageBudgetExhausted(BudgetExceeded):
    """The session used up its token or model-call budget; no further model call is
    made (``limit`` says which of the two)."""


class InvalidOutputType(InvalidAgent, TypeError):
    """An ``output_type`` (on an agent or a turn) has no JSON Schema mapping, or a
    retry budget is not a non-negative integer."""


class StreamNotOpen(AppError, TypeError):
    """``session.stream_text(...)`` was iterated without ``async with`` (the turn behind
    the stream needs a scope that ends it)."""


class LoopAlreadyRunning(AppError, RuntimeError):
    """A synchronous entry point (``run_sync``) was called where a Trio or asyncio
    event loop already runs (a notebook cell, an ``async def``); ``await`` the async
    API there instead."""


# -- agent packages (``docs/app/packages.md``) ------------------------------------------


@attrs.frozen
class PackageProblem:
    """One thing wrong with a package: where (package-relative path, line if known),
    a stable ``code`` and a sentence."""

    path: str
    code: str
    message: str
    line: int | None = None

    def __str__(self) -> str:
        where = self.path if self.line is None else f"{self.path}:{self.line}"
        return f"{where}: {self.message} [{self.code}]"


class PackageError(AppError):
    """A package could not be loaded or exported; ``problems`` lists every reason."""

    def __init__(self, message: str, problems: Sequence[PackageProblem] = ()) -> None:
        self.problems = tuple(problems)
        detail = "".join(f"\n  {problem}" for problem in self.problems)
        super().__init__(message + detail)


class InvalidPackage(PackageError, InvalidAgent):
    """The package failed validation (see ``problems``)."""


class MissingBinding(PackageError):
    """``bindings`` were given but none is named like the package's model binding."""


class UnboundModelError(ModelError):
    """A package's model binding was not resolved when it was loaded."""


class PluginError(InvalidPlugin):
    """A plugin could not be loaded: ``file`` and ``line`` name where (the line is
    None when unknown); the message includes both."""

    def __init__(self, message: str, file: str | os.PathLike[str], line: int | None = None) -> None:
        self.file = os.fspath(file)
        self.line = line
        self.reason = message
        where = self.file if line is None else f"{self.file}:{line}"
        super().__init__(f"{where}: {message}")


class SubAgentTooWide(AppError):
    """A sub-agent would get a tool its parent session does not have: a sub-agent's
    authority is never wider than its parent's. ``tools`` names the extra ones."""

    def __init__(self, message: str, *, tools: tuple[str, ...]) -> None:
        super().__init__(message)
        self.tools = tools


class InvalidSubAgent(InvalidAgent):
    """``Agent.as_tool`` was given a bad name, description, limit or policy."""


class InvalidHook(InvalidAgent):
    """A hook is not a :class:`~emelex.agent.Hook`, or a guardrail does not implement
    its protocol (or, in a package, a hook reference does not resolve to one)."""
