"""Every program in ``docs/`` runs as written, or says which complete example it is a
piece of (the rule is in ``tests/docs_blocks.py``). The cookbook, the operation pages of
``docs/service/`` and ``docs/app/`` have their own runners; this test runs the rest."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs_blocks import (
    DOCS,
    OTHER_LANGUAGES,
    ROOT,
    Block,
    all_blocks,
    blocks,
    expected_output,
)
from tests.service.test_service_docs import PAGES as SERVICE_PAGES

RUN_SECONDS = 120
#: Pages whose one program another test runs (test_cookbook.py, test_service_docs.py).
ONE_PROGRAM_PAGES = frozenset(
    [page for page in (DOCS / "cookbook").glob("*.md") if page.name != "README.md"]
    + [DOCS / "service" / f"{name}.md" for name in SERVICE_PAGES]
)
#: Run by tests/app/test_docs.py, block by block.
APP = DOCS / "app"
#: The complete programs under examples/, run here.
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))


def _run_here(block: Block) -> bool:
    return (
        block.is_complete_program
        and block.page not in ONE_PROGRAM_PAGES
        and block.page.parent != APP
    )


HERE = [pytest.param(block, id=block.name) for block in all_blocks() if _run_here(block)]


def test_every_block_says_what_it_is() -> None:
    unlabelled = [
        block.name
        for block in all_blocks()
        if not block.is_program and block.language not in OTHER_LANGUAGES
    ]
    assert not unlabelled, f"label these blocks (python, text, sh, ...): {unlabelled}"


def test_a_page_with_a_runner_holds_its_one_program() -> None:
    for page in ONE_PROGRAM_PAGES:
        programs = [block for block in blocks(page) if block.is_program]
        assert len(programs) == 1 and programs[0].is_complete_program, page


def _complete_example(target: str) -> str | None:
    """Why ``target`` (a fragment's ``# Fragment of``) names no complete example, or None."""
    path, _, anchor = target.partition("#")
    if path.startswith("examples/"):
        return None if ROOT / path in EXAMPLES else f"no such example {path}"
    page = DOCS / path
    if not page.is_file():
        return f"no page docs/{path}"
    complete = [block for block in blocks(page) if block.is_complete_program]
    if anchor:
        complete = [block for block in complete if block.section == anchor]
    return None if complete else f"docs/{target} holds no complete program"


def test_every_fragment_names_a_complete_example() -> None:
    problems = []
    for block in all_blocks():
        target = block.fragment_of
        if block.is_program and target is not None:
            problem = _complete_example(target)
            if problem is not None:
                problems.append(f"{block.name}: {problem}")
    assert not problems, problems


def _run(program: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "example.py"
    script.write_text(program, encoding="utf-8")
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=RUN_SECONDS,
        check=False,
    )


@pytest.mark.parametrize("block", HERE)
def test_a_complete_program_runs_as_written(block: Block, tmp_path: Path) -> None:
    done = _run(block.body, tmp_path)
    assert done.returncode == 0, f"{block.name} failed:\n{done.stderr[-3000:]}"
    expected = expected_output(block)
    if expected is not None:
        assert done.stdout == expected, f"{block.name} printed:\n{done.stdout}"


@pytest.mark.parametrize("example", EXAMPLES, ids=[path.name for path in EXAMPLES])
def test_an_example_runs(example: Path, tmp_path: Path) -> None:
    done = _run(example.read_text(encoding="utf-8"), tmp_path)
    assert done.returncode == 0, f"{example.name} failed:\n{done.stderr[-3000:]}"
