"""The ``web_search`` tool over an application-supplied :class:`WebSearchProvider`.

emelex never picks a search vendor: the tool exists only when the application passes a
provider to the session builder. Providers build records with
:meth:`WebSearchResult.new`, which bounds the text fields and checks the URL; the tool
checks everything again (count, field sizes, ``http``/``https`` URLs) because a provider
can construct records directly, and drops malformed entries one by one instead of failing
the whole search.

A provider's ``search`` must be cancellation-safe: the tool cancels it (Trio
cancellation) when the turn is cancelled or the search times out, so it must not leave
detached I/O or effects behind, and any task it spawns must live in a nursery inside the
call.
"""

from __future__ import annotations

import itertools
import math
import unicodedata
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import attrs
import trio

from emelex._text import shorten
from emelex.model import ToolDefinition
from emelex.tools._protocol import ToolCancellationPolicy, ToolInvocation, ToolOutput
from emelex.tools.builtin._common import cancelled_by, object_schema, plural, show
from emelex.tools.builtin._errors import FetchRefused, InvalidSearchResult
from emelex.tools.builtin._web_fetch import parse_url

MAX_QUERY_CHARS = 1000
MAX_TITLE_CHARS = 300
MAX_URL_CHARS = 2048
MAX_SNIPPET_CHARS = 1000
#: Most results one search may return to the model.
MAX_RESULTS = 50
DEFAULT_RESULTS = 10
DEFAULT_SEARCH_TIMEOUT = 30.0


def _clean(text: str, limit: int) -> str:
    """One line: control, format and layout characters become spaces, runs of
    whitespace collapse, and the text is cut to ``limit`` characters (with an ellipsis)."""
    visible = "".join(
        " " if not char.isprintable() or unicodedata.category(char) in ("Cf", "Co", "Cs") else char
        for char in text
    )
    single = " ".join(visible.split())
    return shorten(single, limit)


def url_problem(url: object) -> str | None:
    """Why ``url`` is not acceptable as a result URL, or None."""
    if not isinstance(url, str):
        return "the URL is not a string"
    if len(url) > MAX_URL_CHARS:
        return f"the URL is longer than {MAX_URL_CHARS} characters"
    try:
        parse_url(url)
    except FetchRefused as exc:
        return str(exc)
    return None


@attrs.frozen
class WebSearchResult:
    """One search result as the model sees it: a title, an http(s) URL and a snippet.

    Build it with :meth:`new`; constructing it directly skips the bounds (the tool then
    drops a result that violates them).
    """

    title: str
    url: str
    snippet: str

    @classmethod
    def new(cls, title: str, url: str, snippet: str = "") -> WebSearchResult:
        """A bounded record: ``title`` and ``snippet`` are made single-line and cut to
        :data:`MAX_TITLE_CHARS` / :data:`MAX_SNIPPET_CHARS`; ``url`` must be an http(s)
        URL without credentials of at most :data:`MAX_URL_CHARS` characters, else
        :class:`InvalidSearchResult` is raised."""
        if not isinstance(title, str) or not isinstance(snippet, str):
            raise InvalidSearchResult("title and snippet must be strings")
        problem = url_problem(url)
        if problem is not None:
            raise InvalidSearchResult(problem)
        return cls(_clean(title, MAX_TITLE_CHARS), url, _clean(snippet, MAX_SNIPPET_CHARS))


def result_problem(item: object) -> str | None:
    """Why a provider's entry cannot be shown to the model, or None when it is valid."""
    if not isinstance(item, WebSearchResult):
        return f"not a WebSearchResult ({type(item).__name__})"
    for field, value, limit in (
        ("title", item.title, MAX_TITLE_CHARS),
        ("snippet", item.snippet, MAX_SNIPPET_CHARS),
    ):
        text: object = value  # attrs does not check types: anything can arrive here
        if not isinstance(text, str):
            return f"the {field} is not a string"
        if len(text) > limit or _clean(text, limit) != text:
            return f"the {field} is too long or not one clean line (use WebSearchResult.new)"
    return url_problem(item.url)


@runtime_checkable
class WebSearchProvider(Protocol):
    """The application's search backend.

    ``search`` returns at most ``limit`` results, best first, built with
    :meth:`WebSearchResult.new`. It is cancelled (Trio cancellation) when the turn is
    cancelled or the search times out and must leave nothing running behind. An optional
    ``name`` attribute is shown in approval requests.
    """

    async def search(self, query: str, *, limit: int) -> Sequence[WebSearchResult]: ...


