"""The recursive walk's fast paths agree with the slow ones, and its memory stays bounded."""

from __future__ import annotations

import os
import tracemalloc
from pathlib import Path

import pytest

from emelex.tools.workspace import Workspace, find_files, grep
from emelex.tools.workspace._search import compile_glob
from emelex.tools.workspace._secrets import is_secret_child, secret_child_test

NAMES = (
    "a.py",
    "A.PY",
    ".env",
    ".ENV.local",
    "prod.env",
    "x.PEM",
    "id_rsa",
    "id_rsa.pub",
    "config",
    "credentials",
    "credentials.json",
    "client_secret_1.json",
    "service-account-x.json",
    "environ",
    ".npmrc",
    "README",
    "vars.tfvars",
    "notes.txt.emelex-tmp-0123",
    ".ssh",
    "main.tsx",
    "x.ts.bak",
    "cache",
    "keyrings",
    "login.KEYRING",
    ".bash_history",
    "hub",
    "sitemanager.xml",
    "auth.json",
)
PARENTS = (
    (),
    (".aws",),
    ("proc", "1"),
    ("proc", "1", "task", "2"),
    (".config", "gh"),
    ("src",),
    (".aws", "sso"),
    (".local", "share"),
    (".config",),
    (".composer",),
    ("filezilla",),
)


@pytest.mark.parametrize("parents", PARENTS)
def test_secret_fast_path_agrees_with_the_full_check(parents: tuple[str, ...]) -> None:
    test = secret_child_test()
    for name in NAMES:
        assert test(parents, name) == is_secret_child(parents, name), (parents, name)


@pytest.mark.parametrize(
    ("pattern", "suffixes"),
    [
        ("**/*.py", (".py",)),
        ("**/*.{ts,tsx}", (".ts", ".tsx")),
        ("**/*", ("",)),
        ("**/*test_{a,b}.py", ("test_a.py", "test_b.py")),
        ("**/*.p?", None),
        ("src/**/*.py", None),
        ("**/a/*.py", None),
        ("*.py", None),
        ("**/*.{py", None),
    ],
)
def test_name_suffix_fast_path_agrees_with_the_regex(
    pattern: str, suffixes: tuple[str, ...] | None
) -> None:
    glob = compile_glob(pattern)
    assert glob.name_suffixes == suffixes
    for prefix in ("", "src/", "src/deep/", ".git/"):
        for name in NAMES:
            assert glob.matches_file(prefix, name) == glob.matches(prefix + name), (prefix, name)


def test_walk_memory_does_not_grow_with_a_huge_directory(tmp_path: Path) -> None:
    big = tmp_path / "big"
    big.mkdir()
    for index in range(20_000):
        (big / f"file-with-a-longish-name-{index:06d}.txt").touch()
    with Workspace.open(tmp_path) as ws:
        tracemalloc.start()
        try:
            result = find_files(ws, "**/*.txt", max_visited=100)
            _current, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert result.truncation == "max_visited"
    assert len(result.matches) == 99  # the directory itself was the first entry visited
    # Reading the whole directory takes several MB; a small budget reads ~100 entries.
    assert peak < 256 * 1024, peak


def test_walk_finds_the_same_files_as_os_walk(tmp_path: Path) -> None:
    expected: list[str] = []
    for top in range(6):
        for sub in ("", "s", "s/t"):
            directory = tmp_path / f"d{top}" / sub
            directory.mkdir(parents=True, exist_ok=True)
            for index in range(7):
                name = f"f{index}.{'py' if index % 2 else 'txt'}"
                (directory / name).write_text(f"needle {top} {sub} {index}\n")
                if index % 2:
                    expected.append(os.path.relpath(directory / name, tmp_path))
    with Workspace.open(tmp_path) as ws:
        found = find_files(ws, "**/*.py")
        hits = grep(ws, "needle", glob="**/*.py", max_matches=1000)
    # name order, depth first: the order of the sorted component tuples
    assert list(found.matches) == sorted(expected, key=lambda path: path.split("/"))
    assert [line.path for line in hits.lines] == list(found.matches)
