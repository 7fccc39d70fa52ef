"""Skills are complete directories: every file, bounded, read without following links,
and reachable by the model through ``load_skill(name, file=...)``."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from emelex.app import (
    MAX_SKILL_BYTES,
    MAX_SKILL_DEPTH,
    MAX_SKILL_FILE_BYTES,
    MAX_SKILL_FILES,
    Engine,
    Harness,
    InvalidSkill,
    SkillFile,
    SkillTooLarge,
    diff_packages,
    export_agent,
    load_package,
    validate_package,
)
from emelex.app._skill import read_skill_directory
from emelex.testing import Call, Say, ScriptedModel

from .helpers import builder, outputs, run_collecting

SKILL_MD = "---\nname: deploy\ndescription: Ship a release.\n---\nRun scripts/ship.sh.\n"


def skill_package(root: Path) -> Path:
    root.mkdir(parents=True)
    (root / "agent.toml").write_text('[agent]\nname = "shipper"\n\n[harness]\npreset = "worker"\n')
    (root / "instructions.md").write_text("Ship things.\n")
    skill = root / "skills" / "deploy"
    (skill / "scripts").mkdir(parents=True)
    (skill / "reference" / "deep").mkdir(parents=True)
    (skill / "SKILL.md").write_text(SKILL_MD)
    (skill / "scripts" / "ship.sh").write_text("#!/bin/sh\necho shipping\n")
    (skill / "reference" / "deep" / "notes.md").write_text("Check the changelog.\n")
    (skill / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\xff")
    return root


def problems_of(root: Path) -> list[tuple[str, str]]:
    return [(p.path, p.code) for p in validate_package(root)]


def test_a_package_skill_keeps_every_file(tmp_path: Path) -> None:
    root = skill_package(tmp_path / "p")
    assert validate_package(root) == []
    (skill,) = load_package(root).agent.skills
    assert skill.instructions == "Run scripts/ship.sh.\n"
    assert skill.files == (
        SkillFile("logo.png", b"\x89PNG\r\n\x1a\n\x00\xff"),
        SkillFile("reference/deep/notes.md", b"Check the changelog.\n"),
        SkillFile("scripts/ship.sh", b"#!/bin/sh\necho shipping\n"),
    )
    assert skill.files[0].text is None and skill.files[2].text == "#!/bin/sh\necho shipping\n"


def test_export_writes_the_whole_directory_and_diff_sees_each_file(tmp_path: Path) -> None:
    root = skill_package(tmp_path / "p")
    package = load_package(root)
    out = tmp_path / "out"
    export_agent(package, out)
    for name in ("SKILL.md", "scripts/ship.sh", "reference/deep/notes.md", "logo.png"):
        source = root / "skills" / "deploy" / name
        assert (out / "skills" / "deploy" / name).read_bytes() == source.read_bytes()
    assert load_package(out) == package
    (out / "skills" / "deploy" / "scripts" / "ship.sh").write_text("echo changed\n")
    (out / "skills" / "deploy" / "logo.png").unlink()
    changes = diff_packages(root, out)
    assert [(c.kind, c.path) for c in changes if c.path.startswith("skills/")] == [
        ("removed", "skills/deploy/logo.png"),
        ("changed", "skills/deploy/scripts/ship.sh"),
    ]


async def test_the_model_lists_and_reads_a_skills_files(tmp_path: Path) -> None:
    model = ScriptedModel(
        [
            [Call("load_skill", {"name": "deploy"})],
            [Call("load_skill", {"name": "deploy", "file": "scripts/ship.sh"})],
            [Call("load_skill", {"name": "deploy", "file": "logo.png"})],
            [Call("load_skill", {"name": "deploy", "file": "../../etc/passwd"})],
            [Say("shipped")],
        ]
    )
    skill = load_package(skill_package(tmp_path / "p")).agent.skills[0]
    agent = (
        builder(model)
        .skill(
            skill.name,
            skill.description,
            skill.instructions,
            files={f.path: f.content for f in skill.files},
        )
        .build()
    )
    async with Engine() as engine:
        session = await engine.create(agent).harness(Harness.worker()).start()
        context = await session.inspect()
        load_skill = next(t for t in context.tools if t.name == "load_skill")
        assert set(load_skill.parameters["properties"]) == {"name", "file"}
        _, events = await run_collecting(session, "ship it")
    listing, script, binary, missing = (o.text for o in outputs(events))
    assert listing.startswith("# Skill: deploy\n\nRun scripts/ship.sh.\n")
    assert "## Files of this skill (3)" in listing
    assert "- scripts/ship.sh (24 bytes)" in listing
    assert "- reference/deep/notes.md (21 bytes)" in listing
    assert script == "# deploy/scripts/ship.sh\n\n#!/bin/sh\necho shipping\n"
    assert binary == "# deploy/logo.png: binary file, 10 bytes (not shown as text)"
    assert missing.startswith("error: skill 'deploy' has no file '../../etc/passwd'")


def test_a_skill_without_files_lists_none() -> None:
    agent = builder(ScriptedModel([])).skill("plain", "Plain.", "Do it.").build()
    assert agent.skills[0].files == ()


# -- bounds ------------------------------------------------------------------------------


def test_too_many_files(tmp_path: Path) -> None:
    root = skill_package(tmp_path / "p")
    many = root / "skills" / "deploy" / "many"
    many.mkdir()
    for index in range(MAX_SKILL_FILES):
        (many / f"{index:04}.txt").write_text("x")
    # SKILL.md and logo.png come first (sorted): the 257th file is many/0254.txt.
    assert problems_of(root) == [("skills/deploy/many/0254.txt", "skill-too-many-files")]
    with pytest.raises(SkillTooLarge) as caught:
        builder(ScriptedModel([])).skill(
            "many", "d", "i", files={f"{i}.txt": "x" for i in range(MAX_SKILL_FILES)}
        )
    assert caught.value.limit == "skill files" and caught.value.maximum == MAX_SKILL_FILES


def test_a_file_too_large(tmp_path: Path) -> None:
    root = skill_package(tmp_path / "p")
    (root / "skills" / "deploy" / "big.bin").write_bytes(b"\0" * (MAX_SKILL_FILE_BYTES + 1))
    assert problems_of(root) == [("skills/deploy/big.bin", "file-too-large")]
    with pytest.raises(SkillTooLarge) as caught:
        builder(ScriptedModel([])).skill(
            "big", "d", "i", files={"big.bin": b"\0" * (MAX_SKILL_FILE_BYTES + 1)}
        )
    assert caught.value.limit == "skill file bytes"


def test_a_skill_too_large_in_total(tmp_path: Path) -> None:
    root = skill_package(tmp_path / "p")
    count = MAX_SKILL_BYTES // MAX_SKILL_FILE_BYTES + 1
    for index in range(count):
        (root / "skills" / "deploy" / f"part{index}.bin").write_bytes(b"\0" * MAX_SKILL_FILE_BYTES)
    assert ("skills/deploy/part3.bin", "skill-too-large") in problems_of(root)
    files = {f"part{i}.bin": b"\0" * MAX_SKILL_FILE_BYTES for i in range(count)}
    with pytest.raises(SkillTooLarge) as caught:
        builder(ScriptedModel([])).skill("large", "d", "i", files=files)
    assert caught.value.limit == "skill bytes"
    assert caught.value.actual == count * MAX_SKILL_FILE_BYTES


def test_a_skill_too_deep(tmp_path: Path) -> None:
    root = skill_package(tmp_path / "p")
    deep = root / "skills" / "deploy" / Path(*["d"] * MAX_SKILL_DEPTH)
    deep.mkdir(parents=True)
    (deep / "bottom.md").write_text("x")
    too_deep = "skills/deploy/" + "/".join(["d"] * MAX_SKILL_DEPTH)
    assert problems_of(root) == [(too_deep, "skill-too-deep")]
    path = "/".join(["d"] * MAX_SKILL_DEPTH) + "/bottom.md"
    with pytest.raises(SkillTooLarge) as caught:
        builder(ScriptedModel([])).skill("deep", "d", "i", files={path: "x"})
    assert caught.value.limit == "skill depth"
    # One level less is allowed.
    ok = "/".join(["d"] * (MAX_SKILL_DEPTH - 1)) + "/bottom.md"
    builder(ScriptedModel([])).skill("deep", "d", "i", files={ok: "x"})


# -- links, special files, bad paths -----------------------------------------------------


def test_links_inside_a_skill_are_refused_not_followed(tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("password=hunter2\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "leak.md").write_text("leaked\n")
    root = skill_package(tmp_path / "p")
    skill = root / "skills" / "deploy"
    (skill / "creds.txt").symlink_to(secret)
    (skill / "linked-dir").symlink_to(outside, target_is_directory=True)
    os.mkfifo(skill / "pipe")
    assert problems_of(root) == [
        ("skills/deploy/creds.txt", "symlink"),
        ("skills/deploy/linked-dir", "symlink"),
        ("skills/deploy/pipe", "special-file"),
    ]
    files, _ = read_skill_directory(skill)
    assert b"hunter2" not in b"".join(files.values())
    assert not any(name.startswith("linked-dir") for name in files)


def test_a_skill_directory_that_is_a_link_is_refused(tmp_path: Path) -> None:
    root = skill_package(tmp_path / "p")
    elsewhere = tmp_path / "elsewhere"
    (root / "skills" / "deploy").rename(elsewhere)
    (root / "skills" / "deploy").symlink_to(elsewhere, target_is_directory=True)
    assert problems_of(root) == [("skills/deploy", "symlink")]


@pytest.mark.parametrize(
    ("path", "match"),
    [
        ("../escape.md", "normalized relative path"),
        ("/etc/passwd", "relative to the skill"),
        ("a//b.md", "normalized relative path"),
        ("a\\b.md", "backslash"),
        ("SKILL.md", "holds the skill's instructions"),
        ("", "non-blank"),
    ],
)
def test_bad_file_paths_in_code(path: str, match: str) -> None:
    with pytest.raises(InvalidSkill, match=match):
        builder(ScriptedModel([])).skill("s", "d", "i", files={path: "x"})


def test_a_file_below_another_file_is_refused() -> None:
    with pytest.raises(InvalidSkill, match="below another file"):
        builder(ScriptedModel([])).skill("s", "d", "i", files={"a": "x", "a/b": "y"})


def test_an_empty_directory_in_a_skill_is_reported(tmp_path: Path) -> None:
    root = skill_package(tmp_path / "p")
    (root / "skills" / "deploy" / "empty").mkdir()
    assert problems_of(root) == [("skills/deploy/empty", "empty-directory")]
