"""Which built-ins exist: the settings matrix, what models are offered, authority identity."""

from __future__ import annotations

import itertools
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import attrs
import jsonschema
import pytest

from emelex.agent import AgentAuthoritySnapshot, AgentSession
from emelex.testing import Call, ScriptedModel
from emelex.tools import AgentTool, BuiltinSettings, ToolCancellationPolicy
from emelex.tools.builtin import BUILTIN_TOOL_NAMES, WebSearchResult, builtin_tools
from emelex.tools.builtin._web_fetch import USER_AGENT
from emelex.tools.workspace import Workspace

Runner = Callable[..., Awaitable[Any]]
FILE_TOOLS = ["read_file", "list_directory", "find_files", "grep", "write_file", "edit_file"]


class Provider:
    async def search(self, query: str, *, limit: int) -> Sequence[WebSearchResult]:
        return []


@pytest.mark.parametrize(
    ("files", "shell", "fetch", "clock", "search"),
    list(itertools.product([False, True], repeat=5)),
)
def test_settings_matrix(
    tmp_path: Path, files: bool, shell: bool, fetch: bool, clock: bool, search: bool
) -> None:
    settings = BuiltinSettings(
        file_tools=files, shell=shell, web_fetch=fetch, datetime=clock, web_search=search
    )
    with Workspace.open(tmp_path) as workspace:
        tools = builtin_tools(workspace, settings, Provider() if search else None)
    expected = [
        *(FILE_TOOLS if files else []),
        *(["shell"] if shell else []),
        *(["web_fetch"] if fetch else []),
        *(["web_search"] if search else []),
        *(["datetime"] if clock else []),
    ]
    assert [tool.definition.name for tool in tools] == expected
    assert all(isinstance(tool, AgentTool) for tool in tools)


def test_every_schema_is_closed_and_valid(tmp_path: Path) -> None:
    settings = BuiltinSettings(web_fetch=True, datetime=True, web_search=True)
    with Workspace.open(tmp_path) as workspace:
        tools = builtin_tools(workspace, settings, Provider())
    assert sorted(tool.definition.name for tool in tools) == sorted(BUILTIN_TOOL_NAMES)
    for tool in tools:
        schema = tool.definition.parameters
        jsonschema.Draft202012Validator.check_schema(schema)
        assert schema["type"] == "object"
        assert schema["additionalProperties"] is False
        assert set(schema["required"]) <= set(schema["properties"])
        assert schema["required"], tool.definition.name
        validator = jsonschema.Draft202012Validator(schema)
        assert not validator.is_valid({"unexpected": 1})


def test_cancellation_policies(tmp_path: Path) -> None:
    settings = BuiltinSettings(web_fetch=True, datetime=True, web_search=True)
    with Workspace.open(tmp_path) as workspace:
        tools = {t.definition.name: t for t in builtin_tools(workspace, settings, Provider())}
    finishing = {*FILE_TOOLS, "shell"}
    for name, tool in tools.items():
        expected = (
            ToolCancellationPolicy.FINISH_ONCE_STARTED
            if name in finishing
            else ToolCancellationPolicy.INTERRUPTIBLE
        )
        assert tool.cancellation_policy is expected, name


@pytest.mark.parametrize(
    ("configure", "offered"),
    [
        (lambda b: b, [*FILE_TOOLS, "shell"]),
        (lambda b: b.include_file_tools(False), ["shell"]),
        (lambda b: b.include_shell_tool(False), FILE_TOOLS),
        (lambda b: b.include_file_tools(False).include_shell_tool(False), []),
        (
            lambda b: b.include_web_fetch(True).include_datetime(True),
            [*FILE_TOOLS, "shell", "web_fetch", "datetime"],
        ),
        (
            lambda b: (
                b.include_file_tools(False)
                .include_shell_tool(False)
                .web_search_provider(Provider())
            ),
            ["web_search"],
        ),
    ],
)
async def test_switches_decide_what_the_model_is_offered(
    run_calls: Runner, configure: Any, offered: list[str]
) -> None:
    outcome = await run_calls([Call("read_file", {"path": "x"})], configure=configure)
    assert outcome.advertised == offered
    assert list(outcome.session.available_tools) == offered
    if "read_file" not in offered:
        assert outcome.executed == [False]
        assert "read_file" in outcome.tool_messages[0]


def test_authority_snapshot_records_tool_identity(ws_root: Path) -> None:
    builder = AgentSession.builder(ScriptedModel([]), ws_root).include_web_fetch(True)
    snapshot = builder.authority_snapshot()
    identities = {tool.name: dict(tool.identity) for tool in snapshot.tools}
    assert identities["web_fetch"] == {"private_addresses": "refused", "user_agent": USER_AGENT}
    assert set(identities["shell"]) == {"path_sha256", "home_sha256"}
    assert identities["read_file"] == {}
    assert AgentAuthoritySnapshot.from_json(snapshot.to_json()) == snapshot
    with_search = builder.web_search_provider(Provider()).authority_snapshot()
    search = {tool.name: dict(tool.identity) for tool in with_search.tools}["web_search"]
    assert search == {"provider": f"{Provider.__module__}.Provider"}


def test_private_address_knob_is_read_from_settings(tmp_path: Path) -> None:
    @attrs.frozen
    class WithPrivate(BuiltinSettings):
        web_allow_private_addresses: bool = True

    with Workspace.open(tmp_path) as workspace:
        [fetch] = builtin_tools(
            workspace, WithPrivate(file_tools=False, shell=False, web_fetch=True)
        )
    assert dict(getattr(fetch, "authority_identity", {}))["private_addresses"] == "allowed"
