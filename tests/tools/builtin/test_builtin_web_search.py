"""web_search over application providers: validation, bounds, cancellation, approval."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
import trio

from emelex.agent import AgentCancellation, AgentSession, DenyAll, TurnCancelled
from emelex.model import ToolCall
from emelex.testing import ApproveAll, Call, Say, ScriptedApprovals, ScriptedModel
from emelex.tools import BuiltinSettings, ToolInvocation, ToolOutput
from emelex.tools.builtin import (
    InvalidSearchResult,
    WebSearchProvider,
    WebSearchResult,
    WebSearchTool,
    builtin_tools,
)
from emelex.tools.builtin._web_search import MAX_SNIPPET_CHARS, MAX_TITLE_CHARS
from emelex.tools.workspace import Workspace

Runner = Callable[..., Awaitable[Any]]


class Provider:
    """Returns a fixed answer (or raises it) and records every query."""

    name = "Test Search"

    def __init__(self, answer: object = ()) -> None:
        self.answer = answer
        self.queries: list[tuple[str, int]] = []

    async def search(self, query: str, *, limit: int) -> Sequence[WebSearchResult]:
        self.queries.append((query, limit))
        await trio.lowlevel.checkpoint()
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer  # type: ignore[return-value]


class Hanging:
    """Never answers; records that it was cancelled and left nothing running."""

    def __init__(self) -> None:
        self.started = trio.Event()
        self.cancelled = False

    async def search(self, query: str, *, limit: int) -> Sequence[WebSearchResult]:
        self.started.set()
        try:
            await trio.sleep_forever()
        except trio.Cancelled:
            self.cancelled = True
            raise
        raise AssertionError("unreachable")


async def search(tool: WebSearchTool, query: str, *, approved: bool = True) -> ToolOutput:
    invocation = ToolInvocation(
        ToolCall("call-1", "web_search", {"query": query}),
        AgentCancellation(),
        "turn",
        "session",
        approved=approved,
    )
    with trio.fail_after(10):
        return await tool.invoke(invocation)


def test_new_bounds_and_cleans_fields() -> None:
    result = WebSearchResult.new(
        "  A\ttitle\nwith\u202elayout  " + "t" * 400, "https://example.com/a", "s" * 5000
    )
    assert result.title.startswith("A title with layout t")
    assert len(result.title) <= MAX_TITLE_CHARS and result.title.endswith(" more characters]")
    assert len(result.snippet) <= MAX_SNIPPET_CHARS
    for url in ("javascript:alert(1)", "ftp://x/", "https://u:p@x/", "https://x/" + "a" * 3000):
        with pytest.raises(InvalidSearchResult):
            WebSearchResult.new("t", url, "s")


def test_provider_protocol_is_checked() -> None:
    assert isinstance(Provider(), WebSearchProvider)
    with pytest.raises(TypeError, match="does not implement WebSearchProvider"):
        WebSearchTool(object())  # type: ignore[arg-type]


async def test_malformed_entries_are_dropped_one_by_one() -> None:
    good = WebSearchResult.new("Good", "https://example.com/good", "fine")
    provider = Provider(
        [
            good,
            WebSearchResult("Bad URL", "javascript:alert(1)", ""),
            WebSearchResult("x" * 400, "https://example.com/long", ""),
            WebSearchResult("multi\nline", "https://example.com/nl", ""),
            WebSearchResult(3, "https://example.com/type", ""),  # type: ignore[arg-type]
            {"title": "dict", "url": "https://example.com/", "snippet": ""},
            WebSearchResult.new("Second", "http://example.org/", ""),
        ]
    )
    output = await search(WebSearchTool(provider), "query")
    assert output.is_error is False
    assert output.text == (
        '[2 results for "query"]\n'
        "1. Good\n"
        "   https://example.com/good\n"
        "   fine\n"
        "2. Second\n"
        "   http://example.org/\n"
        "[5 malformed results from the provider dropped]"
    )
    assert provider.queries == [("query", 10)]


async def test_count_is_bounded() -> None:
    many = [WebSearchResult.new(f"R{n}", f"https://example.com/{n}", "") for n in range(25)]
    output = await search(WebSearchTool(Provider(many), max_results=3), "q")
    lines = output.text.splitlines()
    assert lines[0] == '[3 results for "q"]'
    assert lines[-1] == "[22 results beyond the limit of 3 ignored]"
    assert "R3" not in output.text


async def test_provider_failures_are_results() -> None:
    failed = await search(WebSearchTool(Provider(RuntimeError("quota\nexceeded"))), "q")
    assert failed.is_error
    assert failed.text == "web_search: the search provider failed: RuntimeError: quota exceeded"
    wrong = await search(WebSearchTool(Provider("not a list")), "q")
    assert wrong.is_error and "returned str, not a sequence" in wrong.text
    empty = await search(WebSearchTool(Provider([])), "q")
    assert empty.text == '[no results for "q"]'


async def test_timeout_cancels_the_provider() -> None:
    provider = Hanging()
    output = await search(WebSearchTool(provider, timeout_seconds=0.2), "q")
    assert output.text == "web_search: the search provider did not answer within 0.2 s"
    assert provider.cancelled


async def test_unapproved_invocation_never_reaches_the_provider() -> None:
    provider = Provider([])
    output = await search(WebSearchTool(provider), "q", approved=False)
    assert output.is_error
    assert provider.queries == []


async def test_session_search_needs_a_provider_and_approval(run_calls: Runner) -> None:
    none = await run_calls([Call("web_search", {"query": "trio"})], ApproveAll())
    assert "web_search" not in none.advertised

    provider = Provider([WebSearchResult.new("Trio", "https://trio.readthedocs.io/", "docs")])

    def with_provider(builder: Any) -> Any:
        return builder.web_search_provider(provider)

    denied = await run_calls(
        [Call("web_search", {"query": "trio"})], DenyAll(), configure=with_provider
    )
    assert "web_search" in denied.advertised
    assert denied.reasons == [
        'send the web search query "trio" to the search provider "Test Search" (up to 10 results)'
    ]
    assert provider.queries == []
    approvals = ScriptedApprovals([True, True])
    call = Call("web_search", {"query": "trio"})
    outcome = await run_calls([call, call], approvals, configure=with_provider)
    assert len(approvals.asked) == 2
    assert outcome.tool_messages[0].startswith('[1 result for "trio"]\n1. Trio\n')
    assert provider.queries == [("trio", 10), ("trio", 10)]


async def test_cancelling_the_turn_cancels_the_search(ws_root: Path) -> None:
    provider = Hanging()
    model = ScriptedModel([[Call("web_search", {"query": "q"})], [Say("done")]])
    builder = (
        AgentSession.builder(model, ws_root)
        .web_search_provider(provider)
        .approval_policy(ApproveAll())
    )
    cancellation = AgentCancellation()
    with builder.build() as session, trio.fail_after(10):
        async with trio.open_nursery() as nursery:

            async def turn() -> None:
                with pytest.raises(TurnCancelled):
                    await session.run("go", cancellation=cancellation)

            nursery.start_soon(turn)
            await provider.started.wait()
            cancellation.cancel()
    assert provider.cancelled


def test_builtin_tools_needs_setting_and_provider_together(tmp_path: Path) -> None:
    with Workspace.open(tmp_path) as workspace:
        with pytest.raises(ValueError, match="without a WebSearchProvider"):
            builtin_tools(workspace, BuiltinSettings(web_search=True), None)
        with pytest.raises(ValueError, match="web_search is disabled"):
            builtin_tools(workspace, BuiltinSettings(), Provider())
