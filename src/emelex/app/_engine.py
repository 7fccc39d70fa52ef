"""Engine and Session: start independent sessions of an :class:`Agent`."""

from __future__ import annotations

import importlib.util
import pathlib
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar, final, overload

import attrs
import trio

from emelex._facade import NoPublicConstructor
from emelex._ids import new_id
from emelex.agent import AgentSession, AgentTurn, DenyAll, SessionClosed
from emelex.app._agent import Agent, tool_gated
from emelex.app._assembly import Assembly
from emelex.app._budget import (
    BUDGET_SECTION,
    BudgetedModel,
    BudgetMeter,
    BudgetUsage,
    check_budget_tool,
)
from emelex.app._builtins import builtin_names, make_builtins
from emelex.app._capabilities import (
    CapabilityPackage,
    CapabilityRef,
    CapabilityResolver,
    as_package,
)
from emelex.app._errors import (
    ApproverRequired,
    DuplicateCapability,
    IntegrationMissing,
    SessionNotStarted,
    UnresolvedCapability,
)
from emelex.app._events import DEFAULT_EVENT_BUFFER, EventHub, EventStream, GatedModel, GatedTool
from emelex.app._harness import Harness, skills_section
from emelex.app._inspect import SessionContext, composition, next_request
from emelex.app._integration import Contribution, Integration, IntegrationRequest
from emelex.app._output import OutputSpec, TypedTurn, check_retries, run_typed_turn
from emelex.app._policy import WORKSPACE_VIEW, HiddenPaths
from emelex.app._private_workspace import (
    make_private_workspace as _make_private_workspace,
)
from emelex.app._private_workspace import open_workspace as _open_workspace
from emelex.app._private_workspace import remove_tree as _remove_tree
from emelex.app._private_workspace import undo_start
from emelex.app._skill import load_skill_tool
from emelex.app._subagent import TranscriptBook, bind_subagents
from emelex.app._tasks import (
    TASKS_SECTION,
    ReadTasksTool,
    TaskBoard,
    TaskList,
    UpdateTasksTool,
    tasks_from_history,
)
from emelex.model import AgentModel, Client, GenerationOptions, Message
from emelex.runtime import AgentCancellation, run_in_worker
from emelex.tools.workspace import Workspace

if TYPE_CHECKING:
    from emelex.agent import ProgressJournal, ToolJournal, TurnProgress
    from emelex.app._stream import TextStream

T = TypeVar("T")


