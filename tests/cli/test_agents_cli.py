"""``emelex agents list|validate|export|diff`` over agent packages."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from emelex.cli._agents import add_agents_parser, agents_command

ROOT = Path(__file__).parent.parent.parent
ACTORS = ROOT / "actors"


def namespace(action: str, *paths: str | Path, as_json: bool = False) -> argparse.Namespace:
    return argparse.Namespace(action=action, paths=[str(p) for p in paths], json=as_json)


def test_list_shows_every_example(capsys: pytest.CaptureFixture[str]) -> None:
    assert agents_command(namespace("list", ACTORS)) == 0
    out = capsys.readouterr().out
    for name in ("repo-reviewer 1.0.0", "writer 1.0.0", "shell-operator 1.0.0"):
        assert name in out
    assert "[shell_worker, model default]" in out


def test_list_defaults_to_actors_in_the_working_directory(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)
    assert agents_command(namespace("list", as_json=True)) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [row["name"] for row in rows] == ["repo-reviewer", "shell-operator", "writer"]
    assert all(row["problems"] == 0 for row in rows)


def test_list_marks_invalid_packages(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    shutil.copytree(ACTORS / "writer", tmp_path / "writer")
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "agent.toml").write_text("[agent\n")
    assert agents_command(namespace("list", tmp_path)) == 0
    out = capsys.readouterr().out
    assert "broken  INVALID (2 problems)" in out
    assert "writer 1.0.0" in out
    assert agents_command(namespace("list", tmp_path / "nowhere")) == 3


def test_validate_ok_and_every_problem(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert (
        agents_command(namespace("validate", *(ACTORS / n for n in ["writer", "repo-reviewer"])))
        == 0
    )
    assert capsys.readouterr().out.count(": ok") == 2
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "agent.toml").write_text('[agent]\nname = "x"\nflavour = 1\n[harness]\npreset = "z"\n')
    (bad / "instructions.md").write_text(" ")
    assert agents_command(namespace("validate", bad)) == 3
    out = capsys.readouterr().out
    assert "3 problems" in out
    assert "agent.toml:3: unknown key agent.flavour [unknown-key]" in out
    assert "agent.toml:5:" in out
    assert "instructions.md: instructions.md is blank [blank-instructions]" in out
    assert agents_command(namespace("validate", bad, as_json=True)) == 3
    report = json.loads(capsys.readouterr().out)
    assert {p["code"] for p in report[str(bad)]} == {
        "unknown-key",
        "unknown-preset",
        "blank-instructions",
    }


def test_validate_a_folder_of_packages(capsys: pytest.CaptureFixture[str]) -> None:
    assert agents_command(namespace("validate", ACTORS)) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == [f"{ACTORS / name}: ok" for name in ["repo-reviewer", "shell-operator", "writer"]]


def test_export_then_diff(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    dest = tmp_path / "copy"
    assert agents_command(namespace("export", ACTORS / "shell-operator", dest)) == 0
    assert agents_command(namespace("diff", ACTORS / "shell-operator", dest)) == 0
    capsys.readouterr()
    (dest / "instructions.md").write_text("Something else.\n")
    assert agents_command(namespace("diff", ACTORS / "shell-operator", dest)) == 1
    assert capsys.readouterr().out.startswith("~ instructions: sha256:")
    assert agents_command(namespace("diff", ACTORS / "writer", dest, as_json=True)) == 1
    changes = json.loads(capsys.readouterr().out)
    assert {
        "kind": "changed",
        "path": "agent.name",
        "before": '"writer"',
        "after": '"shell-operator"',
    } in changes
    # A non-empty destination or an invalid package is refused.
    assert agents_command(namespace("export", ACTORS / "writer", dest)) == 3
    assert "not empty" in capsys.readouterr().err
    assert agents_command(namespace("export", tmp_path / "none", tmp_path / "x")) == 3
    assert agents_command(namespace("diff", tmp_path / "none", dest)) == 3


def test_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert agents_command(namespace("export", "only-one")) == 2
    assert agents_command(namespace("diff")) == 2
    assert agents_command(namespace("validate")) == 2
    assert "usage: emelex agents" in capsys.readouterr().err


def test_the_parser_helper(capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser(prog="emelex")
    add_agents_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["agents", "validate", str(ACTORS / "writer"), "--json"])
    assert agents_command(args) == 0
    assert json.loads(capsys.readouterr().out) == {str(ACTORS / "writer"): []}


def test_the_real_command(tmp_path: Path) -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "emelex.cli", "agents", *args],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
            env=dict(os.environ),
        )

    listed = run("list")
    assert listed.returncode == 0, listed.stderr
    assert "repo-reviewer 1.0.0" in listed.stdout
    assert run("validate", "actors/writer").returncode == 0
    bad = tmp_path / "bad"
    bad.mkdir()
    invalid = run("validate", str(bad))
    assert invalid.returncode == 3
    assert "missing-manifest" in invalid.stdout
    dest = tmp_path / "out"
    assert run("export", "actors/repo-reviewer", str(dest)).returncode == 0
    assert run("diff", "actors/repo-reviewer", str(dest)).returncode == 0
    assert run("diff", "actors/repo-reviewer", "actors/writer").returncode == 1


def test_package_text_reaches_the_terminal_neutralized(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    package = tmp_path / "packages" / "evil"
    shutil.copytree(ACTORS / "writer", package)
    manifest = package / "agent.toml"
    manifest.write_text(
        manifest.read_text().replace(
            'description = "Drafts', 'description = "\\u001b]0;pwned\\u0007\\u202eDrafts'
        )
    )
    assert agents_command(namespace("list", tmp_path / "packages")) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out and "\u202e" not in out
    assert "\\x1b]0;pwned\\x07\\u202eDrafts" in out


@pytest.mark.parametrize("name", ["repo-reviewer", "shell-operator", "writer"])
def test_agents_export_and_agent_export_write_the_same_package(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Issue 30 break 7: the two export paths disagreed on the metadata.
    from emelex.app import Agent

    assert agents_command(namespace("export", ACTORS / name, tmp_path / "cli")) == 0
    Agent.load(ACTORS / name).export(tmp_path / "api")
    capsys.readouterr()
    assert agents_command(namespace("diff", tmp_path / "cli", tmp_path / "api")) == 0
    for path in sorted((tmp_path / "cli").rglob("*")):
        twin = tmp_path / "api" / path.relative_to(tmp_path / "cli")
        assert path.is_dir() == twin.is_dir()
        if path.is_file():
            assert path.read_bytes() == twin.read_bytes(), path
