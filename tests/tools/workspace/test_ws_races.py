"""Races against write_file/edit_file: a racer's version is never lost.

Deterministic cases inject the racer at an exact stage through the ``_HOOKS`` seam; the
last case runs a real racing thread many times and checks the invariant each round.
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from emelex.tools.workspace import (
    ConcurrentModification,
    EditMismatch,
    Workspace,
    _mutate,
    _sibling,
    edit_file,
    write_file,
)
from emelex.tools.workspace._linux import RENAME_EXCHANGE, renameat2

Hook = Callable[[int, str, str], None]


@pytest.fixture
def hooks() -> Iterator[dict[str, Hook]]:
    yield _mutate._HOOKS
    _mutate._HOOKS.clear()


def _replace(root: Path, name: str, content: str) -> None:
    """What a racing editor does: write a sibling, rename it over the target."""
    tmp = root / f".racer-{random.randrange(10**9)}"
    tmp.write_text(content)
    os.replace(tmp, root / name)


def _siblings(root: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in root.iterdir() if p.is_file()}


def test_replacement_before_install_is_rolled_back(
    ws: Workspace, root: Path, hooks: dict[str, Hook]
) -> None:
    (root / "f.txt").write_text("base\n")
    hooks["before_install"] = lambda fd, name, temp: _replace(root, "f.txt", "racer base\n")
    with pytest.raises(ConcurrentModification) as caught:
        edit_file(ws, "f.txt", "base", "edited")
    assert caught.value.recovery_path is None
    assert _siblings(root) == {"f.txt": "racer base\n"}


def test_replacement_during_plain_write_is_rolled_back(
    ws: Workspace, root: Path, hooks: dict[str, Hook]
) -> None:
    (root / "f.txt").write_text("v1\n")
    hooks["before_install"] = lambda fd, name, temp: _replace(root, "f.txt", "racer\n")
    with pytest.raises(ConcurrentModification):
        write_file(ws, "f.txt", "mine\n")
    assert _siblings(root) == {"f.txt": "racer\n"}


def test_in_place_rewrite_is_detected_by_hash(
    ws: Workspace, root: Path, hooks: dict[str, Hook]
) -> None:
    """Same inode, new bytes: the inode check alone would miss it; the hash catches it."""
    (root / "f.txt").write_text("base\n")

    def rewrite(fd: int, name: str, temp: str) -> None:
        with open(root / "f.txt", "r+") as handle:
            handle.write("BASE\n")

    hooks["before_install"] = rewrite
    with pytest.raises(ConcurrentModification):
        edit_file(ws, "f.txt", "base", "edited")
    assert _siblings(root) == {"f.txt": "BASE\n"}


def test_symlink_swapped_in_before_install_is_put_back(
    ws: Workspace, root: Path, outside: Path, hooks: dict[str, Hook]
) -> None:
    (root / "f.txt").write_text("base\n")

    def swap(fd: int, name: str, temp: str) -> None:
        (root / "f.txt").unlink()
        (root / "f.txt").symlink_to(outside / "secret.txt")

    hooks["before_install"] = swap
    with pytest.raises(ConcurrentModification):
        edit_file(ws, "f.txt", "base", "edited")
    assert (root / "f.txt").is_symlink()
    assert (outside / "secret.txt").read_text().startswith("OUTSIDE-SECRET")
    assert [p.name for p in root.iterdir()] == ["f.txt"]


def test_unrecoverable_race_keeps_prior_inode_under_recovery_name(
    ws: Workspace, root: Path, hooks: dict[str, Hook], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The racer's version lands under the temporary name and the exchange back fails:
    it must survive under a recovery name that the error reports."""
    (root / "f.txt").write_text("base\n")
    hooks["before_install"] = lambda fd, name, temp: _replace(root, "f.txt", "racer\n")
    real = renameat2
    calls = 0

    def flaky(old_dir: int, old: str, new_dir: int, new: str, flags: int) -> None:
        nonlocal calls
        calls += 1
        if calls == 2 and flags == RENAME_EXCHANGE:
            raise OSError(5, "simulated I/O error")
        real(old_dir, old, new_dir, new, flags)

    monkeypatch.setattr(_mutate, "renameat2", flaky)
    with pytest.raises(ConcurrentModification) as caught:
        edit_file(ws, "f.txt", "base", "edited")
    recovery = caught.value.recovery_path
    assert recovery is not None
    assert _sibling.RECOVERY_MARKER in recovery
    files = _siblings(root)
    assert files[recovery] == "racer\n"
    assert files["f.txt"] == "edited\n"
    assert len(files) == 2


def test_target_created_concurrently_is_not_overwritten(
    ws: Workspace, root: Path, hooks: dict[str, Hook]
) -> None:
    hooks["before_install"] = lambda fd, name, temp: _replace(root, "new.txt", "racer\n")
    with pytest.raises(ConcurrentModification):
        write_file(ws, "new.txt", "mine\n")
    assert _siblings(root) == {"new.txt": "racer\n"}


def test_target_removed_concurrently(ws: Workspace, root: Path, hooks: dict[str, Hook]) -> None:
    (root / "f.txt").write_text("base\n")
    hooks["before_install"] = lambda fd, name, temp: (root / "f.txt").unlink()
    with pytest.raises(ConcurrentModification):
        edit_file(ws, "f.txt", "base", "edited")
    assert list(root.iterdir()) == []


def test_racing_thread_never_loses_a_version(ws: Workspace, root: Path) -> None:
    """Each round a thread replaces the file once, at a random moment, while an edit runs.

    Valid end states: the racer's version (the edit failed, or ran first and was then
    replaced by the racer), or an edit *of the racer's version*. An edit of the original
    installed after the racer would have lost the racer's version: that must only happen
    with the racer's version kept under a recovery name.
    """
    rounds = 200
    outcomes: dict[str, int] = {}
    for index in range(rounds):
        for leftover in root.iterdir():
            leftover.unlink()
        (root / "f.txt").write_text(f"base {index}\n")
        delay = random.random() * 0.0015

        def race(index: int = index, delay: float = delay) -> None:
            time.sleep(delay)
            _replace(root, "f.txt", f"racer base {index}\n")

        thread = threading.Thread(target=race)
        thread.start()
        try:
            edit_file(ws, "f.txt", "base", "edited")
            outcome = "applied"
        except ConcurrentModification:
            outcome = "refused"
        except EditMismatch:  # pragma: no cover - both versions contain "base" once
            outcome = "mismatch"
        thread.join()
        files = _siblings(root)
        final = files.pop("f.txt")
        assert final in (f"racer base {index}\n", f"racer edited {index}\n"), (index, final)
        assert all(_sibling.TEMP_MARKER not in name for name in files), files
        assert not files, files
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
    assert outcomes.get("mismatch", 0) == 0