class SessionStarter:
    """Configures one session of an agent: ``engine.create(agent).harness(h).start()``."""

    def __init__(self, engine: Engine, agent: Agent) -> None:
        if not isinstance(agent, Agent):
            raise TypeError(f"Engine.create needs an Agent, got {type(agent).__name__}")
        self._engine = engine
        self._agent = agent
        self._harness = Harness.base()
        self._session_id: str | None = None
        self._buffer = engine.event_buffer
        self._used = False
        self._contributions: list[tuple[str, Contribution]] = []
        self._history: tuple[Message, ...] = ()
        self._committed = False
        self._journal: ToolJournal | None = None
        self._progress: ProgressJournal | None = None

    def harness(self, harness: Harness) -> SessionStarter:
        if not isinstance(harness, Harness):
            raise TypeError(f"harness(...) needs a Harness, got {type(harness).__name__}")
        self._harness = harness
        return self

    def session_id(self, session_id: str) -> SessionStarter:
        self._session_id = session_id
        return self

    def history(self, messages: Iterable[Message], *, committed: bool = False) -> SessionStarter:
        """Resume or fork: continue from committed ``messages`` (e.g. another session's
        :attr:`Session.history`), task list included. A leading system message is
        replaced by the one this agent and harness assemble now. The messages are
        checked at ``start()`` (``InvalidHistory`` when they call a tool this session
        does not offer, ...); usage budgets count from zero in the new session.

        ``committed=True``: the messages are history emelex committed (read back from
        its own store), so calls of tools this session lacks are kept as they were
        answered (see :meth:`emelex.agent.AgentSessionBuilder.history`)."""
        items = tuple(messages)
        for item in items:
            if not isinstance(item, Message):
                raise TypeError(f"history(...) needs Messages, got {type(item).__name__}")
        if not isinstance(committed, bool):
            raise TypeError(f"history(committed=...) needs a bool, got {committed!r}")
        self._history = items
        self._committed = committed
        return self

    def tool_journal(self, journal: ToolJournal | None) -> SessionStarter:
        """Await ``journal(turn_id, checkpoint)`` before each tool call may start (see
        :meth:`emelex.agent.AgentSessionBuilder.tool_journal`): how the Host settles a
        turn of a crashed process by the harness rules."""
        self._journal = journal
        return self

    def progress_journal(self, journal: ProgressJournal | None) -> SessionStarter:
        """Await ``journal(progress)`` before each approval and tool start (see
        :meth:`emelex.agent.AgentSessionBuilder.progress_journal`): how the Host
        continues a turn of a lost process with :meth:`Session.resume_and_wait`."""
        self._progress = journal
        return self

    def event_buffer(self, capacity: int) -> SessionStarter:
        """Capacity of each :meth:`Session.events` channel (default 256)."""
        EventHub(capacity)  # validates
        self._buffer = capacity
        return self

    async def inspect(self, text: str | None = None) -> SessionContext:
        """Start a transient session, inspect its first model call, close it."""
        session = await self._start()
        try:
            return await session.inspect(text)
        finally:
            await session.aclose()

    async def start(self) -> Session:
        """Assemble and validate everything and return the running session. Raises
        :class:`~emelex.app.AppError` subclasses (and :class:`~emelex.agent.AgentError`
        ones from the harness's own checks)."""
        if self._used:
            raise SessionNotStarted("this starter already started its session")
        self._used = True
        return await self._start()

    async def _start(self) -> Session:
        agent, harness = self._agent, self._harness
        session_id = self._session_id or new_id()
        hub = EventHub(self._buffer)
        temporary: str | None = None
        workspace: Workspace | None = None
        assembly = Assembly()
        try:
            if agent.workspace is not None:
                root = str(agent.workspace)
            else:
                temporary = await run_in_worker(
                    _make_private_workspace, agent.name, agent.files, name="seed workspace"
                )
                root = temporary
            await self._integrate(agent, session_id, pathlib.Path(root), assembly)
            builtins = builtin_names(agent, harness)
            # The session's one workspace: its built-in tools are bound to it and the
            # AgentSession takes it over (closing it when the session closes). With file
            # tools or the shell the model sees the root as /workspace, and hidden paths
            # never leave the workspace layer.
            if builtins & {"files", "shell"}:
                workspace = _open_workspace(
                    root, hidden=HiddenPaths(agent.workspace_policy.hidden), view=WORKSPACE_VIEW
                )
            else:
                workspace = _open_workspace(root)
            board = TaskBoard() if harness.tasks else None
            meter: BudgetMeter | None = None
            if harness.context_budget is not None or harness.usage_budget is not None:
                meter = BudgetMeter(harness.usage_budget, harness.context_budget)
            self._assemble(assembly, builtins, workspace, board, meter)
            book = bind_subagents(assembly, self._engine, agent, root, meter)
            model: AgentModel = GatedModel(agent.client.model, hub)
            if meter is not None:
                # A refused call never reaches the model, and the model (and inspect())
                # gets the fitted request. The harness fits the request under its own
                # resource ceilings before this.
                model = BudgetedModel(model, meter)
            client = Client(model)
            history = self._history
            if history and history[0].role == "system":
                history = history[1:]
            builder = (
                AgentSession.builder(client, workspace)
                .prepared_builtins(
                    assembly.settings, (GatedTool(tool, hub) for tool in assembly.builtins)
                )
                .system_prompt("\n\n".join(s.strip() for s in assembly.prompt if s.strip()))
                .approval_policy(agent.approver if agent.approver is not None else DenyAll())
                .options(agent.options)
                .session_id(session_id)
                .tools(GatedTool(tool, hub) for tool in assembly.tools)
                .history(history, committed=self._committed)
                .tool_journal(self._journal)
                .progress_journal(self._progress)
                .max_retries(agent.max_retries)
                .hooks(agent.hooks)
            )
            agent_session = builder.build()
            if board is not None:
                board.bind(lambda: agent_session.history)
        except BaseException:
            await undo_start(workspace, assembly.closers, temporary)
            raise
        session = Session._create(
            engine=self._engine,
            agent=agent,
            harness=harness,
            agent_session=agent_session,
            hub=hub,
            root=pathlib.Path(root),
            temporary=temporary,
            closers=assembly.closers,
            warnings=[w for _, c in self._contributions for w in c.warnings],
            meter=meter,
            transcripts=book,
        )
        self._engine._sessions.append(session)
        return session

    async def _integrate(
        self, agent: Agent, session_id: str, root: pathlib.Path, assembly: Assembly
    ) -> None:
        request = IntegrationRequest(agent, session_id, root)
        contributions: list[tuple[str, Contribution]] = []
        for integration in self._engine.integrations:
            contribution = await integration.open(request)
            if contribution.close is not None:
                assembly.closers.append(contribution.close)
            contributions.append((type(integration).__name__, contribution))
            assembly.handled |= contribution.handles
        for fallback in self._defaults(agent, assembly.handled):
            contribution = await fallback.open(request)
            if contribution.close is not None:
                assembly.closers.append(contribution.close)
            contributions.append((type(fallback).__name__, contribution))
            assembly.handled |= contribution.handles
        self._contributions = contributions

    def _defaults(self, agent: Agent, handled: set[str]) -> list[Integration]:
        """The built-in integrations for the parts no engine integration took care of:
        MCP servers (when the ``mcp`` SDK is installed) and plugins."""
        defaults: list[Integration] = []
        if agent.mcp_servers and "mcp_servers" not in handled:
            from emelex.tools.mcp import McpServer

            if not all(isinstance(server, McpServer) for server in agent.mcp_servers):
                raise IntegrationMissing(
                    "the agent has MCP servers that are not McpServer configurations and no "
                    "engine integration handles them"
                )
            if importlib.util.find_spec("mcp") is None:
                raise IntegrationMissing(
                    "the agent has MCP servers but the 'mcp' SDK is not installed: "
                    "install emelex[mcp] (or emelex[mcp-stdio] for stdio servers)"
                )
            from emelex.app._mcp import McpIntegration

            defaults.append(McpIntegration(allow_stdio=self._engine.allow_stdio_servers))
        if agent.plugins and "plugins" not in handled:
            from emelex.app._plugins import PluginIntegration

            defaults.append(PluginIntegration())
        return defaults

    def _assemble(
        self,
        assembly: Assembly,
        builtins: frozenset[str],
        ws: Workspace,
        board: TaskBoard | None,
        meter: BudgetMeter | None,
    ) -> None:
        agent, harness = self._agent, self._harness
        assembly.prompt.append(agent.instructions)
        assembly.prompt.extend(harness.prompt_sections)
        made = make_builtins(agent, harness, builtins, ws)
        assembly.settings = made.settings
        for tool, source in made.tools:
            assembly.add(tool, source, builtin=True)
        assembly.prompt.extend(made.prompt)
        if "skills" in builtins:
            assembly.add(load_skill_tool(agent.skills), "the skills")
            assembly.prompt.append(skills_section(agent.skills))
        if board is not None:
            assembly.add(UpdateTasksTool(board), "the task tools")
            assembly.add(ReadTasksTool(board), "the task tools")
            assembly.prompt.append(TASKS_SECTION)
        if meter is not None and harness.usage_budget is not None:
            assembly.add(check_budget_tool(meter), "the budget tool")
            assembly.prompt.append(BUDGET_SECTION)
        for capability in agent.capabilities:
            if isinstance(capability, CapabilityPackage):
                self._add_package(assembly, capability)
        for capability in agent.capabilities:
            if isinstance(capability, CapabilityRef):
                raise UnresolvedCapability(  # resolved in _resolve_references
                    f"capability reference {capability.id!r} was not resolved"
                )
        for tool in agent.tools:
            assembly.add(tool, "the agent's tools")
        for name, contribution in self._contributions:
            for section in contribution.prompt_sections:
                assembly.prompt.append(section)
            for tool in contribution.tools:
                assembly.add(tool, f"integration {name}")
        if agent.approver is None:
            gated = sorted(
                tool.definition.name
                for tool in assembly.all_tools
                if tool_gated(tool) or tool.definition.name in ("shell", "write_file", "edit_file")
            )
            if gated:
                raise ApproverRequired(
                    f"tools {', '.join(gated)} ask for approval but the agent has no approver"
                )

    @staticmethod
    def _add_package(assembly: Assembly, package: CapabilityPackage) -> None:
        if package.prompt:
            assembly.prompt.append(package.prompt)
        for tool in package.tools:
            assembly.add(tool, f"capability {package.id!r}")


