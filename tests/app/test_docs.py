"""The self-contained examples of docs/app run as written."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.docs_blocks import blocks

DOCS = Path(__file__).resolve().parents[2] / "docs" / "app"
BLOCKS = [
    pytest.param(block.body, id=f"{page.name}-{index}")
    for page in sorted(DOCS.glob("*.md"))
    for index, block in enumerate(blocks(page))
    # a fragment says so on its first line (tests/docs_blocks.py)
    if block.is_complete_program
]


def test_every_concept_has_a_page() -> None:
    assert {p.name for p in DOCS.glob("*.md")} >= {
        "tools.md",
        "agents.md",
        "engine.md",
        "workspace-policy.md",
        "worker.md",
    }


@pytest.mark.parametrize("block", BLOCKS)
def test_example_runs(block: str, capsys: pytest.CaptureFixture[str]) -> None:
    exec(compile(block, "<docs>", "exec"), {"__name__": "docs_example"})
