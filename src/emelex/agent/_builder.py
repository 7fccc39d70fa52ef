"""AgentSessionBuilder: resolves and validates a session's authority."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from emelex._ids import new_id
from emelex.agent._approval import ApprovalPolicy, DenyAll
from emelex.agent._authority import AgentAuthoritySnapshot, ToolAuthority, WorkspaceIdentity
from emelex.agent._ceilings import ResourceCeilings, check_request, measure_messages
from emelex.agent._errors import (
    AgentError,
    CapabilityMissing,
    ConfigurationConflict,
    InvalidToolDeclaration,
    InvalidWorkspace,
)
from emelex.agent._history import has_tool_history, strip_reasoning, validate_history
from emelex.agent._hooks import Hook
from emelex.agent._options import check_options_capabilities
from emelex.agent._tool_table import ToolTable
from emelex.agent._turn_rules import (
    DEFAULT_MAX_RETRIES,
    DEFAULT_MAX_ROUNDS,
    check_max_retries,
    check_max_rounds,
)
from emelex.agent._video import refuse_video
from emelex.model import (
    AgentModel,
    Client,
    GenerationOptions,
    Message,
)
from emelex.tools import AgentTool, BuiltinSettings
from emelex.tools.workspace import Workspace, WorkspaceError

if TYPE_CHECKING:
    from emelex.agent._progress import ProgressJournal
    from emelex.agent._session import AgentSession
    from emelex.agent._turn import ToolJournal
    from emelex.tools.builtin import WebSearchProvider

#: Hard ceiling on the shell timeout setting (20 minutes).
MAX_SHELL_TIMEOUT_SECONDS = 20 * 60

#: Most generated tokens per model call when neither the session's nor the turn's
#: GenerationOptions set ``max_tokens`` (``default_max_tokens(None)`` removes it).
DEFAULT_MAX_TOKENS = 1024


@attrs.frozen
class Resolved:
    """The outcome of resolving a builder (shared by ``build`` and the snapshot)."""

    workspace: Workspace
    table: ToolTable
    history: tuple[Message, ...]
    strip_reasoning: bool
    snapshot: AgentAuthoritySnapshot


@attrs.frozen
class SessionParts:
    """Everything a session is made of, validated: what :meth:`AgentSessionBuilder.build`
    hands to the session factory."""

    session_id: str
    client: Client
    resolved: Resolved
    approval: ApprovalPolicy
    options: GenerationOptions
    ceilings: ResourceCeilings
    max_rounds: int
    default_max_tokens: int | None
    max_retries: int = DEFAULT_MAX_RETRIES
    journal: ToolJournal | None = None
    hooks: tuple[Hook, ...] = ()
    progress: ProgressJournal | None = None


@attrs.frozen
class _Prepared:
    """Built-in tools made ready by the caller, and the settings they were made for."""

    settings: BuiltinSettings
    tools: tuple[AgentTool, ...]


class AgentSessionBuilder:
    """Collects a session's configuration; :meth:`build` validates all of it.

    Create it with :meth:`AgentSession.builder`. Every setter returns the builder.
    :meth:`authority_snapshot` resolves exactly what :meth:`build` would, without
    building.

    ``workspace`` is a directory (opened when the builder resolves, closed with the
    session) or an open :class:`~emelex.tools.workspace.Workspace`: the session then
    uses that one and closes it when it closes (a failed ``build`` leaves it open, for
    its owner to close). The ``include_*``/``shell_*``/``web_*`` setters choose the
    default built-in tools the builder makes itself; :meth:`prepared_builtins` gives
    ready-made ones instead (the application layer's guarded tools).
    """

    def __init__(
        self,
        client: Client | AgentModel,
        workspace: str | os.PathLike[str] | Workspace,
        *,
        session_factory: Callable[[SessionParts], AgentSession],
    ) -> None:
        self._client = client if isinstance(client, Client) else Client(client)
        self._workspace: str | Workspace = (
            workspace if isinstance(workspace, Workspace) else os.fspath(workspace)
        )
        self._session_factory = session_factory
        self._prepared: _Prepared | None = None
        self._system_prompt: str | None = None
        self._history: tuple[Message, ...] = ()
        self._history_committed = False
        self._tools: list[AgentTool] = []
        self._approval: ApprovalPolicy = DenyAll()
        self._options = GenerationOptions()
        self._builtins = BuiltinSettings()
        self._ceilings = ResourceCeilings()
        self._session_id: str | None = None
        self._web_search_provider: Any = None
        self._max_rounds = DEFAULT_MAX_ROUNDS
        self._max_retries = DEFAULT_MAX_RETRIES
        self._journal: ToolJournal | None = None
        self._progress: ProgressJournal | None = None
        self._hooks: list[Hook] = []
        self._default_max_tokens: int | None = DEFAULT_MAX_TOKENS

    # -- configuration --------------------------------------------------------------------
    def system_prompt(self, text: str) -> AgentSessionBuilder:
        self._system_prompt = text
        return self

    def history(
        self, messages: Iterable[Message], *, committed: bool = False
    ) -> AgentSessionBuilder:
        """Resume from ``messages``.

        History from outside (the default) is held to every rule: a call must have a
        unique id and exactly one result, and must name a tool of this session.
        ``committed=True`` says the messages are history this harness committed (a
        store that only ever held ``AgentTurn.messages`` and checkpoints): the structure
        is checked the same way, but a call naming a tool the session does not have
        (the model's unknown name, answered with an error result; a tool removed since)
        is kept as it was answered. Requests then declare such a name with a retired
        placeholder, only so they render: it is never executable and adds nothing to
        the authority snapshot or ``available_tools``."""
        if not isinstance(committed, bool):
            raise TypeError(f"history(committed=...) needs a bool, got {committed!r}")
        self._history = tuple(messages)
        self._history_committed = committed
        return self

    def tool(self, tool: AgentTool) -> AgentSessionBuilder:
        self._tools.append(tool)
        return self

    def tools(self, tools: Iterable[AgentTool]) -> AgentSessionBuilder:
        self._tools.extend(tools)
        return self

    def approval_policy(self, policy: ApprovalPolicy) -> AgentSessionBuilder:
        self._approval = policy
        return self

    def hook(self, hook: Hook) -> AgentSessionBuilder:
        """Add a lifecycle hook; hooks run in the order added (see :class:`Hook`).
        Raises TypeError for anything but a :class:`Hook`."""
        if not isinstance(hook, Hook):
            raise TypeError(f"{hook!r} is not a Hook (subclass emelex.agent.Hook)")
        self._hooks.append(hook)
        return self

    def hooks(self, hooks: Iterable[Hook]) -> AgentSessionBuilder:
        for hook in hooks:
            self.hook(hook)
        return self

    def options(self, options: GenerationOptions) -> AgentSessionBuilder:
        self._options = options
        return self

    def max_rounds(self, n: int) -> AgentSessionBuilder:
        """Most model rounds per turn (default 16). A turn whose model still calls tools
        after its last round raises RoundLimitExceeded instead of asking again."""
        check_max_rounds(n)
        self._max_rounds = n
        return self

    def tool_journal(self, journal: ToolJournal | None) -> AgentSessionBuilder:
        """Await ``journal(turn_id, checkpoint)`` before each tool call may start, where
        ``checkpoint`` is exactly what the turn would commit if the process were lost
        then (see :meth:`TurnCore.checkpoint_if_lost`). A host that stores it durably
        can settle a crashed turn like a cancelled one. If the journal raises, the call
        does not run and the turn fails like any other (checkpoint rule included)."""
        self._journal = journal
        return self

    def progress_journal(self, journal: ProgressJournal | None) -> AgentSessionBuilder:
        """Await ``journal(progress)`` with the turn's :class:`TurnProgress` before each
        approval is asked and before each tool call may start, and after each batch
        (``progress.between_rounds``). A host that stores it durably can settle a lost
        turn (its ``messages`` are the checkpoint) or continue it with
        :meth:`AgentSession.resume`; a record between rounds may wait for the host's
        next write (lost, the batch's calls read as interrupted, never run again). If
        the journal raises, nothing of that call happens and the turn fails like any
        other (checkpoint rule included)."""
        self._progress = journal
        return self

    def max_retries(self, n: int) -> AgentSessionBuilder:
        """Most rounds of a turn in which the model gets corrections (default 6): invalid
        or unparsable arguments, unknown tools, ``RetryWithFeedback``. The next round
        that needs one fails the turn with RetryBudgetExhausted. Each tool has its own
        budget too (its ``max_retries``, default 3)."""
        check_max_retries(n)
        self._max_retries = n
        return self

    def default_max_tokens(self, n: int | None) -> AgentSessionBuilder:
        """Most generated tokens per model call when the options leave ``max_tokens``
        unset (default 1024). ``None`` sends no limit: the backend's own applies."""
        if n is not None and (not isinstance(n, int) or isinstance(n, bool) or n < 1):
            raise ValueError(f"default_max_tokens must be a positive integer or None, got {n!r}")
        self._default_max_tokens = n
        return self

    def session_id(self, session_id: str) -> AgentSessionBuilder:
        self._session_id = session_id
        return self

    def _builtin(self, **changes: Any) -> AgentSessionBuilder:
        self._builtins = attrs.evolve(self._builtins, **changes)
        return self

    def include_file_tools(self, enabled: bool) -> AgentSessionBuilder:
        return self._builtin(file_tools=enabled)

    def include_shell_tool(self, enabled: bool) -> AgentSessionBuilder:
        return self._builtin(shell=enabled)

    def include_web_fetch(self, enabled: bool) -> AgentSessionBuilder:
        return self._builtin(web_fetch=enabled)

    def include_datetime(self, enabled: bool) -> AgentSessionBuilder:
        return self._builtin(datetime=enabled)

    def web_search_provider(self, provider: WebSearchProvider | None) -> AgentSessionBuilder:
        self._web_search_provider = provider
        return self._builtin(web_search=provider is not None)

    def web_allow_private_addresses(self, enabled: bool) -> AgentSessionBuilder:
        """Let web_fetch reach loopback and private networks (metadata endpoints stay
        refused). Off by default."""
        return self._builtin(web_allow_private_addresses=enabled)

    def web_response_bytes(self, limit: int) -> AgentSessionBuilder:
        if limit < 1:
            raise ValueError("web_response_bytes must be positive")
        return self._builtin(web_response_bytes=limit)

    def shell_timeout_seconds(self, seconds: float) -> AgentSessionBuilder:
        if not 0 < seconds <= MAX_SHELL_TIMEOUT_SECONDS:
            raise ValueError(f"shell timeout must be within (0, {MAX_SHELL_TIMEOUT_SECONDS}] s")
        return self._builtin(shell_timeout_seconds=float(seconds))

    def shell_output_bytes(self, limit: int) -> AgentSessionBuilder:
        if limit < 1:
            raise ValueError("shell_output_bytes must be positive")
        return self._builtin(shell_output_bytes=limit)

    def prepared_builtins(
        self, settings: BuiltinSettings, tools: Iterable[AgentTool]
    ) -> AgentSessionBuilder:
        """Register ``tools`` as the session's built-in tools, made by the caller for
        ``settings`` (which the authority snapshot records), instead of the ones the
        builder would make. The ``include_*``/``shell_*``/``web_*`` setters then have no
        effect. Used by the application layer, which decides what a session may do."""
        if not isinstance(settings, BuiltinSettings):
            raise TypeError(f"prepared_builtins needs BuiltinSettings, got {settings!r}")
        self._prepared = _Prepared(settings, tuple(tools))
        return self

    def ceilings(self, ceilings: ResourceCeilings) -> AgentSessionBuilder:
        self._ceilings = ceilings
        return self

    def _ceiling(self, **changes: int) -> AgentSessionBuilder:
        self._ceilings = attrs.evolve(self._ceilings, **changes)
        return self

    def max_messages(self, n: int) -> AgentSessionBuilder:
        return self._ceiling(max_messages=n)

    def max_message_bytes(self, n: int) -> AgentSessionBuilder:
        return self._ceiling(max_message_bytes=n)

    def max_media_bytes(self, n: int) -> AgentSessionBuilder:
        return self._ceiling(max_media_bytes=n)

    def max_schema_bytes(self, n: int) -> AgentSessionBuilder:
        return self._ceiling(max_schema_bytes=n)

    def max_metadata_bytes(self, n: int) -> AgentSessionBuilder:
        return self._ceiling(max_metadata_bytes=n)

    def max_tool_argument_bytes(self, n: int) -> AgentSessionBuilder:
        return self._ceiling(max_tool_argument_bytes=n)

    # -- resolution -----------------------------------------------------------------------
    def _builtin_settings(self) -> BuiltinSettings:
        return self._builtins if self._prepared is None else self._prepared.settings

    def _builtin_tools(self, workspace: Workspace) -> Sequence[AgentTool]:
        if self._prepared is not None:
            return self._prepared.tools
        from emelex.tools.builtin import builtin_tools

        try:
            return builtin_tools(workspace, self._builtins, self._web_search_provider)
        except (TypeError, ValueError) as exc:
            raise InvalidToolDeclaration(str(exc)) from exc

    def _resolve(self) -> Resolved:
        if isinstance(self._workspace, Workspace):
            if self._workspace.closed:
                raise InvalidWorkspace(f"workspace {self._workspace.root!r} is closed")
            return self._resolve_with(self._workspace)  # its owner closes it on failure
        try:
            workspace = Workspace.open(self._workspace)
        except WorkspaceError as exc:
            raise InvalidWorkspace(f"cannot open workspace {self._workspace!r}: {exc}") from exc
        try:
            return self._resolve_with(workspace)
        except BaseException:
            workspace.close()
            raise

    def _resolve_with(self, workspace: Workspace) -> Resolved:
        capabilities = self._client.capabilities
        table = ToolTable(
            [*self._builtin_tools(workspace), *self._tools],
            max_argument_bytes=self._ceilings.max_tool_argument_bytes,
        )
        history = self._history
        # What the harness committed answered every call it holds, whatever it named.
        validate_history(history, None if self._history_committed else table.names)
        refuse_video(history, "resumed history")
        has_system = bool(history) and history[0].role == "system"
        if self._system_prompt is not None:
            if has_system:
                raise ConfigurationConflict(
                    "a system prompt was given and the resumed history already has a system "
                    "message; give one or the other"
                )
            history = (Message("system", self._system_prompt), *history)
            has_system = True
        if has_system and capabilities.system_prompt is False:
            raise CapabilityMissing("the model's chat template drops the system prompt")
        if len(table) and capabilities.tool_declarations is False:
            raise CapabilityMissing("the model's chat template drops tool declarations")
        if has_tool_history(history) and capabilities.tool_history is False:
            raise CapabilityMissing("the model's chat template drops tool calls or results")
        check_options_capabilities(self._options, capabilities)
        strip = capabilities.reasoning_history is False
        if strip:
            history = strip_reasoning(history)
        # Only what every request keeps must fit: earlier turns of a history committed
        # past a ceiling (older sessions) are left out of requests, never refused here.
        check_request(
            measure_messages(history[:1] if has_system else ()),
            sum(table[name].schema_bytes for name in table.names),
            self._ceilings,
        )
        tools = tuple(
            ToolAuthority(
                name=entry.definition.name,
                description=entry.definition.description,
                # As declared: the clamped schema the model sees follows from it and the
                # ceilings, so a stored snapshot stays valid.
                parameters=json.dumps(
                    entry.declared_parameters, sort_keys=True, separators=(",", ":")
                ),
                cancellation_policy=entry.policy.value,
                identity=entry.identity,
            )
            for entry in sorted((table[name] for name in table.names), key=_by_name)
        )
        snapshot = AgentAuthoritySnapshot(
            workspace=WorkspaceIdentity(workspace.root, workspace.device, workspace.inode),
            tools=tools,
            builtins=self._builtin_settings(),
            ceilings=self._ceilings,
        )
        return Resolved(workspace, table, history, strip, snapshot)

    def authority_snapshot(self) -> AgentAuthoritySnapshot:
        """Resolve exactly as :meth:`build` does and return the authority snapshot.

        Does not consume the builder; raises the same errors ``build`` would.
        """
        resolved = self._resolve()
        if not isinstance(self._workspace, Workspace):
            resolved.workspace.close()
        return resolved.snapshot

    def build(self) -> AgentSession:
        """Validate everything and return the session. Raises :class:`AgentError`
        subclasses (InvalidWorkspace, InvalidToolDeclaration, InvalidHistory,
        ConfigurationConflict, CapabilityMissing, CeilingExceeded)."""
        resolved = self._resolve()
        parts = SessionParts(
            session_id=self._session_id or new_id(),
            client=self._client,
            resolved=resolved,
            approval=self._approval,
            options=self._options,
            ceilings=self._ceilings,
            max_rounds=self._max_rounds,
            max_retries=self._max_retries,
            journal=self._journal,
            progress=self._progress,
            hooks=tuple(self._hooks),
            default_max_tokens=self._default_max_tokens,
        )
        try:
            return self._session_factory(parts)
        except BaseException:
            if not isinstance(self._workspace, Workspace):
                resolved.workspace.close()
            raise


def _by_name(entry: Any) -> str:
    return str(entry.definition.name)


__all__ = ["DEFAULT_MAX_TOKENS", "AgentError", "AgentSessionBuilder"]
