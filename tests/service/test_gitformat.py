"""Git-format patch pieces, checked against the git binary: name quoting and hunks."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from emelex.service.workspace._gitformat import MODE_FILE, Side, blob_id, file_patch, quote_path
from tests.service.gitrepo import git, git_home, init, needs_git

pytestmark = needs_git
__all__ = ["git_home"]  # the fixture, imported for pytest

NAMES = [
    b"plain.txt",
    b"sp ace",
    b'quo"te',
    b"back\\slash",
    b"tab\there",
    b"ctl\x01",
    "caf\u00e9".encode(),
    b"latin\xe9",
    b"\xff\xfe",
]


def test_names_are_quoted_exactly_as_git_quotes_them(tmp_path: Path, git_home: Path) -> None:
    root = init(tmp_path / "repo")
    for name in NAMES:
        with open(os.path.join(os.fsencode(root), name), "wb") as handle:
            handle.write(b"x\n")
    git(root, "add", "-A")
    listed = git(root, "ls-files").splitlines()
    assert sorted(listed) == sorted(quote_path(b"", name) for name in NAMES)


def test_blob_ids_are_gits(tmp_path: Path, git_home: Path) -> None:
    for data in (b"", b"a\n", b"\x00\xff" * 1000):
        assert blob_id(data) == git(tmp_path, "hash-object", "--stdin", input=data).decode().strip()


lines = st.lists(st.sampled_from([b"a\n", b"b\n", b"c\r\n", b"", b"d", b"\n"]), max_size=30)


@settings(max_examples=40, deadline=None)
@given(old=lines, new=lines)
def test_hunks_apply_with_git(old: list[bytes], new: list[bytes]) -> None:
    before, after = b"".join(old), b"".join(new)
    patch = file_patch(
        b"f.txt",
        Side(MODE_FILE, blob_id(before), before),
        Side(MODE_FILE, blob_id(after), after),
        binary=True,
    )
    if before == after:
        assert patch == b""
        return
    with tempfile.TemporaryDirectory() as scratch:
        Path(scratch, "f.txt").write_bytes(before)
        git(scratch, "apply", "-", input=patch)
        assert Path(scratch, "f.txt").read_bytes() == after