@final
class Session(trio.abc.AsyncResource, metaclass=NoPublicConstructor):
    """One running session of an agent. Independent of every other session.

    ``await send_and_wait(text)`` runs one turn. :meth:`events` subscribes to events.
    :meth:`inspect` shows the next model call. Close it (``async with session:`` or
    :meth:`close`) to release its workspace; a private workspace is deleted then.
    """

    def __init__(
        self,
        *,
        engine: Engine,
        agent: Agent,
        harness: Harness,
        agent_session: AgentSession,
        hub: EventHub,
        root: pathlib.Path,
        temporary: str | None,
        closers: Sequence[Callable[[], Awaitable[None]]],
        warnings: Sequence[str] = (),
        meter: BudgetMeter | None = None,
        transcripts: TranscriptBook | None = None,
    ) -> None:
        #: Transcripts of this session's sub-agent calls, by the parent's call id.
        self.transcripts = transcripts if transcripts is not None else TranscriptBook()
        self._engine = engine
        self.agent = agent
        self.harness = harness
        self._session = agent_session
        self._hub = hub
        self.workspace_root = root
        self._temporary = temporary
        self._closers = tuple(closers)
        self.warnings: tuple[str, ...] = tuple(warnings)
        self._meter = meter
        self._closed = False

    @property
    def session_id(self) -> str:
        return self._session.session_id

    @property
    def agent_session(self) -> AgentSession:
        """The underlying harness session (history, authority, enabled tools)."""
        return self._session

    @property
    def history(self) -> tuple[Message, ...]:
        return self._session.history

    @property
    def tools(self) -> tuple[str, ...]:
        """Names of the tools the session offers, in declaration order."""
        return self._session.available_tools

    @property
    def tasks(self) -> TaskList:
        """The task list committed history establishes (the last successful
        ``update_tasks`` call); empty when there is none. An update made by a running
        turn shows once the turn commits (or checkpoints)."""
        return tasks_from_history(self._session.history)

    @property
    def usage(self) -> BudgetUsage | None:
        """What this session spent (tokens, model calls) against its budgets, or None
        when its harness has no budget (only budgeted sessions count)."""
        return None if self._meter is None else self._meter.snapshot()

    @property
    def private_workspace(self) -> bool:
        """True when the workspace is a temporary directory deleted on close."""
        return self._temporary is not None

    @property
    def closed(self) -> bool:
        return self._closed

    @overload
    async def send_and_wait(
        self,
        text: str,
        *,
        cancellation: AgentCancellation | None = None,
        options: GenerationOptions | None = None,
        output_type: type[T],
        output_retries: int | None = None,
    ) -> TypedTurn[T]: ...

    @overload
    async def send_and_wait(
        self,
        text: str,
        *,
        cancellation: AgentCancellation | None = None,
        options: GenerationOptions | None = None,
        output_type: Any = None,
        output_retries: int | None = None,
    ) -> AgentTurn: ...

    async def send_and_wait(
        self,
        text: str,
        *,
        cancellation: AgentCancellation | None = None,
        options: GenerationOptions | None = None,
        output_type: Any = None,
        output_retries: int | None = None,
    ) -> AgentTurn:
        """Run one turn and return it once consumers that keep reading have its events
        in their channels (a stalled stream is dropped instead: see :meth:`events`). Raises
        like :meth:`AgentSession.run`, and with the harness's budgets
        :class:`ContextBudgetExceeded` or :class:`UsageBudgetExhausted` (each with
        ``rolled_back`` and ``checkpoint``, like every turn error).

        With ``output_type`` (or the agent's), the answer is converted to that type and
        a :class:`TypedTurn` is returned (``turn.output``); an answer that stays invalid
        after ``output_retries`` retry turns (default: the agent's, else 1) raises
        :class:`~emelex.agent.OutputValidationError`. See
        ``docs/app/structured-output.md``."""
        if self._closed:
            raise SessionClosed("the session is closed")
        wanted = output_type if output_type is not None else self.agent.output_type
        if wanted is None:
            return await self._send(text, cancellation, options)
        spec = OutputSpec.of(wanted)
        retries = check_retries(
            output_retries if output_retries is not None else self.agent.output_retries
        )

        async def run(request: str, turn_options: GenerationOptions) -> AgentTurn:
            return await self._send(request, cancellation, turn_options)

        return await run_typed_turn(
            run,
            text,
            spec,
            options=options,
            tools_enabled=bool(self._session.enabled_tools),
            has_tools=bool(self._session.available_tools),
            retries=retries,
        )

    async def _send(
        self,
        text: str,
        cancellation: AgentCancellation | None,
        options: GenerationOptions | None,
    ) -> AgentTurn:
        return await self._settled(
            self._session.run(
                text, options=options, cancellation=cancellation, on_event=self._hub.emit
            )
        )

    async def resume_and_wait(
        self, progress: TurnProgress, *, cancellation: AgentCancellation | None = None
    ) -> AgentTurn:
        """Continue a turn a lost process wrote down (see :meth:`AgentSession.resume`)
        and return it like :meth:`send_and_wait` (its events go to :meth:`events`)."""
        if self._closed:
            raise SessionClosed("the session is closed")
        return await self._settled(
            self._session.resume(progress, cancellation=cancellation, on_event=self._hub.emit)
        )

    async def _settled(self, turn: Awaitable[AgentTurn]) -> AgentTurn:
        """``turn``'s result once its events are delivered (or its error, likewise)."""
        try:
            result = await turn
        except Exception:
            await self._hub.settle()
            raise
        await self._hub.settle()
        return result

    def stream_text(
        self,
        text: str,
        *,
        cancellation: AgentCancellation | None = None,
        options: GenerationOptions | None = None,
    ) -> TextStream:
        """Run one turn and stream its answer text::

            async with session.stream_text("Tell me a story.") as texts:
                async for text in texts:
                    print(text, end="")
            turn = texts.turn

        The turn starts when the ``async with`` block is entered. Leaving the block
        before the answer is complete (``break``, an exception, a cancelled scope)
        cancels the turn and waits for it to end (its tools follow their cancellation
        policy; history is rolled back or checkpointed), so nothing is left running. A
        turn that fails raises its error from the iteration. See :class:`TextStream`."""
        if self._closed:
            raise SessionClosed("the session is closed")
        from emelex.app._stream import TextStream

        return TextStream._create(self, text, cancellation, options)

    def events(self) -> EventStream:
        """Subscribe to this session's events from now on.

        The stream is bounded (``event_buffer``, default 256, plus an overflow of the
        same size). The turn yields to a consumer that keeps reading (back-pressure)
        but never waits for one that stops: when its channel and overflow are full,
        the stream is dropped and its consumer gets :class:`EventsLagged` after the
        events it holds. Consume concurrently with :meth:`send_and_wait` (another
        task). Closing the stream unsubscribes; the stream ends when the session
        closes.
        """
        if self._closed:
            raise SessionClosed("the session is closed")
        return self._hub.subscribe()

    async def inspect(self, text: str | None = None) -> SessionContext:
        """The messages, tools and options of the next model call, assembled by the
        harness's own request path and fitted to the harness's context budget, if any.
        With ``text``, the request the turn ``send_and_wait(text)`` would send first;
        without, its messages stop before the user message. Raises ``CeilingExceeded``
        and :class:`ContextBudgetExceeded` as that model call would (the usage budget
        is not checked: see :attr:`usage`)."""
        if self._closed:
            raise SessionClosed("the session is closed")
        await trio.lowlevel.checkpoint()
        request = next_request(self._session, text)
        if self._meter is not None:
            # The filter the model call applies, on the full first request (its user
            # message is protected), so what is shown is what would be sent.
            request = self._meter.fit(request)
        messages = request.messages if text is not None else request.messages[:-1]
        parts = composition(self.agent)
        return SessionContext(messages, request.tools, request.options, self.warnings, **parts)

    async def aclose(self) -> None:
        """Close the session (idempotent): end event streams, release the workspace,
        close integrations, delete a private workspace. Raises TurnInProgress while a
        turn runs."""
        if self._closed:
            return
        self._session.close()
        self._closed = True
        self._hub.close()
        with trio.CancelScope(shield=True):
            for close in reversed(self._closers):
                await close()
            if self._temporary is not None:
                await run_in_worker(_remove_tree, self._temporary, name="remove workspace")
        self._engine._forget(self)

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<Session {self.session_id} of {self.agent.name!r} ({self.harness.name}, {state})>"


