"""Every operation page of ``docs/service/`` runs as written and prints what it says.

Like the cookbook: a page holds one ```python block, a whole program, and the ```text
block after it is that program's exact standard output. The test writes the block to a
file, runs it in a fresh interpreter in an empty directory, and compares the output.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[2] / "docs" / "service"
#: The operation pages, each with one runnable program (the other pages explain).
PAGES = [
    "sessions",
    "interactions",
    "history",
    "watch",
    "search",
    "fork",
    "diagnostics",
    "context",
    "executor",
    "workhub",
    "after-a-crash",
]
RUN_SECONDS = 180

_PYTHON = re.compile(r"^```python\n(.*?)^```$", re.S | re.M)
_TEXT = re.compile(r"^```text\n(.*?)^```$", re.S | re.M)


def test_the_host_page_links_every_operation_page() -> None:
    host = (DOCS / "host.md").read_text(encoding="utf-8")
    for page in PAGES:
        assert f"({page}.md)" in host, f"host.md does not link {page}.md"


@pytest.mark.parametrize("page", PAGES)
def test_page_runs_and_prints_what_it_says(page: str, tmp_path: Path) -> None:
    text = (DOCS / f"{page}.md").read_text(encoding="utf-8")
    programs = _PYTHON.findall(text)
    assert len(programs) == 1, f"{page}.md: expected one python block, found {len(programs)}"
    outputs = _TEXT.findall(text[text.index(programs[0]) + len(programs[0]) :])
    assert outputs, f"{page}.md: no text block with the expected output after the program"
    script = tmp_path / f"{page.replace('-', '_')}.py"
    script.write_text(programs[0], encoding="utf-8")
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONDONTWRITEBYTECODE": "1"}
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=RUN_SECONDS,
        check=False,
    )
    assert done.returncode == 0, f"{page}.md failed:\n{done.stderr[-3000:]}"
    assert done.stdout == outputs[0]
