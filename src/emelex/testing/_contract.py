"""check_tool_contract: run your own tool through real turns, cancelled at random
moments, and check the harness's promises hold for it.

Two kinds of findings are kept apart: the tool *failing* (its result is an error: a
bug, a missing fixture, or just its job) and the tool *breaking the contract* (it
ignores cancellation, leaves a thread, a child process or a Trio task running, or
leaves history inconsistent). A violation always fails the check; failures fail it
only when the tool failed on every run it finished (a tool that cannot work at all
proves nothing about cancellation).
"""

from __future__ import annotations

import random
import tempfile
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, Literal

import attrs
import trio
import trio.testing

from emelex._text import shorten
from emelex.agent import (
    AgentCancellation,
    AgentError,
    AgentEvent,
    AgentSession,
    AgentTool,
    AgentTurn,
    ToolCancellationPolicy,
    ToolCompleted,
    ToolStarted,
    TurnCancelled,
    validate_history,
)
from emelex.model import Message
from emelex.runtime import open_supervisor
from emelex.testing._errors import (
    ContractOptionsError,
    ToolAlwaysFails,
    ToolContractViolation,
)
from emelex.testing._leaks import left_behind, snapshot
from emelex.testing._scripted import Call, Say, ScriptedModel
from emelex.testing._tools import ApproveAll

#: Longest tool error text kept per run.
MAX_ERROR_CHARS = 300

ToolResult = Literal["ok", "error", "interrupted", "none"]
"""What the call produced: a result, an error result, the harness's "interrupted"
result (the turn was cancelled while it ran), or nothing (it never started)."""


@attrs.frozen
class RunRecord:
    """One run of :func:`check_tool_contract`."""

    run: int
    #: Seconds after which the turn was cancelled; None: not cancelled.
    cancel_after: float | None
    #: True when the turn completed, False when it ended cancelled (or failed).
    completed: bool
    started: bool
    result: ToolResult
    #: The tool's error text when ``result == "error"`` (bounded).
    error: str | None
    #: How this run broke the contract (empty: it did not).
    violations: tuple[str, ...]


@attrs.frozen
class ContractReport:
    """Every run of a :func:`check_tool_contract` call."""

    records: tuple[RunRecord, ...]

    @property
    def runs(self) -> int:
        return len(self.records)

    @property
    def completed(self) -> int:
        return sum(r.completed for r in self.records)

    @property
    def cancelled(self) -> int:
        return sum(not r.completed for r in self.records)

    @property
    def started(self) -> int:
        return sum(r.started for r in self.records)

    @property
    def failures(self) -> tuple[RunRecord, ...]:
        """Runs where the tool failed (returned an error result): the tool's own
        behaviour, not a contract violation."""
        return tuple(r for r in self.records if r.result == "error")

    @property
    def violations(self) -> tuple[RunRecord, ...]:
        """Runs where the tool broke the contract."""
        return tuple(r for r in self.records if r.violations)

    @property
    def always_failed(self) -> bool:
        """True when every run that produced a result produced an error."""
        finished = [r for r in self.records if r.result in ("ok", "error")]
        return bool(finished) and all(r.result == "error" for r in finished)

    def summary(self) -> str:
        lines = [
            f"{self.runs} runs: {self.completed} completed, {self.cancelled} cancelled, "
            f"the tool started in {self.started}"
        ]
        if self.violations:
            lines.append("the tool broke the contract:")
            lines += [f"  {_label(r)}: {v}" for r in self.violations for v in r.violations]
        if self.failures:
            lines.append(f"the tool failed in {len(self.failures)} runs, first: {_first(self)}")
        return "\n".join(lines)


def _label(record: RunRecord) -> str:
    how = (
        "not cancelled"
        if record.cancel_after is None
        else (f"cancelled after {record.cancel_after:.4f} s")
    )
    return f"run {record.run} ({how})"


def _first(report: ContractReport) -> str:
    record = report.failures[0]
    return f"{_label(record)}: {record.error}"


@attrs.frozen
class _Plan:
    tool: AgentTool
    arguments: Mapping[str, Any]
    time_limit: float
    leak_grace: float
    around: Callable[[], AbstractAsyncContextManager[object]] | None


def _check_options(runs: int, max_cancel_delay: float, time_limit: float, grace: float) -> None:
    if not isinstance(runs, int) or isinstance(runs, bool) or runs < 1:
        raise ContractOptionsError(f"runs must be a positive int, not {runs!r}")
    for name, value in (
        ("max_cancel_delay", max_cancel_delay),
        ("time_limit", time_limit),
        ("leak_grace", grace),
    ):
        if not isinstance(value, int | float) or not 0 <= value < float("inf"):
            raise ContractOptionsError(f"{name} must be a non-negative number, not {value!r}")