class Engine(trio.abc.AsyncResource):
    """Starts independent sessions of agents: ``await engine.create(agent).start()``.

    ``integrations`` contribute tools and prompt text to every session (the extension
    point for MCP servers and plugins). Parts of an agent that none of them handles get
    the built-in integrations: :class:`McpIntegration` for MCP servers (needs the ``mcp``
    SDK; stdio servers only with ``allow_stdio_servers=True``) and
    :class:`PluginIntegration` for plugins. ``capability_resolver`` turns
    :class:`CapabilityRef` capabilities into packages when a session starts.
    ``async with Engine() as engine`` closes the sessions still open at exit.
    """

    def __init__(
        self,
        *,
        integrations: Sequence[Integration] = (),
        capability_resolver: CapabilityResolver | None = None,
        event_buffer: int = DEFAULT_EVENT_BUFFER,
        allow_stdio_servers: bool = False,
    ) -> None:
        EventHub(event_buffer)  # validates
        if not isinstance(allow_stdio_servers, bool):
            raise TypeError("allow_stdio_servers must be True or False")
        self.allow_stdio_servers = allow_stdio_servers
        for integration in integrations:
            if not isinstance(integration, Integration):
                raise TypeError(f"{integration!r} has no async open(request) method")
        self.integrations: tuple[Integration, ...] = tuple(integrations)
        self.capability_resolver = capability_resolver
        self.event_buffer = event_buffer
        self._sessions: list[Session] = []

    def create(self, agent: Agent) -> SessionStarter:
        if any(isinstance(c, CapabilityRef) for c in getattr(agent, "capabilities", ())):
            return _ReferenceStarter(self, agent)
        return SessionStarter(self, agent)

    @property
    def sessions(self) -> tuple[Session, ...]:
        """Sessions started by this engine and not yet closed."""
        return tuple(self._sessions)

    def _forget(self, session: Session) -> None:
        if session in self._sessions:
            self._sessions.remove(session)

    async def aclose(self) -> None:
        """Close every open session of this engine."""
        for session in reversed(self._sessions[:]):
            await session.aclose()


