"""The batched walk visits exactly what a per-entry walk visits, and its bulk secret check
agrees with the per-name one."""

from __future__ import annotations

import itertools
import os
import stat
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from emelex.tools.workspace import Workspace, find_files
from emelex.tools.workspace._secrets import is_secret_child, secret_names_test
from tests.tools.workspace.test_ws_walk_fast_paths import NAMES, PARENTS


@pytest.mark.parametrize("parents", PARENTS)
def test_bulk_secret_check_agrees_with_the_per_name_check(parents: tuple[str, ...]) -> None:
    test = secret_names_test()
    assert test(parents, NAMES) == {n for n in NAMES if is_secret_child(parents, n)}
    for name in NAMES:
        # alone and among ordinary names: the joined text must not hide or invent a match
        alone = test(parents, [name])
        mixed = test(parents, ["a.py", name, "zz.txt"])
        assert alone == mixed == ({name} if is_secret_child(parents, name) else set())


_NAME = st.one_of(
    st.sampled_from(NAMES),
    st.text(alphabet="aEnvPkeyId_rs.\n-", min_size=1, max_size=10),
    st.text(min_size=1, max_size=8).filter(lambda s: "/" not in s and "\0" not in s),
)


@given(st.lists(_NAME, max_size=12), st.sampled_from(PARENTS))
def test_bulk_secret_check_agrees_on_any_names(names: list[str], parents: tuple[str, ...]) -> None:
    expected = {n for n in names if is_secret_child(parents, n)}
    assert secret_names_test()(parents, names) == expected


def _reference_walk(top: Path, budget: int) -> tuple[list[str], str | None, int, int, int]:
    """The per-entry walk the batched one replaced: every entry in name order, depth
    first, each counted against ``budget``; a directory reads at most the budget left
    plus one entry, in listing order. Returns (files, truncation, visited, secrets, links)."""
    files: list[str] = []
    visited = secrets = links = 0
    test = secret_names_test()

    def walk(directory: Path, rel: tuple[str, ...]) -> bool:
        nonlocal visited, secrets, links
        with os.scandir(directory) as scan:
            names = sorted(e.name for e in itertools.islice(scan, budget - visited + 1))
        secret = test((*directory.parts[1:],), names)
        for name in names:
            if visited >= budget:
                return False
            visited += 1
            if name in secret:
                secrets += 1
                continue
            mode = (directory / name).lstat().st_mode
            if stat.S_ISREG(mode):
                files.append("/".join((*rel, name)))
            elif stat.S_ISDIR(mode):
                if name != ".git" and not walk(directory / name, (*rel, name)):
                    return False
            elif stat.S_ISLNK(mode):
                links += 1
        return True

    done = walk(top, ())
    return files, None if done else "max_visited", visited, secrets, links


def _mixed_tree(top: Path) -> None:
    """Files before, between and after subdirectories, secrets, links and a skipped .git."""
    for rel in ("", "b", "b/c", "m", "z"):
        (top / rel).mkdir(exist_ok=True)
        for name in ("a.txt", "k.py", "n.pem", "y.md"):
            (top / rel / name).write_text("x\n")
    (top / ".git").mkdir()
    (top / ".git" / "HEAD").write_text("ref\n")
    (top / ".env").write_text("TOKEN=1\n")
    (top / "m" / "id_rsa").write_text("key\n")
    (top / "link.txt").symlink_to(top / "a.txt")
    (top / "b" / "dirlink").symlink_to(top / "z")
    for index in range(300):  # more than one batch in one directory
        (top / "z" / f"many{index:03d}.txt").write_text("x\n")


def test_batched_walk_matches_the_per_entry_walk_at_every_budget(tmp_path: Path) -> None:
    _mixed_tree(tmp_path)
    with Workspace.open(tmp_path) as ws:
        for budget in [*range(1, 40), *range(300, 340, 3), 10_000]:
            result = find_files(ws, "**/*", max_visited=budget, max_results=100_000)
            files, truncation, visited, secrets, links = _reference_walk(tmp_path, budget)
            assert list(result.matches) == files, budget
            assert result.truncation == truncation, budget
            assert (result.visited, result.skipped_secrets, result.skipped_links) == (
                visited,
                secrets,
                links,
            ), budget
