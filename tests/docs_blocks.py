"""The fenced blocks of ``docs/``, and which of them are programs or fragments.

A ``python`` (or ``py``) block is a program. It is either complete (a test runs it as
written) or a fragment, visibly so: its first line is ``# Fragment of TARGET``, where
TARGET names the complete example it continues: a page under ``docs/`` (``app/tools.md``,
optionally ``#heading`` for the section holding it) or a file under ``examples/``.
Every other block declares what it is (``text``, ``sh``, ``toml``, ...), so a program
cannot pass for output by leaving its fence unlabelled.
"""

from __future__ import annotations

import re
from pathlib import Path

import attrs

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PROGRAM_LANGUAGES = frozenset({"python", "py"})
#: What a non-program block may be: output, shell commands, configuration, diagrams.
#: (``js``: the AG-UI page's client, which tests/service/test_agui.py runs with node.)
OTHER_LANGUAGES = frozenset({"text", "sh", "bash", "console", "toml", "json", "ini", "js"})

_FENCE = re.compile(
    r"^(?P<indent> *)(?P<fence>```+|~~~+)(?P<info>[^\n`]*)\n"
    r"(?P<body>.*?)^(?P=indent)(?P=fence)[ \t]*$",
    re.S | re.M,
)
_HEADING = re.compile(r"^#{1,6} +(?P<title>.+?) *#*$", re.M)
_FRAGMENT = re.compile(r"^# Fragment of (?P<target>[\w./-]+(?:#[\w-]+)?)")


@attrs.frozen
class Block:
    page: Path
    line: int
    language: str
    body: str
    #: The anchor (GitHub's slug) of the heading the block is under, "" before any.
    section: str
    #: The page's text after this block.
    after: str

    @property
    def name(self) -> str:
        return f"{self.page.relative_to(DOCS)}:{self.line}"

    @property
    def is_program(self) -> bool:
        return self.language in PROGRAM_LANGUAGES

    @property
    def fragment_of(self) -> str | None:
        found = _FRAGMENT.match(self.body)
        return found.group("target") if found else None

    @property
    def is_complete_program(self) -> bool:
        return self.is_program and self.fragment_of is None


def slug(title: str) -> str:
    """A heading's anchor as GitHub makes it: lower case, punctuation dropped, spaces
    become hyphens."""
    text = re.sub(r"[`*_]", "", title).strip().lower()
    return re.sub(r" ", "-", re.sub(r"[^\w\- ]", "", text))


def blocks(page: Path) -> list[Block]:
    text = page.read_text(encoding="utf-8")
    matches = list(_FENCE.finditer(text))
    headings = [
        (heading.start(), slug(heading.group("title")))
        for heading in _HEADING.finditer(text)
        # a "# comment" inside a fence is no heading
        if not any(m.start() < heading.start() < m.end() for m in matches)
    ]
    found = []
    for match in matches:
        section = ""
        for start, anchor in headings:
            if start < match.start():
                section = anchor
        found.append(
            Block(
                page=page,
                line=text.count("\n", 0, match.start()) + 1,
                language=match.group("info").strip(),
                body=match.group("body"),
                section=section,
                after=text[match.end() :],
            )
        )
    return found


def pages() -> list[Path]:
    return sorted(DOCS.rglob("*.md"))


def all_blocks() -> list[Block]:
    return [block for page in pages() for block in blocks(page)]


def expected_output(block: Block) -> str | None:
    """The ``text`` block right after ``block`` (nothing but blank lines between): the
    program's exact standard output, or None when the page shows none."""
    found = re.match(r"\s*```text\n(.*?)^```$", block.after, re.S | re.M)
    return found.group(1) if found else None
