"""The agent.toml writer: tomlkit does the escaping, the layout is the canonical one."""

from __future__ import annotations

import tempfile
import tomllib
import unicodedata
from pathlib import Path

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from emelex.agent import DenyAll
from emelex.app import (
    Agent,
    InvalidAgent,
    PackageError,
    PackageInfo,
    RestartMode,
    WorkspacePolicy,
    export_agent,
    load_package,
    manifest_text,
    validate_package,
)
from emelex.app._package_write import toml_value
from emelex.model import GenerationOptions
from emelex.testing import ScriptedModel

# Written by the hand-made writer this library replaced (commit e195629), byte for byte:
# the switch to tomlkit changed no export of ordinary text.
BEFORE = (
    "[agent]\n"
    'name = "rich.agent-1"\n'
    'description = "A \\"quoted\\" \\\\ description, ünï€ — with emoji 😀"\n'
    'version = "2.0.0-rc.1+b7"\n'
    "\n"
    "[model]\n"
    'binding = "my.model_x"\n'
    "max_tokens = 512\n"
    "temperature = 0.25\n"
    "top_p = 1.0\n"
    "seed = 7\n"
    'stop = ["</s>", "say \\"no\\"", "back\\\\slash", "new\\nline", "ünï€😀"]\n'
    "\n"
    "[harness]\n"
    'preset = "worker"\n'
    "\n"
    "[workspace]\n"
    'policy = "read_write"\n'
    'hidden = ["secret/**", "we\\"ird\\\\name"]\n'
    "recursive_delete = false\n"
    "\n"
    "[[capabilities]]\n"
    'id = "web_fetch"\n'
    "options = { response_bytes = 1000 }\n"
    "\n"
    "[[capabilities]]\n"
    'id = "shell"\n'
    "options = { output_bytes = 32768, timeout_seconds = 300.0 }\n"
    "\n"
    "[[capabilities]]\n"
    'id = "datetime"\n'
    "\n"
    "[plugins]\n"
    'paths = ["plugins/greeter", "plugins/other"]\n'
)


def rich(
    description: str = 'A "quoted" \\ description, ünï€ — with emoji 😀',
) -> tuple[Agent, PackageInfo]:
    agent = (
        Agent.builder()
        .name("rich.agent-1")
        .instructions("x")
        .model(ScriptedModel([]))
        .workspace_policy(WorkspacePolicy.read_write().hide("secret/**").hide('we"ird\\name'))
        .approver(DenyAll())
        .options(
            GenerationOptions(
                max_tokens=512,
                temperature=0.25,
                top_p=1.0,
                seed=7,
                stop=("</s>", 'say "no"', "back\\slash", "new\nline", "ünï€😀"),
            )
        )
        .capability("web_fetch", response_bytes=1000)
        .capability("shell", output_bytes=32768, timeout_seconds=300.0)
        .capability("datetime")
        .build()
    )
    info = PackageInfo(
        description=description, version="2.0.0-rc.1+b7", binding="my.model_x", preset="worker"
    )
    return agent, info


def test_the_manifest_is_byte_identical_to_the_hand_written_writers() -> None:
    agent, info = rich()
    assert manifest_text(agent, info, ["plugins/greeter", "plugins/other"]) == BEFORE


def test_control_characters_are_escaped_and_read_back() -> None:
    # A terminal escape in a description must not reach the file raw (a `cat` of the
    # manifest would run it); the hand-written writer used upper-case \\u escapes, tomlkit
    # uses short forms and lower case: the same TOML value.
    nasty = "title\x1b]0;pwned\x07 clear\x1b[2J del\x7f nul\x00 cr\r tab\t bs\b ff\x0c"
    agent, info = rich(nasty)
    text = manifest_text(agent, info)
    assert all(ch == "\n" or unicodedata.category(ch) != "Cc" for ch in text)
    assert tomllib.loads(text)["agent"]["description"] == nasty