def _delays(runs: int, max_cancel_delay: float, seed: int) -> list[float | None]:
    """Run 0 and every fourth run are not cancelled (run 0 shows the tool works)."""
    rng = random.Random(seed)
    return [None if run % 4 == 0 else rng.uniform(0, max_cancel_delay) for run in range(runs)]


def _default_around(tool: AgentTool) -> Callable[[], AbstractAsyncContextManager[object]] | None:
    """A tool adapted from asyncio needs an asyncio loop around each run (the marker is
    emelex.aio._adapter.MARKER; emelex.aio is imported only for such tools)."""
    function = getattr(tool, "function", None)
    if not getattr(function, "__emelex_asyncio__", False):
        return None
    from emelex.aio import open_asyncio_loop

    return open_asyncio_loop


async def _run_all(
    plan: _Plan,
    delays: list[float | None],
    allow_failures: bool,
    prepare: Callable[[], object] | None,
) -> ContractReport:
    records: list[RunRecord] = []
    for run, delay in enumerate(delays):
        if prepare is not None:
            prepare()
        record = await _one_run(plan, run, delay)
        records.append(record)
        if record.violations:
            report = ContractReport(tuple(records))
            raise ToolContractViolation(report.summary(), report)
    report = ContractReport(tuple(records))
    if report.always_failed and not allow_failures:
        raise ToolAlwaysFails(
            f"the tool {plan.tool.definition.name!r} failed on every run that finished, so "
            f"nothing was learnt about cancellation; {_first(report)}\n{report.summary()}",
            report,
        )
    return report


def check_tool_contract(
    tool: AgentTool,
    arguments: Mapping[str, Any],
    *,
    runs: int = 20,
    max_cancel_delay: float = 0.05,
    seed: int = 0,
    time_limit: float = 30.0,
    leak_grace: float = 0.5,
    allow_failures: bool = False,
    prepare: Callable[[], object] | None = None,
    around: Callable[[], AbstractAsyncContextManager[object]] | None = None,
) -> ContractReport:
    """The synchronous form: each run is its own ``trio.run``, so call it from a plain
    (non-async) test. Inside a pytest-trio test, ``await``
    :func:`check_tool_contract_async` instead.

    Each run calls ``tool`` once with ``arguments`` (approved one-shot) in a real turn.
    Run 0 and every fourth run are not cancelled; the others cancel the turn after a
    random real-time delay in ``[0, max_cancel_delay]``. After each run it checks: the
    turn returned within ``time_limit`` seconds; no actor is left, and no thread, child
    process or Trio task that was not there before the run is still alive
    ``leak_grace`` seconds later; history holds exactly one result for the call; a
    cancelled run rolled back iff the tool never started, and a started
    FINISH_ONCE_STARTED call has its own (not an "interrupted") result. Cancellation
    checks apply only to cancelled runs.

    Raises :class:`ContractOptionsError` for unusable options,
    :class:`ToolContractViolation` on the first run that breaks the contract and
    :class:`ToolAlwaysFails` when the tool's result was an error on every run that
    produced one (unless ``allow_failures``); both are AssertionErrors carrying the
    :class:`ContractReport`. ``prepare`` runs before each run (reset fixtures there);
    ``around`` is an async context manager factory entered around each run (a tool
    made with :func:`emelex.aio.from_asyncio` gets an asyncio loop by default).
    """
    _check_options(runs, max_cancel_delay, time_limit, leak_grace)
    plan = _Plan(tool, dict(arguments), time_limit, leak_grace, around or _default_around(tool))
    delays = _delays(runs, max_cancel_delay, seed)
    report: ContractReport = trio.run(_run_all, plan, delays, allow_failures, prepare)
    return report


async def check_tool_contract_async(
    tool: AgentTool,
    arguments: Mapping[str, Any],
    *,
    runs: int = 20,
    max_cancel_delay: float = 0.05,
    seed: int = 0,
    time_limit: float = 30.0,
    leak_grace: float = 0.5,
    allow_failures: bool = False,
    prepare: Callable[[], object] | None = None,
    around: Callable[[], AbstractAsyncContextManager[object]] | None = None,
) -> ContractReport:
    """:func:`check_tool_contract` for async tests (pytest-trio): the runs happen in the
    current Trio run, one after another. Run it on a real clock (its delays and limits
    are real seconds) and with nothing else starting tasks meanwhile: any Trio task
    that appears during a run and outlives it is reported as left behind by the tool.
    An asyncio loop you already opened is reused for tools adapted from asyncio."""
    _check_options(runs, max_cancel_delay, time_limit, leak_grace)
    if isinstance(trio.lowlevel.current_clock(), trio.testing.MockClock):
        # Real threads and processes do not follow a mock clock: time limits would
        # fire (or never fire) regardless of what the tool does.
        raise ContractOptionsError(
            "check_tool_contract_async needs a real clock; this test runs on a MockClock"
        )
    plan = _Plan(tool, dict(arguments), time_limit, leak_grace, around or _default_around(tool))
    return await _run_all(plan, _delays(runs, max_cancel_delay, seed), allow_failures, prepare)


