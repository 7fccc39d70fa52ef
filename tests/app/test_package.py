"""Agent packages: load, export (lossless round trip), validation, structural diff."""

from __future__ import annotations

import filecmp
import os
import shutil
from pathlib import Path

import attrs
import pytest

from emelex.agent import DenyAll, ModelFailed
from emelex.app import (
    MAX_FILE_BYTES,
    Agent,
    Change,
    Engine,
    Harness,
    InvalidPackage,
    LoadedPackage,
    MissingBinding,
    PackageError,
    PackageInfo,
    WorkspacePolicy,
    diff_packages,
    export_agent,
    find_packages,
    load_agent,
    load_package,
    validate_package,
)
from emelex.app._plugins import PluginIntegration
from emelex.model import Client
from emelex.testing import Say, ScriptedModel

ACTORS = Path(__file__).parent.parent.parent / "actors"
EXAMPLES = ["repo-reviewer", "shell-operator", "writer"]
GREETER = Path(__file__).parent.parent / "fixtures" / "plugins" / "greeter"


def same_tree(a: Path, b: Path) -> bool:
    compared = filecmp.dircmp(a, b)
    if compared.left_only or compared.right_only or compared.funny_files:
        return False
    _, mismatch, errors = filecmp.cmpfiles(a, b, compared.common_files, shallow=False)
    if mismatch or errors:
        return False
    return all(same_tree(a / d, b / d) for d in compared.common_dirs)


def write_package(root: Path, manifest: str, instructions: str = "Do the work.\n") -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "agent.toml").write_text(manifest)
    (root / "instructions.md").write_text(instructions)
    return root


MINIMAL = '[agent]\nname = "mini"\n'


def test_the_examples_are_found() -> None:
    assert [p.name for p in find_packages(ACTORS)] == EXAMPLES


@pytest.mark.parametrize("name", EXAMPLES)
def test_every_example_validates_loads_and_round_trips(name: str, tmp_path: Path) -> None:
    source = ACTORS / name
    assert validate_package(source) == []
    package = load_package(source)
    exported = tmp_path / "out"
    export_agent(package, exported)
    # The examples are written in canonical form: the export is byte-identical.
    assert same_tree(source, exported)
    again = load_package(exported)
    assert again == package
    assert again.agent == load_agent(source)
    second = tmp_path / "second"
    export_agent(again, second)
    assert same_tree(exported, second)
    assert diff_packages(source, exported) == []


def test_example_contents() -> None:
    reviewer = load_agent(ACTORS / "repo-reviewer")
    assert not reviewer.workspace_policy.write
    assert {s.name for s in reviewer.skills} == {"code-review", "security-audit"}
    assert [f.path for f in reviewer.files if f.readonly] == ["review-checklist.md"]
    package = load_package(ACTORS / "writer")
    writer = package.agent
    assert writer.workspace_policy.write
    assert package.info == PackageInfo(
        description="Drafts and edits documents in its workspace; every write asks for approval.",
        version="1.0.0",
        binding="writing",
        preset="worker",
    )
    assert writer.options.temperature == 0.7
    loaded = load_package(ACTORS / "shell-operator")
    assert isinstance(loaded, LoadedPackage)
    assert loaded.harness() == Harness.shell_worker()
    operator = loaded.agent
    shell = operator.capability("shell")
    assert shell is not None
    assert dict(getattr(shell, "options", {})) == {
        "output_bytes": 32768,
        "timeout_seconds": 300.0,
    }


async def test_a_loaded_example_runs_with_a_bound_model() -> None:
    client = Client(ScriptedModel([[Say("Looks good.")]]))
    package = load_package(ACTORS / "repo-reviewer", bindings={"default": client})
    agent = package.agent
    assert agent.client is client
    async with Engine() as engine:
        session = await engine.create(agent).harness(package.harness()).start()
        assert "load_skill" in session.tools
        assert "write_file" not in session.tools
        context = await session.inspect()
        prompt = context.system_prompt or ""
        assert "You review source code." in prompt
        assert "code-review" in prompt
        turn = await session.send_and_wait("Review it.")
        assert "Looks good." in str(turn)