@given(st.text(max_size=200), st.lists(st.text(min_size=1, max_size=20), max_size=5))
def test_any_text_round_trips_through_the_manifest(description: str, stop: list[str]) -> None:
    _, info = rich(description)
    builder = Agent.builder().name("a").instructions("x").model(ScriptedModel([]))
    built = builder.options(GenerationOptions(stop=tuple(stop))).build()
    parsed = tomllib.loads(manifest_text(built, info))
    assert parsed["agent"]["description"] == description
    assert parsed["model"].get("stop", []) == stop


def test_values_tomlkit_cannot_write_are_package_errors() -> None:
    assert toml_value({"b": [1, 2.5], "a": True}) == "{ a = true, b = [1, 2.5] }"
    assert toml_value({}) == "{}"
    for value in (None, object(), b"bytes", {"nested": None}):
        with pytest.raises(PackageError, match="cannot write"):
            toml_value(value)


def test_export_writes_what_load_reads(tmp_path: Path) -> None:
    agent, info = rich()
    export_agent(agent, tmp_path / "out", description=info.description, binding="my.model_x")
    agent = attrs.evolve(agent, package=PackageInfo(info.description, binding="my.model_x"))
    package = load_package(
        tmp_path / "out", bindings={"my.model_x": agent.client}, approver=agent.approver
    )
    assert package.agent == agent
    assert package.info.description == info.description
    export_agent(package, tmp_path / "again")
    again = (tmp_path / "again" / "agent.toml").read_bytes()
    assert again == (tmp_path / "out" / "agent.toml").read_bytes()


# -- issue 30 break 7: Agent.export wrote default metadata -------------------------------

ACTORS = Path(__file__).parent.parent.parent / "actors"


@pytest.mark.parametrize("name", ["repo-reviewer", "shell-operator", "writer"])
def test_agent_export_keeps_every_actors_metadata(name: str, tmp_path: Path) -> None:
    loaded = Agent.load(ACTORS / name)
    loaded.export(tmp_path / "out")
    again = Agent.load(tmp_path / "out")
    assert again.package == load_package(ACTORS / name).info
    assert again.package != PackageInfo()  # every example says more than the defaults
    # the placeholder model of an unbound load is equal across loads, so is the agent
    assert again == loaded
    manifest = "agent.toml"
    assert (tmp_path / "out" / manifest).read_bytes() == (ACTORS / name / manifest).read_bytes()


_VERSIONS = st.from_regex(r"[0-9A-Za-z][0-9A-Za-z.+_-]{0,20}", fullmatch=True)
_BINDINGS = st.from_regex(r"[a-z][a-z0-9_.-]{0,20}", fullmatch=True)
_INFOS = st.builds(
    PackageInfo,
    description=st.text(max_size=80),
    version=_VERSIONS,
    binding=_BINDINGS,
    preset=st.sampled_from(["base", "conversation", "worker", "shell_worker"]),
)


_LINE = st.text(st.characters(codec="utf-8", exclude_categories=["Cc"]), max_size=40)
_SKILLS = st.dictionaries(
    st.from_regex(r"[a-z0-9][a-z0-9-]{0,10}", fullmatch=True),
    st.tuples(_LINE.map(str.strip).filter(bool), st.text(max_size=60).filter(str.strip)),
    max_size=2,
)
_OPTIONS = st.builds(
    GenerationOptions,
    max_tokens=st.none() | st.integers(1, 4096),
    temperature=st.none() | st.floats(0, 2, allow_nan=False),
    top_p=st.none() | st.floats(0.01, 1, allow_nan=False),
    seed=st.none() | st.integers(0, 2**31),
    stop=st.lists(st.text(min_size=1, max_size=8), max_size=3, unique=True).map(tuple),
)