@asynccontextmanager
async def _nothing() -> AsyncIterator[None]:
    yield


async def _one_run(plan: _Plan, run: int, delay: float | None) -> RunRecord:
    before = snapshot()
    name = plan.tool.definition.name
    model = ScriptedModel([[Call(name, dict(plan.arguments))], [Say("done")]])
    completed_events: list[ToolCompleted] = []
    started = False
    violations: list[str] = []

    def consume(event: AgentEvent) -> None:
        nonlocal started
        if isinstance(event, ToolStarted):
            started = True
        elif isinstance(event, ToolCompleted):
            completed_events.append(event)

    turn: AgentTurn | None = None
    error: BaseException | None = None
    history: tuple[Message, ...] = ()
    timed_out = False
    around = plan.around() if plan.around is not None else _nothing()
    with tempfile.TemporaryDirectory() as workspace:
        builder = (
            AgentSession.builder(model, workspace)
            .include_file_tools(False)
            .include_shell_tool(False)
            .tool(plan.tool)
            .approval_policy(ApproveAll())
        )
        async with around, open_supervisor("tool-contract") as supervisor:
            with builder.build() as session:
                cancellation = AgentCancellation()
                with trio.move_on_after(plan.time_limit) as limit:
                    async with trio.open_nursery() as nursery:
                        if delay is not None:
                            nursery.start_soon(_cancel_after, cancellation, delay)
                        try:
                            turn = await session.run(
                                "go", cancellation=cancellation, on_event=consume
                            )
                        except AgentError as exc:
                            error = exc
                        nursery.cancel_scope.cancel()
                # cancel_called, not cancelled_caught: when the turn's own cancellation
                # fired too, the harness reports TurnCancelled for both.
                timed_out = limit.cancel_called
                history = session.history
            if supervisor.snapshot():
                violations.append("actors outlived the turn")
    if timed_out:
        violations.append(
            f"the turn did not return within {plan.time_limit} s; "
            + (
                "the tool did not finish (it was not cancelled)"
                if delay is None
                else "the tool ignores cancellation"
            )
        )
    else:
        violations += _history_violations(plan.tool, turn, error, history, started, delay)
    violations += [f"left behind: {item}" for item in await left_behind(before, plan.leak_grace)]
    result, error_text = _result(completed_events, history, started)
    return RunRecord(
        run=run,
        cancel_after=delay,
        completed=turn is not None,
        started=started,
        result=result,
        error=error_text,
        violations=tuple(violations),
    )


def _history_violations(
    tool: AgentTool,
    turn: AgentTurn | None,
    error: BaseException | None,
    history: tuple[Message, ...],
    started: bool,
    delay: float | None,
) -> list[str]:
    try:
        validate_history(history, [tool.definition.name])
    except Exception as exc:
        return [f"history is inconsistent: {exc}"]
    if turn is not None:
        return []
    if delay is None:
        # Not cancelled, yet the turn did not complete: the harness turned something the
        # tool did into a turn failure.
        return [f"the turn failed without being cancelled: {error!r}"]
    if not isinstance(error, TurnCancelled):
        return [f"the cancelled turn ended with {error!r}, not TurnCancelled"]
    found: list[str] = []
    if error.rolled_back is started:
        found.append(
            "the turn rolled back although the tool started"
            if started
            else "the turn kept a checkpoint although the tool never started"
        )
    if started and tool.cancellation_policy is ToolCancellationPolicy.FINISH_ONCE_STARTED:
        results = [m for m in history if m.role == "tool"]
        if len(results) != 1:
            found.append(f"{len(results)} results for one finish-once-started call")
        elif results[0].text.startswith("interrupted"):
            found.append("a finish-once-started tool was interrupted")
    return found


def _result(
    completed: list[ToolCompleted], history: tuple[Message, ...], started: bool
) -> tuple[ToolResult, str | None]:
    executed = [event for event in completed if event.executed]
    if executed:
        output = executed[0].output
        if output.is_error and output.text.startswith("interrupted:"):
            return "interrupted", None
        if output.is_error:
            return "error", shorten(output.text, MAX_ERROR_CHARS)
        return "ok", None
    if started and any(m.role == "tool" and m.text.startswith("interrupted") for m in history):
        return "interrupted", None
    return "none", None


async def _cancel_after(cancellation: AgentCancellation, delay: float) -> None:
    await trio.sleep(delay)
    cancellation.cancel()


__all__ = [
    "ContractReport",
    "RunRecord",
    "ToolResult",
    "check_tool_contract",
    "check_tool_contract_async",
]