async def test_without_bindings_the_model_is_a_placeholder() -> None:
    agent = load_agent(ACTORS / "writer")
    assert agent == load_agent(ACTORS / "writer")
    assert isinstance(agent.approver, DenyAll)
    async with Engine() as engine:
        session = await engine.create(agent).harness(Harness.worker()).start()
        assert "edit_file" in session.tools
        with pytest.raises(ModelFailed, match="model binding 'writing' was not resolved"):
            await session.send_and_wait("hello")


def test_a_missing_binding_is_an_error() -> None:
    client = Client(ScriptedModel([]))
    with pytest.raises(MissingBinding, match="writing"):
        load_agent(ACTORS / "writer", bindings={"default": client})
    agent = load_agent(ACTORS / "writer", bindings={"writing": ScriptedModel([])})
    assert isinstance(agent.client, Client)


def test_the_approver_is_host_configuration() -> None:
    approver = DenyAll()
    agent = load_agent(ACTORS / "shell-operator", approver=approver)
    assert agent.approver is approver


def test_validation_reports_every_problem_at_once(tmp_path: Path) -> None:
    root = tmp_path / "bad"
    manifest = (
        "[agent]\n"
        'name = "bad name!"\n'
        'colour = "blue"\n'
        "\n"
        "[model]\n"
        'binding = "https://user:hunter2@example.com/v1"\n'
        'api_key = "sk-123"\n'
        "\n"
        "[harness]\n"
        'preset = "wizard"\n'
        "\n"
        "[workspace]\n"
        'policy = "read_only"\n'
        "\n"
        "[[capabilities]]\n"
        'id = "teleport"\n'
        "\n"
        "[[capabilities]]\n"
        'id = "shell"\n'
        'options = { timeout_seconds = -1, colour = "red" }\n'
        "\n"
        "[extras]\n"
    )
    write_package(root, manifest, "   \n")
    (root / "files").mkdir()
    (root / "files" / "a.txt").write_text("a")
    (root / "readonly").mkdir()
    (root / "readonly" / "a.txt").write_text("a")
    (root / "files" / "big.bin").write_bytes(b"x" * (MAX_FILE_BYTES + 1))
    os.symlink("/etc/passwd", root / "files" / "link")
    (root / "skills" / "one").mkdir(parents=True)
    (root / "skills" / "one" / "SKILL.md").write_text("no front matter\n")
    (root / "skills" / "two").mkdir()
    (root / "skills" / "two" / "SKILL.md").write_text("---\nname: other\ndescription: x\n---\nb\n")
    (root / "skills" / "three").mkdir()
    (root / "README.md").write_text("hi")
    (root / "files" / "empty").mkdir()
    problems = validate_package(root)
    codes = {(p.path, p.code) for p in problems}
    expected = {
        ("agent.toml", "bad-name"),
        ("agent.toml", "unknown-key"),
        ("agent.toml", "bad-binding"),
        ("agent.toml", "credential"),
        ("agent.toml", "unknown-preset"),
        ("agent.toml", "unknown-capability"),
        ("agent.toml", "bad-policy"),
        ("agent.toml", "bad-value"),
        ("instructions.md", "blank-instructions"),
        ("readonly/a.txt", "duplicate"),
        ("files/big.bin", "file-too-large"),
        ("files/link", "symlink"),
        ("skills/one/SKILL.md", "bad-front-matter"),
        ("skills/two/SKILL.md", "bad-front-matter"),
        ("skills/three/SKILL.md", "bad-skill"),
        ("README.md", "unknown-entry"),
        ("files/empty", "empty-directory"),
    }
    assert expected <= codes, expected - codes
    by_message = {p.message: p for p in problems}
    colour = next(m for m in by_message if "agent.colour" in m)
    assert by_message[colour].line == 3
    assert next(p for p in problems if p.code == "unknown-preset").line == 10
    assert any("api_key" in p.message and p.line == 7 for p in problems)
    assert all(str(p).startswith(p.path) for p in problems)
    with pytest.raises(InvalidPackage) as caught:
        load_agent(root)
    assert len(caught.value.problems) == len(problems)