class _ReferenceStarter(SessionStarter):
    """A starter for an agent with capability references: resolves them through the
    engine's resolver, then starts the agent with the resolved packages in place."""

    async def _start(self) -> Session:
        resolver = self._engine.capability_resolver
        resolved: list[Any] = []
        for capability in self._agent.capabilities:
            if not isinstance(capability, CapabilityRef):
                resolved.append(capability)
                continue
            if resolver is None:
                raise UnresolvedCapability(
                    f"capability reference {capability.id!r} needs an engine capability_resolver"
                )
            try:
                value = await resolver(capability)
            except UnresolvedCapability:
                raise
            except Exception as exc:
                raise UnresolvedCapability(
                    f"capability reference {capability.id!r} could not be resolved: {exc}"
                ) from exc
            if value is None:
                raise UnresolvedCapability(f"capability reference {capability.id!r} is unknown")
            package = as_package(value, f"capability reference {capability.id!r}")
            if any(getattr(other, "id", None) == package.id for other in resolved) or any(
                c.id == package.id for c in self._agent.capabilities
            ):
                raise DuplicateCapability(
                    f"capability reference {capability.id!r} resolved to {package.id!r}, "
                    "which the agent already has"
                )
            resolved.append(package)
        original = self._agent
        self._agent = attrs.evolve(original, capabilities=tuple(resolved))
        try:
            return await super()._start()
        finally:
            self._agent = original


__all__ = [
    "Contribution",
    "Engine",
    "Integration",
    "IntegrationRequest",
    "Session",
    "SessionStarter",
]
