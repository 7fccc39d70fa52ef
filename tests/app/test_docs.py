"""The self-contained examples of docs/app run as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[2] / "docs" / "app"
BLOCKS = [
    pytest.param(block, id=f"{page.name}-{index}")
    for page in sorted(DOCS.glob("*.md"))
    for index, block in enumerate(re.findall(r"```python\n(.*?)```", page.read_text(), re.S))
    if "import " in block  # fragments without imports continue an earlier example
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
