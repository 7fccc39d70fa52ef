"""AgentSession: committed history, tool authority, one turn at a time. The turn
itself runs in :mod:`emelex.agent._turn`."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, final

import attrs

from emelex._facade import NoPublicConstructor
from emelex._ids import new_id
from emelex.agent._authority import AgentAuthoritySnapshot
from emelex.agent._builder import AgentSessionBuilder, SessionParts
from emelex.agent._ceilings import (
    RequestSize,
    ResourceCeilings,
    measure_message,
    measure_messages,
)
from emelex.agent._errors import (
    InvalidTurnProgress,
    ProtocolViolation,
    SessionClosed,
    ToolUnavailable,
    TurnInProgress,
    UnsupportedContent,
)
from emelex.agent._history import referenced_tools
from emelex.agent._options import check_options_capabilities
from emelex.agent._progress import ResumePoint, TurnProgress, resume_point
from emelex.agent._tool_table import ToolTable
from emelex.agent._turn import EventConsumer, TurnDriver, turn_failure
from emelex.agent._turn_core import AgentTurn, PlannedCall, TurnCore
from emelex.agent._turn_rules import check_max_retries, check_max_rounds
from emelex.agent._video import VIDEO_REFUSED
from emelex.model import (
    AudioPart,
    Client,
    GenerationOptions,
    GenerationRequest,
    ImagePart,
    Message,
    Part,
    TextPart,
    VideoPart,
)
from emelex.runtime import AgentCancellation, Supervisor
from emelex.tools.workspace import Workspace


def _user_message(content: str | Sequence[Part | str]) -> Message:
    parts: list[Part] = []
    for part in [content] if isinstance(content, str) else content:
        if isinstance(part, str):
            parts.append(TextPart(part))
        elif isinstance(part, VideoPart):
            raise UnsupportedContent(f"video input is refused: {VIDEO_REFUSED}")
        elif isinstance(part, TextPart | ImagePart | AudioPart):
            parts.append(part)
        else:
            raise UnsupportedContent(f"unsupported content part {type(part).__name__}")
    return Message("user", parts)


@final
class AgentSession(metaclass=NoPublicConstructor):
    """One conversation with committed history, bounded authority and one turn at a time.

    Build it with :meth:`AgentSession.builder`. :meth:`run` is Trio-native: they
    checkpoint, run the turn as actors of :meth:`Supervisor.current`, deliver events in
    order to ``on_event`` (a plain callable) and return the committed :class:`AgentTurn`.

    Cancellation: firing ``cancellation`` raises :class:`TurnCancelled`; cancelling the
    caller's Trio scope has the same effect on the turn and then propagates
    ``trio.Cancelled``. Either way tools follow their cancellation policy and history
    is rolled back (no tool may have run) or checkpointed (one may have), before the
    call returns. Close the session (``with session:`` or :meth:`close`) to release
    its workspace descriptor.
    """

    def __init__(self, parts: SessionParts) -> None:
        """Use :meth:`builder`: it validates what a session is made of."""
        resolved = parts.resolved
        self.session_id = parts.session_id
        self._client = parts.client
        self._workspace = resolved.workspace
        self._table = resolved.table
        self._history = resolved.history
        self._history_size = measure_messages(self._history)
        self._history_costs: list[RequestSize] | None = None  # measured when first needed
        self._history_tools = frozenset(referenced_tools(self._history))
        self._strip = resolved.strip_reasoning
        self._snapshot = resolved.snapshot
        self._enabled = frozenset(self._table.names)
        self._options = parts.options
        self._ceilings = parts.ceilings
        check_max_rounds(parts.max_rounds)
        self._max_rounds = parts.max_rounds
        check_max_retries(parts.max_retries)
        self._max_retries = parts.max_retries
        self.default_max_tokens = parts.default_max_tokens
        self._driver = TurnDriver(
            session_id=parts.session_id,
            client=parts.client,
            approval=parts.approval,
            workspace_root=resolved.workspace.root,
            journal=parts.journal,
            hooks=parts.hooks,
            progress=parts.progress,
        )
        self._busy = False
        self._closed = False
        self.turns_committed = 0

    @staticmethod
    def builder(client: Client | Any, workspace: Any) -> AgentSessionBuilder:
        """A builder for a session on ``client`` in ``workspace`` (a directory, or an
        open :class:`~emelex.tools.workspace.Workspace` the session takes over)."""
        return AgentSessionBuilder(client, workspace, session_factory=AgentSession._create)

    # -- state ----------------------------------------------------------------------------
    @property
    def authority_snapshot(self) -> AgentAuthoritySnapshot:
        return self._snapshot

    @property
    def history(self) -> tuple[Message, ...]:
        """Every committed message, in order (reasoning stripped when the model's
        template is proven not to keep it)."""
        return self._history

    @property
    def available_tools(self) -> tuple[str, ...]:
        """The immutable tool-authority ceiling, in declaration order."""
        return self._table.names

    @property
    def enabled_tools(self) -> tuple[str, ...]:
        return tuple(name for name in self._table.names if name in self._enabled)

    @property
    def max_rounds(self) -> int:
        """Most model rounds per turn; settable between turns (a positive int)."""
        return self._max_rounds

    @max_rounds.setter
    def max_rounds(self, value: int) -> None:
        check_max_rounds(value)
        self._max_rounds = value

    @property
    def max_retries(self) -> int:
        """Most rounds of a turn in which the model gets corrections (invalid arguments,
        ``RetryWithFeedback``, ...); settable between turns (a non-negative int)."""
        return self._max_retries

    @max_retries.setter
    def max_retries(self, value: int) -> None:
        check_max_retries(value)
        self._max_retries = value

    @property
    def workspace(self) -> Workspace:
        return self._workspace

    # -- what a turn is made of (for drivers outside this process: emelex.temporal) ------
    @property
    def client(self) -> Client:
        return self._client

    @property
    def tool_table(self) -> ToolTable:
        """The registered tools (the authority ceiling) with their validators."""
        return self._table

    @property
    def ceilings(self) -> ResourceCeilings:
        return self._ceilings

    @property
    def strip_reasoning(self) -> bool:
        """True when the model's template is proven not to keep reasoning in history."""
        return self._strip

    def turn_options(self, options: GenerationOptions | None = None) -> GenerationOptions:
        """The options a turn runs with: the session's, overlaid with ``options``, and the
        default ``max_tokens`` when neither sets one. Raises CapabilityMissing."""
        return self._merged_options(options)

    def set_enabled_tools(self, names: Iterable[str]) -> None:
        """Replace the enabled subset atomically. Raises :class:`ToolUnavailable` (and
        changes nothing) if a name is outside :attr:`available_tools`."""
        wanted = frozenset(names)
        unknown = sorted(wanted.difference(self._table.names))
        if unknown:
            raise ToolUnavailable(f"not in this session's tool authority: {', '.join(unknown)}")
        self._enabled = wanted

    def close(self) -> None:
        """Release the workspace descriptor; later turns raise SessionClosed."""
        if self._busy:
            raise TurnInProgress("cannot close a session while a turn runs")
        self._closed = True
        self._workspace.close()

    def __enter__(self) -> AgentSession:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- public turn API ------------------------------------------------------------------
    async def run(
        self,
        input: str | Sequence[Part | str],
        *,
        options: GenerationOptions | None = None,
        cancellation: AgentCancellation | None = None,
        on_event: EventConsumer | None = None,
    ) -> AgentTurn:
        """Run one turn for ``input`` (text, or a sequence of parts and strings) and
        return the committed :class:`AgentTurn`.

        ``options`` overlay the session's generation options for this turn only. Every
        Python consumer may raise: if ``on_event`` does, the model job is cancelled, the
        turn is resolved (rolled back or checkpointed) and :class:`EventConsumerError` is
        raised with the consumer's exception as ``__cause__``."""
        return await self._run(_user_message(input), options, cancellation, on_event)

    async def resume(
        self,
        progress: TurnProgress,
        *,
        options: GenerationOptions | None = None,
        cancellation: AgentCancellation | None = None,
        on_event: EventConsumer | None = None,
    ) -> AgentTurn:
        """Continue a turn another process wrote down (see
        :meth:`AgentSessionBuilder.progress_journal`) on this session's history, which
        must be the one the turn started on. The turn keeps its id; results it holds are
        kept, a call that may have started keeps its "interrupted" result (never a
        second run), its open calls are resolved now under today's tools and policies,
        then it goes on with the next model round. Raises :class:`InvalidTurnProgress`
        before anything runs, otherwise like :meth:`run`."""
        point = resume_point(progress)
        return await self._run(point.user, options, cancellation, on_event, (progress, point))

    def next_request(
        self, text: str | None = None, options: GenerationOptions | None = None
    ) -> GenerationRequest:
        """The request the next turn's first model round would send for ``text``: the same
        code path as execution (history, advertised tools, stripping, merged options,
        ceilings), without running anything. Raises CeilingExceeded/CapabilityMissing."""
        core = TurnCore(
            turn_id=new_id(),
            user_message=_user_message(text if text is not None else ""),
            history=self._history,
            history_size=self._history_size,
            tools=self._table,
            enabled=self._enabled,
            history_tools=self._history_tools,
            strip_reasoning=self._strip,
            options=self._merged_options(options),
            ceilings=self._ceilings,
            max_rounds=self.max_rounds,
            history_costs=self._costs,
            max_retries=self._max_retries,
        )
        request, _events = core.begin_round()
        return request

    # -- the turn -------------------------------------------------------------------------
    def _costs(self) -> list[RequestSize]:
        """Each committed message's size, measured once (only a history over a ceiling
        needs them, to fit requests)."""
        if self._history_costs is None:
            self._history_costs = [measure_message(message) for message in self._history]
        return self._history_costs

    def _merged_options(self, options: GenerationOptions | None) -> GenerationOptions:
        merged = self._options if options is None else self._options.overlay(options)
        if merged.max_tokens is None and self.default_max_tokens is not None:
            # An unbounded call on a model that never stops would run to the context end.
            merged = attrs.evolve(merged, max_tokens=self.default_max_tokens)
        check_options_capabilities(merged, self._client.capabilities)
        return merged

    async def _run(
        self,
        user_message: Message,
        options: GenerationOptions | None,
        cancellation: AgentCancellation | None,
        on_event: EventConsumer | None,
        resuming: tuple[TurnProgress, ResumePoint] | None = None,
    ) -> AgentTurn:
        if self._closed:
            raise SessionClosed("the session is closed")
        if self._busy:
            raise TurnInProgress("a turn is already running in this session")
        merged = self._merged_options(options)
        cancellation = cancellation if cancellation is not None else AgentCancellation()
        core = TurnCore(
            turn_id=new_id() if resuming is None else resuming[0].turn_id,
            user_message=user_message,
            history=self._history,
            history_size=self._history_size,
            tools=self._table,
            enabled=self._enabled,
            history_tools=self._history_tools,
            strip_reasoning=self._strip,
            options=merged,
            ceilings=self._ceilings,
            max_rounds=self.max_rounds,
            history_costs=self._costs,
            max_retries=self._max_retries,
        )
        resumed = () if resuming is None else _restore(core, *resuming)
        supervisor = Supervisor.current()
        self._busy = True
        try:
            outcome = await self._driver.drive(supervisor, core, cancellation, on_event, resumed)
        finally:
            self._busy = False
        if outcome.succeeded:
            assert outcome.result is not None
            self._commit(outcome.result.messages, core.size)
            return outcome.result
        raise turn_failure(core, outcome, cancellation, self._commit)

    # -- history ------------------------------------------------------------------------
    def _commit(self, messages: Sequence[Message], size: RequestSize | None = None) -> None:
        """Append a committed batch; ``size`` is the history's new total when the turn core
        already measured it (a whole committed turn), so nothing is measured twice."""
        if not messages:
            return
        self._history = self._history + tuple(messages)
        if self._history_costs is not None:
            self._history_costs = self._history_costs + [measure_message(m) for m in messages]
        self._history_size = (
            size if size is not None else self._history_size + measure_messages(messages)
        )
        self._history_tools = self._history_tools | referenced_tools(messages)
        self.turns_committed += 1


def _restore(core: TurnCore, progress: TurnProgress, point: ResumePoint) -> list[PlannedCall]:
    """Bring a new core to where ``progress`` stands (InvalidTurnProgress if it can't)."""
    try:
        return core.restore(point.done, progress.rounds, progress.may_have_run, point.batch)
    except (RuntimeError, ProtocolViolation) as exc:
        raise InvalidTurnProgress(f"turn progress that cannot be continued: {exc}") from exc
