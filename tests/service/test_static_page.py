"""The web page's files ship in the package, and its scripts never render data as HTML."""

from __future__ import annotations

import re
from importlib import resources

STATIC = resources.files("emelex.service.transport") / "_static"
#: Sinks that turn a string into markup or code; app.js builds DOM with text nodes only.
HTML_SINKS = re.compile(
    r"innerHTML|outerHTML|insertAdjacentHTML|document\.write|\beval\(|new Function|srcdoc"
)


def _code_lines(source: str) -> list[str]:
    """The script's lines without // comments (the header comment names the sinks)."""
    return [line.split("//", 1)[0] for line in source.splitlines()]


def test_the_page_files_are_package_data() -> None:
    names = {entry.name for entry in STATIC.iterdir()}
    assert {"index.html", "app.js", "style.css", "favicon.svg"} <= names
    page = (STATIC / "index.html").read_text(encoding="utf-8")
    assert '<script type="module" src="/static/app.js">' in page
    # Everything the page loads comes from the Host itself: no CDN, no framework.
    for url in re.findall(r'(?:src|href)="([^"]+)"', page):
        assert url.startswith("/static/"), url


def test_the_page_forbids_inline_and_foreign_scripts() -> None:
    page = (STATIC / "index.html").read_text(encoding="utf-8")
    policy = re.search(r'http-equiv="Content-Security-Policy"\s+content="([^"]+)"', page)
    assert policy is not None
    directives = dict(d.strip().split(" ", 1) for d in policy.group(1).split(";"))
    assert directives["script-src"] == "'self'"
    assert directives["default-src"] == "'none'"


def test_the_scripts_have_no_html_sinks() -> None:
    scripts = [entry for entry in STATIC.iterdir() if entry.name.endswith(".js")]
    assert {"app.js", "markdown.js", "dom.js", "drafts.js"} <= {s.name for s in scripts}
    for script in scripts:
        source = script.read_text(encoding="utf-8")
        offending = [line for line in _code_lines(source) if HTML_SINKS.search(line)]
        assert offending == [], script.name
    # The check itself bites: a sink in code is found.
    assert HTML_SINKS.search(_code_lines("node.innerHTML = text; // fine")[0])