def test_every_bad_model_option_is_reported(tmp_path: Path) -> None:
    manifest = MINIMAL + '\n[model]\nmax_tokens = 0\nstop = "x"\nseed = true\n'
    problems = validate_package(write_package(tmp_path / "p", manifest))
    assert [(p.code, p.line) for p in problems] == [
        ("bad-value", 5),
        ("bad-value", 7),
        ("bad-value", 6),
    ]


def test_diff_needs_two_readable_packages(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(InvalidPackage, match="missing-manifest"):
        diff_packages(ACTORS / "writer", tmp_path / "empty")
    with pytest.raises(InvalidPackage, match="not-a-directory"):
        diff_packages(tmp_path / "nowhere", ACTORS / "writer")


def test_bad_toml_reports_its_line(tmp_path: Path) -> None:
    root = write_package(tmp_path / "p", '[agent]\nname = "x"\nversion = \n')
    [problem] = validate_package(root)
    assert (problem.code, problem.line) == ("bad-toml", 3)


def test_missing_manifest_and_instructions(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    codes = {p.code for p in validate_package(tmp_path / "empty")}
    assert codes == {"missing-manifest", "missing-instructions"}
    assert [p.code for p in validate_package(tmp_path / "nowhere")] == ["not-a-directory"]


def test_plugin_paths_must_stay_inside(tmp_path: Path) -> None:
    root = write_package(
        tmp_path / "p", MINIMAL + '\n[plugins]\npaths = ["../elsewhere", "plugins/none"]\n'
    )
    codes = [p.code for p in validate_package(root)]
    assert codes == ["path-escape", "missing-plugin"]


def test_the_builders_own_checks_are_reported(tmp_path: Path) -> None:
    root = write_package(tmp_path / "p", MINIMAL + '\n[[capabilities]]\nid = "skills"\n')
    assert [p.code for p in validate_package(root)] == ["bad-value"]


def test_a_minimal_package_gets_defaults(tmp_path: Path) -> None:
    root = write_package(tmp_path / "p", MINIMAL)
    package = load_package(root)
    assert package.info == PackageInfo()
    agent = package.agent
    assert agent.workspace_policy == WorkspacePolicy.read_only()
    out = tmp_path / "out"
    export_agent(agent, out)
    assert (out / "agent.toml").read_text() == (
        '[agent]\nname = "mini"\ndescription = ""\nversion = "0.1.0"\n\n'
        '[model]\nbinding = "default"\n\n[harness]\npreset = "base"\n\n'
        '[workspace]\npolicy = "read_only"\nhidden = []\nrecursive_delete = false\n'
    )
    assert diff_packages(root, out) == [
        Change("added", "agent.description", None, '""'),
        Change("added", "agent.version", None, '"0.1.0"'),
        Change("added", "harness.preset", None, '"base"'),
        Change("added", "model.binding", None, '"default"'),
        Change("added", "workspace.hidden", None, "[]"),
        Change("added", "workspace.policy", None, '"read_only"'),
        Change("added", "workspace.recursive_delete", None, "false"),
    ]


def test_export_of_a_built_agent_and_tricky_text(tmp_path: Path) -> None:
    agent = (
        Agent.builder()
        .name("built")
        .instructions('Quote "this" \\ and\ttabs\nand ünïcode\x7f\n')
        .model(ScriptedModel([]))
        .workspace_policy(WorkspacePolicy.read_write().hide("secret/**"))
        .approver(DenyAll())
        .file("notes/a.md", "a")
        .readonly_file("ref.bin", b"\x00\xff")
        .skill("quoted", '"All quoted"', "Body.\n")  # packages order skills by name
        .skill("tidy", 'Tidy up: "quotes" too', "Body.\n")
        .capability("web_fetch", response_bytes=1000)
        .build()
    )
    out = tmp_path / "out"
    export_agent(agent, out, description='say "hi"', version="2.0", preset="worker")
    assert validate_package(out) == []
    loaded = load_package(out, bindings={"default": agent.client}, approver=agent.approver)
    # the overrides become the loaded agent's own metadata; nothing else changes
    info = PackageInfo(description='say "hi"', version="2.0", preset="worker")
    assert loaded.agent == attrs.evolve(agent, package=info)
    assert loaded.info == info
    again = tmp_path / "again"
    export_agent(loaded, again)
    assert same_tree(out, again)


def test_export_refuses_what_is_not_portable(tmp_path: Path) -> None:
    from emelex.app import FunctionTool

    async def run(arguments: dict[str, object]) -> str:
        return ""

    echo = FunctionTool("echo", "Echo.", {"type": "object"}, run)
    agent = Agent.builder().name("x").instructions("i").model(ScriptedModel([])).tool(echo)
    with pytest.raises(PackageError, match="code-defined tools"):
        export_agent(agent.build(), tmp_path / "out")
    built = Agent.builder().name("x").instructions("i").model(ScriptedModel([])).build()
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    with pytest.raises(PackageError, match="not empty"):
        export_agent(built, tmp_path / "full")
    with pytest.raises(PackageError, match="preset"):
        export_agent(built, tmp_path / "o2", preset="wizard")


def test_diff_reports_files_skills_and_fields(tmp_path: Path) -> None:
    a = tmp_path / "a"
    shutil.copytree(ACTORS / "writer", a)
    b = tmp_path / "b"
    shutil.copytree(ACTORS / "writer", b)
    (b / "files" / "style-guide.md").write_text("changed\n")
    (b / "files" / "new.md").write_text("new\n")
    (b / "files" / "drafts" / "release-notes.md").unlink()
    shutil.rmtree(b / "skills" / "edit-prose")
    text = (b / "agent.toml").read_text().replace('version = "1.0.0"', 'version = "1.1.0"')
    (b / "agent.toml").write_text(text)
    changes = diff_packages(a, b)
    summary = [(c.kind, c.path) for c in changes]
    assert summary == [
        ("changed", "agent.version"),
        ("removed", "files/drafts/release-notes.md"),
        ("added", "files/new.md"),
        ("changed", "files/style-guide.md"),
        ("removed", "skills/edit-prose"),
    ]
    assert str(changes[0]) == '~ agent.version: "1.0.0" -> "1.1.0"'


async def test_a_package_with_a_plugin(tmp_path: Path) -> None:
    root = write_package(tmp_path / "p", MINIMAL + '\n[plugins]\npaths = ["plugins/greeter"]\n')
    shutil.copytree(GREETER, root / "plugins" / "greeter")
    assert validate_package(root) == []
    agent = load_agent(root, bindings={"default": ScriptedModel([])})
    assert agent.plugins == (root.resolve() / "plugins" / "greeter",)
    async with Engine(integrations=[PluginIntegration()]) as engine:
        context = await engine.create(agent).inspect()
        assert "greet" in context.tool_names
    out = tmp_path / "out"
    export_agent(agent, out)
    assert (out / "plugins" / "greeter" / "plugin.toml").is_file()
    assert validate_package(out) == []
    assert diff_packages(root, out) == [
        Change("added", "agent.description", None, '""'),
        Change("added", "agent.version", None, '"0.1.0"'),
        Change("added", "harness.preset", None, '"base"'),
        Change("added", "model.binding", None, '"default"'),
        Change("added", "workspace.hidden", None, "[]"),
        Change("added", "workspace.policy", None, '"read_only"'),
        Change("added", "workspace.recursive_delete", None, "false"),
    ]


def test_agent_load_and_export_are_the_package_functions(tmp_path: Path) -> None:
    from emelex.app import Agent, export_agent, load_agent
    from emelex.testing import ScriptedModel

    builder = Agent.builder().name("tiny").instructions("Be brief.").model(ScriptedModel([]))
    agent = builder.build()
    agent.export(tmp_path / "pkg")
    export_agent(agent, tmp_path / "same")
    assert (tmp_path / "pkg" / "agent.toml").read_bytes() == (
        tmp_path / "same" / "agent.toml"
    ).read_bytes()
    model = ScriptedModel([])
    loaded = Agent.load(tmp_path / "pkg", bindings={"default": model})
    direct = load_agent(tmp_path / "pkg", bindings={"default": model})
    assert (loaded.name, loaded.instructions) == ("tiny", "Be brief.")
    assert (direct.name, direct.instructions, direct.client.model) == (
        loaded.name,
        loaded.instructions,
        loaded.client.model,
    )
