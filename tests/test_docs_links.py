"""Every relative link in README.md and docs/ points at a file that exists, and every
``#anchor`` at a heading of its target page (GitHub's heading slugs)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])

# Fenced blocks and inline code hold examples, not links.
_FENCE = re.compile(r"^```.*?^```", re.S | re.M)
_INLINE = re.compile(r"`[^`\n]*`")
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
_HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$", re.M)


def _prose(text: str) -> str:
    return _INLINE.sub("", _FENCE.sub("", text))


def _slug(heading: str) -> str:
    # GitHub: lower case, drop everything but word characters, hyphens and spaces,
    # then each space becomes a hyphen.
    text = heading.replace("`", "").strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    found: set[str] = set()
    for heading in _HEADING.findall(_FENCE.sub("", page.read_text(encoding="utf-8"))):
        slug = _slug(heading)
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def relative_links(page: Path) -> list[str]:
    return [
        target
        for target in _LINK.findall(_prose(page.read_text(encoding="utf-8")))
        if not re.match(r"[a-z][a-z0-9+.-]*:", target)  # http:, https:, mailto:, ...
    ]


def broken_links(page: Path) -> list[str]:
    broken = []
    for target in relative_links(page):
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists():
            broken.append(f"{target}: no such file")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            broken.append(f"{target}: no heading #{anchor} in {linked.name}")
    return broken


def test_the_pages_are_found() -> None:
    names = {page.relative_to(ROOT).as_posix() for page in PAGES}
    assert {"README.md", "docs/architecture.md", "docs/api.md"} <= names


def test_readme_links_the_architecture_and_the_api_reference() -> None:
    links = relative_links(ROOT / "README.md")
    assert "docs/architecture.md" in links
    assert "docs/api.md" in links


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.relative_to(ROOT).as_posix())
def test_relative_links_resolve(page: Path) -> None:
    assert broken_links(page) == []


def test_a_broken_link_is_reported(tmp_path: Path) -> None:
    (tmp_path / "other.md").write_text("# Title\n\n## Some `code` here\n", encoding="utf-8")
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](other.md) [ok](other.md#some-code-here) [ok](#top) [web](https://x.org/y)\n"
        "# Top\n"
        "`[not a link](nowhere.md)`\n"
        "[missing](nowhere.md) [bad anchor](other.md#nothing)\n",
        encoding="utf-8",
    )
    assert broken_links(page) == [
        "nowhere.md: no such file",
        "other.md#nothing: no heading #nothing in other.md",
    ]
