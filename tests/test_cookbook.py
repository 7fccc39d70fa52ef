"""Every cookbook page runs as written and prints what the page says it prints.

A page (``docs/cookbook/*.md``) holds exactly one ```python block, a whole program, and
the ```text block after it is that program's exact standard output. The page is the
only copy of the code, so the two cannot drift apart: this test writes the block to a
file, runs it in a fresh interpreter (the way a reader would, in an empty directory)
and compares the output.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from emelex.model.llama import choose_extra_buffers

COOKBOOK = Path(__file__).resolve().parents[1] / "docs" / "cookbook"
README = Path(__file__).resolve().parents[1] / "README.md"
PAGES = sorted(page for page in COOKBOOK.glob("*.md") if page.name != "README.md")
RUN_SECONDS = 240

_PYTHON = re.compile(r"^```python\n(.*?)^```$", re.S | re.M)
_TEXT = re.compile(r"^```text\n(.*?)^```$", re.S | re.M)


def program_and_output(page: Path) -> tuple[str, str]:
    text = page.read_text(encoding="utf-8")
    programs = _PYTHON.findall(text)
    assert len(programs) == 1, f"{page.name}: expected one python block, found {len(programs)}"
    after = text[text.index(programs[0]) + len(programs[0]) :]
    outputs = _TEXT.findall(after)
    assert outputs, f"{page.name}: no text block with the expected output after the program"
    return programs[0], outputs[0]


@pytest.fixture(scope="module", autouse=True)
def _buffer_verdict() -> None:
    """Probe llama.cpp's buffer types once, into the suite's private cache, so the pages
    that load a model read the verdict instead of probing inside their time limit."""
    trio.run(choose_extra_buffers)


def test_the_cookbook_has_every_recipe() -> None:
    assert {page.stem for page in PAGES} == {
        "typed-output",
        "approval-rules",
        "approval-ui",
        "cancel-from-a-ui",
        "resume-a-stored-session",
        "mcp-server",
        "asyncio-library-in-a-tool",
        "tracing-to-a-collector",
        "local-model-chat-template",
        "openai-compatible-server",
        "testing-tools-with-the-cancellation-suite",
        "sub-agent-reader",
        "redact-secrets-hook",
        "output-guardrail",
        "mcp-confirmation",
    }
    index = (COOKBOOK / "README.md").read_text(encoding="utf-8")
    for page in PAGES:
        assert f"({page.name})" in index, f"the cookbook index does not link {page.name}"
    readme = README.read_text(encoding="utf-8")
    assert len(re.findall(r"\(docs/cookbook/[a-z-]+\.md\)", readme)) >= 5


@pytest.mark.parametrize("page", PAGES, ids=[page.stem for page in PAGES])
def test_page_runs_and_prints_what_it_says(page: Path, tmp_path: Path) -> None:
    program, expected = program_and_output(page)
    script = tmp_path / f"{page.stem.replace('-', '_')}.py"
    script.write_text(program, encoding="utf-8")
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONDONTWRITEBYTECODE": "1"}
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=RUN_SECONDS,
        check=False,
    )
    stdout = done.stdout.decode("utf-8", "replace")
    stderr = done.stderr.decode("utf-8", "replace")
    assert done.returncode == 0, f"{page.name} exited {done.returncode}:\n{stderr[-4000:]}"
    assert stdout == expected, f"{page.name} printed:\n{stdout}\nstderr:\n{stderr[-2000:]}"
