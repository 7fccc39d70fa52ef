"""Issue 18, an attack that held: malformed model output.

A model that names tools that do not exist, sends arguments of the wrong shape or
repeats a call id gets a model-readable error for each call; nothing runs that should
not, the history stays valid and the session keeps working.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio

from emelex.agent import AgentSession
from emelex.testing import ApproveAll, Call, Say, ScriptedModel, ScriptedTool

MALFORMED: dict[str, list[Call]] = {
    "unknown-tool": [Call("no_such_tool", {"x": 1})],
    "wrong-type": [Call("probe", {"path": 5})],
    "missing-required": [Call("probe", {})],
    "extra-property": [Call("probe", {"path": "a", "sneaky": True})],
    "builtin-wrong-type": [Call("read_file", {"path": ["a", "b"]})],
    "duplicate-ids": [Call("probe", {"path": "a"}, id="x"), Call("probe", {"path": "b"}, id="x")],
}

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"path": {"type": "string"}},
    "required": ["path"],
    "additionalProperties": False,
}


@pytest.mark.parametrize("kind", sorted(MALFORMED))
async def test_malformed_calls_are_answered_and_the_session_goes_on(
    tmp_path: Path, kind: str
) -> None:
    probe = ScriptedTool("probe", schema=SCHEMA)
    model = ScriptedModel([MALFORMED[kind], [Say("sorry")], [Say("still here")]])
    session = (
        AgentSession.builder(model, tmp_path)
        .include_shell_tool(False)
        .tools([probe])
        .approval_policy(ApproveAll())
        .build()
    )
    with trio.fail_after(20), session:
        first = await session.run("go")
        second = await session.run("again")
    assert first.response.text == "sorry" and second.response.text == "still here"
    calls = [c for m in session.history for c in m.tool_calls]
    results = [m for m in session.history if m.role == "tool"]
    assert len(results) == len(calls)  # every call answered
    assert len({m.tool_call_id for m in results}) == len(results)
    if kind != "duplicate-ids":
        assert probe.started == []
        assert all(m.text for m in results)
