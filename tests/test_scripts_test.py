"""``scripts/test`` runs both pytest runs whatever the first one's verdict, and fails
when either failed. Run here on a copy of the script with stub tools (a fake python
whose venv holds a pytest that fails on demand), so nothing is installed."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: The stub venv's pytest: logs which run it is and fails as its environment says.
PYTEST = """#!/usr/bin/env bash
if [ -n "${EMELEX_LLAMA_PROBE_FAULT:-}" ]; then run=sigill; else run=suite; fi
echo "$run" >> "$STUB_LOG"
[ "$run" = suite ] && exit "${SUITE_EXIT:-0}"
exit "${SIGILL_EXIT:-0}"
"""
#: The stub python: ``-m venv DIR`` makes DIR with stub tools; anything else succeeds.
PYTHON = f"""#!/usr/bin/env bash
if [ "$1 $2" = "-m venv" ]; then
    mkdir -p "$3/bin"
    for tool in python ruff mypy; do printf '#!/bin/sh\\nexit 0\\n' > "$3/bin/$tool"; done
    cat > "$3/bin/pytest" <<'STUB'
{PYTEST}STUB
    chmod +x "$3"/bin/*
fi
exit 0
"""


def _executable(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    shutil.copy(ROOT / "scripts" / "test", repo / "scripts" / "test")
    _executable(repo / "scripts" / "system-packages", "#!/bin/sh\nexit 0\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _executable(bin_dir / "python3", PYTHON)
    _executable(bin_dir / "initdb", "#!/bin/sh\nexit 0\n")  # no apt-get install
    return repo


def _run(repo: Path, **codes: str) -> tuple[int, list[str]]:
    log = repo.parent / "runs.log"
    env = {
        **os.environ,
        "PATH": f"{repo.parent / 'bin'}:{os.environ['PATH']}",
        "PYTHON": str(repo.parent / "bin" / "python3"),
        "EMELEX_VENV": str(repo.parent / "venv"),
        "STUB_LOG": str(log),
        **codes,
    }
    done = subprocess.run(
        [str(repo / "scripts" / "test")], env=env, capture_output=True, text=True, timeout=60
    )
    runs = log.read_text().split() if log.exists() else []
    log.unlink(missing_ok=True)
    return done.returncode, runs


def test_both_runs_pass(repo: Path) -> None:
    assert _run(repo) == (0, ["suite", "sigill"])


def test_a_failing_suite_still_runs_the_sigill_rerun_and_fails(repo: Path) -> None:
    assert _run(repo, SUITE_EXIT="1") == (1, ["suite", "sigill"])


def test_a_failing_sigill_rerun_fails_the_script(repo: Path) -> None:
    assert _run(repo, SIGILL_EXIT="2") == (1, ["suite", "sigill"])