def provider_name(provider: object) -> str:
    name = getattr(provider, "name", None)
    if isinstance(name, str) and name:
        return _clean(name, 100)
    return type(provider).__qualname__


class WebSearchTool:
    """``web_search {query}``: ask the application's provider; approved per call."""

    name = "web_search"

    def __init__(
        self,
        provider: WebSearchProvider,
        *,
        max_results: int = DEFAULT_RESULTS,
        timeout_seconds: float = DEFAULT_SEARCH_TIMEOUT,
    ) -> None:
        if not isinstance(provider, WebSearchProvider):
            raise TypeError(f"{provider!r} does not implement WebSearchProvider")
        if not 1 <= max_results <= MAX_RESULTS:
            raise ValueError(f"max_results must be within 1..{MAX_RESULTS}, got {max_results}")
        if not (math.isfinite(timeout_seconds) and timeout_seconds > 0):
            raise ValueError(f"timeout_seconds must be positive, got {timeout_seconds}")
        self._provider = provider
        self._max_results = max_results
        self._timeout = timeout_seconds
        kind = type(provider)
        self.authority_identity: Mapping[str, str] = {
            "provider": f"{kind.__module__}.{kind.__qualname__}",
        }
        self._definition = ToolDefinition(
            self.name,
            f"Search the web and return up to {max_results} results (title, URL, "
            "snippet). Fetch a result with web_fetch to read it. Every call asks the user "
            "for approval.",
            object_schema(
                {
                    "query": {
                        "type": "string",
                        "minLength": 1,
                        "maxLength": MAX_QUERY_CHARS,
                        "description": "Search query.",
                    }
                },
                ["query"],
            ),
        )

    @property
    def definition(self) -> ToolDefinition:
        return self._definition

    @property
    def cancellation_policy(self) -> ToolCancellationPolicy:
        return ToolCancellationPolicy.INTERRUPTIBLE

    def approval_reason(self, arguments: Mapping[str, Any]) -> str | None:
        return (
            f"send the web search query {show(arguments['query'])} to the search provider "
            f"{show(provider_name(self._provider))} (up to {self._max_results} results)"
        )

    async def invoke(self, invocation: ToolInvocation) -> ToolOutput:
        if not invocation.approved:
            return ToolOutput.error("web_search: this call needs approval and was not approved")
        query = invocation.arguments["query"]
        results: object = None
        with cancelled_by(invocation.cancellation) as scope:
            with trio.move_on_after(self._timeout):
                try:
                    results = await self._provider.search(query, limit=self._max_results)
                except Exception as exc:
                    return ToolOutput.error(
                        f"web_search: the search provider failed: {type(exc).__name__}: "
                        f"{_clean(str(exc), 500)}"
                    )
                return render_results(query, results, self._max_results)
            if not scope.cancelled_caught:
                return ToolOutput.error(
                    f"web_search: the search provider did not answer within {self._timeout:g} s"
                )
        return ToolOutput.error("web_search: cancelled with the turn")


def render_results(query: str, results: object, limit: int) -> ToolOutput:
    """Validate the provider's answer and render it; malformed entries are dropped."""
    if not isinstance(results, Sequence) or isinstance(results, str | bytes):
        return ToolOutput.error(
            f"web_search: the search provider returned {type(results).__name__}, "
            "not a sequence of results"
        )
    kept: list[WebSearchResult] = []
    dropped = 0
    for item in itertools.islice(results, limit):
        if result_problem(item) is None:
            assert isinstance(item, WebSearchResult)
            kept.append(item)
        else:
            dropped += 1
    extra = len(results) - limit
    if kept:
        lines = [f"[{plural(len(kept), 'result')} for {show(query)}]"]
    else:
        lines = [f"[no results for {show(query)}]"]
    for number, item in enumerate(kept, 1):
        lines.append(f"{number}. {item.title or '(untitled)'}")
        lines.append(f"   {item.url}")
        if item.snippet:
            lines.append(f"   {item.snippet}")
    if dropped:
        lines.append(f"[{plural(dropped, 'malformed result')} from the provider dropped]")
    if extra > 0:
        lines.append(f"[{plural(extra, 'result')} beyond the limit of {limit} ignored]")
    return ToolOutput("\n".join(lines))
