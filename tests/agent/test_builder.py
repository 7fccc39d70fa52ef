"""Builder validation, capabilities and the authority snapshot."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from emelex import SerializationError
from emelex.agent import (
    AgentAuthoritySnapshot,
    AgentSession,
    AgentSessionBuilder,
    CapabilityMissing,
    CeilingExceeded,
    ConfigurationConflict,
    InvalidHistory,
    InvalidToolDeclaration,
    InvalidWorkspace,
    ResourceCeilings,
    ToolCancellationPolicy,
    ToolUnavailable,
)
from emelex.model import Capabilities, GenerationOptions, Message, Reasoning, ToolCall
from emelex.testing import ApproveAll, Say, ScriptedModel, ScriptedTool

Make = Callable[..., AgentSessionBuilder]


def caps(**fields: bool | None) -> Capabilities:
    return Capabilities(**{**attrs_of(Capabilities.unknown()), **fields})


def attrs_of(value: Capabilities) -> dict[str, bool | None]:
    import attrs

    return attrs.asdict(value)


def resumed(*calls: tuple[str, str], answered: bool = True) -> list[Message]:
    messages = [
        Message("user", "go"),
        Message("assistant", "", tool_calls=tuple(ToolCall(i, n, {}) for i, n in calls)),
    ]
    if answered:
        messages += [Message("tool", "ok", tool_call_id=i) for i, _ in calls]
    return messages


def test_missing_workspace_is_typed(tmp_path: Path) -> None:
    with pytest.raises(InvalidWorkspace):
        AgentSession.builder(ScriptedModel([]), tmp_path / "missing").build()


def test_tool_declarations_are_validated(make_builder: Make) -> None:
    with pytest.raises(InvalidToolDeclaration, match="duplicate"):
        make_builder(ScriptedModel([])).tool(ScriptedTool("a")).tool(ScriptedTool("a")).build()
    bad_schema = ScriptedTool("b", schema={"type": "object", "properties": {"x": {"type": 5}}})
    with pytest.raises(InvalidToolDeclaration, match="invalid JSON Schema"):
        make_builder(ScriptedModel([])).tool(bad_schema).build()
    with pytest.raises(InvalidToolDeclaration, match="name"):
        make_builder(ScriptedModel([])).tool(ScriptedTool("has space")).build()
    with pytest.raises(InvalidToolDeclaration, match="AgentTool"):
        make_builder(ScriptedModel([])).tool(object()).build()  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("history", "match"),
    [
        (resumed(("c1", "t"), ("c1", "t")), "duplicate"),
        (resumed(("c1", "t"), answered=False), "never answered"),
        (resumed(("c1", "undeclared")), "undeclared"),
        ([Message("user", "x"), Message("tool", "r", tool_call_id="zz")], "answers no open"),
        ([Message("user", "x"), Message("system", "late")], "only come first"),
        (
            [*resumed(("c1", "t"), answered=False), Message("user", "next")],
            "never answered",
        ),
    ],
)
def test_resumed_history_is_validated(
    make_builder: Make, history: list[Message], match: str
) -> None:
    with pytest.raises(InvalidHistory, match=match):
        make_builder(ScriptedModel([])).tool(ScriptedTool("t")).history(history).build()


def test_valid_resumed_history_is_kept(make_builder: Make) -> None:
    history = resumed(("c1", "t"), ("c2", "t"))
    with make_builder(ScriptedModel([])).tool(ScriptedTool("t")).history(history).build() as s:
        assert s.history == tuple(history)


def test_system_prompt_inserted_only_without_system_message(make_builder: Make) -> None:
    with make_builder(ScriptedModel([])).system_prompt("be kind").build() as session:
        assert session.history == (Message("system", "be kind"),)
    with pytest.raises(ConfigurationConflict):
        (
            make_builder(ScriptedModel([]))
            .system_prompt("a")
            .history([Message("system", "b")])
            .build()
        )


@pytest.mark.parametrize(
    ("capabilities", "configure", "match"),
    [
        (caps(system_prompt=False), lambda b: b.system_prompt("x"), "system prompt"),
        (caps(tool_declarations=False), lambda b: b.tool(ScriptedTool("t")), "declarations"),
        (
            caps(tool_history=False),
            lambda b: b.tool(ScriptedTool("t")).history(resumed(("c", "t"))),
            "tool calls",
        ),
        (
            caps(thinking_toggle=False),
            lambda b: b.options(GenerationOptions(reasoning=Reasoning.AUTO)),
            "thinking toggle",
        ),
    ],
)
def test_proven_missing_capabilities_fail_the_build(
    make_builder: Make,
    capabilities: Capabilities,
    configure: Callable[[AgentSessionBuilder], AgentSessionBuilder],
    match: str,
) -> None:
    builder = configure(make_builder(ScriptedModel([], capabilities=capabilities)))
    with pytest.raises(CapabilityMissing, match=match):
        builder.build()
    with pytest.raises(CapabilityMissing):
        builder.authority_snapshot()


def test_unknown_capabilities_defer(make_builder: Make) -> None:
    builder = (
        make_builder(ScriptedModel([], capabilities=Capabilities.unknown()))
        .system_prompt("x")
        .tool(ScriptedTool("t"))
        .options(GenerationOptions(reasoning=Reasoning.OFF))
    )
    with builder.build() as session:
        assert session.history[0].role == "system"


@pytest.mark.parametrize("reasoning", [Reasoning.AUTO, Reasoning.budget(64)])
def test_an_unknown_thinking_toggle_is_not_proven(make_builder: Make, reasoning: Reasoning) -> None:
    """Thinking-on sessions need a proven toggle: unknown does not defer."""
    model = ScriptedModel([[Say("never")]], capabilities=Capabilities.unknown())
    builder = make_builder(model).options(GenerationOptions(reasoning=reasoning))
    with pytest.raises(CapabilityMissing, match="not proven"):
        builder.build()
    with pytest.raises(CapabilityMissing, match="not proven"):
        builder.authority_snapshot()
    assert model.requests == ()
    proven = ScriptedModel([], capabilities=Capabilities(thinking_toggle=True))
    with make_builder(proven).options(GenerationOptions(reasoning=reasoning)).build():
        pass


def test_reasoning_stripped_from_resumed_history_when_proven_absent(make_builder: Make) -> None:
    history = [Message("user", "q"), Message("assistant", "a", reasoning="private")]
    model = ScriptedModel([], capabilities=caps(reasoning_history=False))
    with make_builder(model).history(history).build() as session:
        assert session.history[1].reasoning is None
    with make_builder(ScriptedModel([])).history(history).build() as session:
        assert session.history[1].reasoning == "private"


def test_history_over_a_ceiling_is_accepted_but_a_system_prompt_over_it_is_not(
    make_builder: Make,
) -> None:
    # Earlier turns are left out of requests (fitting), so they never block a build;
    # the system prompt is in every request, so it must fit.
    history = [Message("user", "x" * 100), Message("assistant", "y")]
    with make_builder(ScriptedModel([])).history(history).max_message_bytes(10).build() as s:
        assert s.history == tuple(history)
    with pytest.raises(CeilingExceeded) as caught:
        make_builder(ScriptedModel([])).system_prompt("z" * 11).max_message_bytes(10).build()
    assert caught.value.limit == "max_message_bytes"
    assert caught.value.maximum == 10


def test_snapshot_equal_iff_authority_unchanged(make_builder: Make, tmp_path: Path) -> None:
    def builder() -> AgentSessionBuilder:
        return make_builder(ScriptedModel([])).tool(ScriptedTool("b")).tool(ScriptedTool("a"))

    first = builder().authority_snapshot()
    assert first == builder().authority_snapshot()
    # The approval policy is not authority.
    assert first == builder().approval_policy(ApproveAll()).authority_snapshot()
    assert [tool.name for tool in first.tools] == ["a", "b"]  # sorted by name
    assert first.workspace.path == str(tmp_path.resolve())
    assert first.workspace.inode == tmp_path.stat().st_ino
    changed = [
        builder().tool(ScriptedTool("c")).authority_snapshot(),
        make_builder(ScriptedModel([]))
        .tool(ScriptedTool("b", policy=ToolCancellationPolicy.INTERRUPTIBLE))
        .tool(ScriptedTool("a"))
        .authority_snapshot(),
        builder().max_messages(5).authority_snapshot(),
        builder().include_web_fetch(True).authority_snapshot(),
        make_builder(ScriptedModel([]))
        .tool(ScriptedTool("b", schema={"type": "object", "required": ["x"]}))
        .tool(ScriptedTool("a"))
        .authority_snapshot(),
    ]
    assert all(snapshot != first for snapshot in changed)


def test_snapshot_survives_replacing_the_workspace_directory(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    before = AgentSession.builder(ScriptedModel([]), workspace).authority_snapshot()
    workspace.rename(tmp_path / "old")
    workspace.mkdir()
    after = AgentSession.builder(ScriptedModel([]), workspace).authority_snapshot()
    assert before.workspace.path == after.workspace.path
    assert before != after  # same path, different directory: authority drifted


def test_snapshot_json_round_trip_and_session_value(make_builder: Make) -> None:
    builder = make_builder(ScriptedModel([])).tool(ScriptedTool("a"))
    snapshot = builder.authority_snapshot()
    assert AgentAuthoritySnapshot.from_json(snapshot.to_json()) == snapshot
    with builder.build() as session:
        assert session.authority_snapshot == snapshot
    for bad in ["[]", '{"version": 99}', "not json", '{"version": 1}']:
        with pytest.raises(SerializationError):
            AgentAuthoritySnapshot.from_json(bad)


def test_enabled_tools_subset(make_builder: Make) -> None:
    builder = make_builder(ScriptedModel([])).tool(ScriptedTool("a")).tool(ScriptedTool("b"))
    with builder.build() as session:
        before = session.authority_snapshot
        assert session.available_tools == ("a", "b")
        assert session.enabled_tools == ("a", "b")
        session.set_enabled_tools(["b"])
        assert session.enabled_tools == ("b",)
        with pytest.raises(ToolUnavailable, match="zzz"):
            session.set_enabled_tools(["a", "zzz"])
        assert session.enabled_tools == ("b",)  # unchanged by the failed call
        assert session.authority_snapshot == before


def test_ceiling_settings_are_validated(make_builder: Make) -> None:
    with pytest.raises(ValueError, match="positive"):
        make_builder(ScriptedModel([])).max_messages(0)
    assert ResourceCeilings().max_messages == 4096
    with pytest.raises(ValueError, match="shell timeout"):
        make_builder(ScriptedModel([])).shell_timeout_seconds(20 * 60 + 1)