@settings(max_examples=40, deadline=None)
@given(
    info=_INFOS,
    name=st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,30}", fullmatch=True),
    instructions=st.text(min_size=1, max_size=80).filter(str.strip),
    write=st.booleans(),
    options=_OPTIONS,
    files=st.dictionaries(st.from_regex(r"[a-z]{1,8}\.txt", fullmatch=True), st.binary(max_size=9)),
    readonly=st.dictionaries(
        st.from_regex(r"r[a-z]{0,7}\.md", fullmatch=True), st.binary(max_size=9)
    ),
    skills=_SKILLS,
    web_fetch=st.none() | st.integers(1, 10**6),
    hidden=st.lists(st.from_regex(r"[a-z]{1,6}/\*\*", fullmatch=True), max_size=2, unique=True),
    on_restart=st.sampled_from(["resume", "settle"]),
)
def test_generated_agents_round_trip_through_agent_export(
    info: PackageInfo,
    name: str,
    instructions: str,
    write: bool,
    options: GenerationOptions,
    files: dict[str, bytes],
    readonly: dict[str, bytes],
    skills: dict[str, tuple[str, str]],
    web_fetch: int | None,
    hidden: list[str],
    on_restart: RestartMode,
) -> None:
    policy = WorkspacePolicy.read_write() if write else WorkspacePolicy.read_only()
    for glob in hidden:
        policy = policy.hide(glob)
    builder = (
        Agent.builder()
        .name(name)
        .instructions(instructions)
        .model(ScriptedModel([]))
        .approver(DenyAll())
        .workspace_policy(policy)
        .options(options)
        .package(info)
        .on_restart(on_restart)
    )
    for path, content in sorted(files.items()):  # packages list files in order
        builder.file(path, content)
    for path, content in sorted(readonly.items()):
        builder.readonly_file(path, content)
    for skill, (description, body) in sorted(skills.items()):
        builder.skill(skill, description, body)
    if skills:
        builder.capability("skills")
    if web_fetch is not None:
        builder.capability("web_fetch", response_bytes=web_fetch)
    agent = builder.build()
    with tempfile.TemporaryDirectory() as folder:
        if info.preset == "shell_worker" and not write:
            # the reader refuses this pair, so the writer must not produce it
            with pytest.raises(PackageError, match="needs a read_write"):
                agent.export(Path(folder) / "out")
            return
        agent.export(Path(folder) / "out")
        again = Agent.load(
            Path(folder) / "out", bindings={info.binding: agent.client}, approver=agent.approver
        )
    assert again == agent
    assert again.package == info
    assert again.on_restart == on_restart


def test_a_manifest_says_what_a_restart_does_with_its_agents_turn(tmp_path: Path) -> None:
    """``[harness] on_restart``: left out means resume; settle is kept through export;
    any other value is a problem on its line."""
    agent = Agent.load(ACTORS / "writer", bindings={"writing": ScriptedModel([])})
    assert agent.on_restart == "resume"
    settling = attrs.evolve(agent, on_restart="settle")
    settling.export(tmp_path / "settle")
    manifest = (tmp_path / "settle" / "agent.toml").read_text()
    assert 'on_restart = "settle"' in manifest
    again = Agent.load(tmp_path / "settle", bindings={"writing": ScriptedModel([])})
    assert again.on_restart == "settle"
    agent.export(tmp_path / "resume")
    assert "on_restart" not in (tmp_path / "resume" / "agent.toml").read_text()
    (tmp_path / "settle" / "agent.toml").write_text(
        manifest.replace('on_restart = "settle"', 'on_restart = "sometimes"')
    )
    problems = validate_package(tmp_path / "settle")
    (problem,) = [p for p in problems if "on_restart" in p.message]
    assert problem.code == "bad-value"
    assert problem.line == manifest.splitlines().index('on_restart = "settle"') + 1


def test_the_builder_refuses_metadata_that_is_not_package_info() -> None:
    builder = Agent.builder().name("a").instructions("x").model(ScriptedModel([]))
    with pytest.raises(InvalidAgent, match="PackageInfo"):
        builder.package({"version": "1"}).build()  # type: ignore[arg-type]


def test_export_refuses_metadata_the_reader_would_refuse(tmp_path: Path) -> None:
    builder = Agent.builder().name("a").instructions("x").model(ScriptedModel([]))
    agent = builder.package(PackageInfo(version="1 0; rm -rf")).build()
    with pytest.raises(PackageError, match="not a version"):
        agent.export(tmp_path / "bad-version")
    assert not (tmp_path / "bad-version").exists()  # refused before anything was written
    with pytest.raises(TypeError):
        PackageInfo(version=1)  # type: ignore[arg-type]
