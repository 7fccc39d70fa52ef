"""``emelex agents export PATH DEST.tar.gz``: a reproducible archive of the package."""

from __future__ import annotations

import gzip
import io
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from emelex.cli._archive import write_tar_gz

ROOT = Path(__file__).parent.parent.parent
ACTORS = ROOT / "actors"


def agents(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "emelex.cli", "agents", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ),
    )


def test_help_names_dest() -> None:
    result = agents("--help")
    assert result.returncode == 0
    assert "emelex agents export PATH DEST" in result.stdout
    assert ".tar.gz" in result.stdout


@pytest.mark.parametrize("suffix", [".tar.gz", ".tgz"])
def test_export_writes_a_reproducible_archive(tmp_path: Path, suffix: str) -> None:
    first, second = tmp_path / f"reviewer{suffix}", tmp_path / f"again{suffix}"
    assert agents("export", "actors/repo-reviewer", str(first)).returncode == 0
    assert agents("export", "actors/repo-reviewer", str(second)).returncode == 0
    # Same package, same bytes except the folder name inside: export under one name twice.
    third = tmp_path / "x" / f"reviewer{suffix}"
    third.parent.mkdir()
    assert agents("export", "actors/repo-reviewer", str(third)).returncode == 0
    assert first.read_bytes() == third.read_bytes()
    raw = first.read_bytes()
    assert raw[:2] == b"\x1f\x8b" and raw[4:8] == b"\x00\x00\x00\x00"  # gzip mtime zeroed
    with tarfile.open(first) as tar:
        members = tar.getmembers()
        names = [m.name for m in members]
        assert names[0] == "reviewer" and "reviewer/agent.toml" in names
        assert all(m.mtime == 0 and m.uid == m.gid == 0 for m in members)
        assert all(m.uname == m.gname == "" for m in members)
        assert all(m.isdir() or m.isfile() for m in members)
        tar.extractall(tmp_path / "unpacked", filter="data")
    # The archive holds the package: it validates and equals the source.
    unpacked = str(tmp_path / "unpacked" / "reviewer")
    assert agents("validate", unpacked).returncode == 0
    assert agents("diff", "actors/repo-reviewer", unpacked).returncode == 0
    # An existing DEST is never overwritten.
    refused = agents("export", "actors/repo-reviewer", str(first))
    assert refused.returncode == 3 and "already exists" in refused.stderr
    assert first.read_bytes() == raw


def test_names_are_sorted_and_modes_normalized(tmp_path: Path) -> None:
    source = tmp_path / "src"
    (source / "b").mkdir(parents=True)
    (source / "b" / "z.txt").write_text("z")
    (source / "a.sh").write_text("#!/bin/sh\n")
    (source / "a.sh").chmod(0o700)
    (source / "c.txt").write_text("c")
    (source / "c.txt").chmod(0o600)
    os.symlink("/etc/passwd", source / "link")
    dest = tmp_path / "out.tar.gz"
    write_tar_gz(str(source), str(dest), "pkg")
    with tarfile.open(dest) as tar:
        modes = {m.name: m.mode for m in tar.getmembers()}
    assert list(modes) == ["pkg", "pkg/a.sh", "pkg/c.txt", "pkg/b", "pkg/b/z.txt"]
    assert modes == {
        "pkg": 0o755,
        "pkg/a.sh": 0o755,
        "pkg/c.txt": 0o644,
        "pkg/b": 0o755,
        "pkg/b/z.txt": 0o644,
    }
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.tar.gz", "src"]  # no leftovers
    with gzip.open(dest) as plain:
        assert len(io.BytesIO(plain.read()).getvalue()) % 512 == 0
