"""What a new user meets first on the web page, in a real headless Chromium against a
served Host: the token panel before any token was tried (no error shown), an answer in
Markdown rendered safely (formatting yes; raw HTML and ``javascript:`` links no), the
queue and diagnostics labelled in words instead of raw invocation ids, and a layout that
works in a 700-pixel-wide window. Screenshots of each step go under the test's tmp_path.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from emelex.agent import DenyAll
from emelex.app import Agent
from emelex.testing import Fail, Say, ScriptedModel, Wait
from tests.service.web_host import (
    NO_CHROMIUM,
    ServedHost,
    call_host,
    chromium_missing,
    screenshot,
    served_host,
)

STEP_SECONDS = 20
MARKDOWN = """# Plan

Some **bold**, some *emphasis*, `inline code` and a [safe link](https://example.org/doc).

- first item
- second item with <b>raw html</b>

1. one
2. two

```
def f():
    return "<script>window.__emelexPwned = 'fence'</script>"
```

> quoted

Do not follow [this](javascript:window.__emelexPwned='link') or [that](data:text/html,x).
<img src=x onerror="window.__emelexPwned = 'img'"> stays text.
"""

sync_api = pytest.importorskip("playwright.sync_api")

if chromium_missing():
    pytest.skip(NO_CHROMIUM, allow_module_level=True)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[ServedHost]:
    model = ScriptedModel(
        [
            [Say(MARKDOWN)],
            [Say("Working"), Wait(3600)],
            [Fail(RuntimeError("model down"))],
        ]
    )
    root = tmp_path / "root"
    root.mkdir()
    builder = Agent.builder().name("helper").instructions("Help.").model(model)
    with served_host(root, {"helper": builder.approver(DenyAll()).build()}) as host:
        yield host


def test_a_first_visit_reads_well(served: ServedHost, browser: Any, tmp_path: Path) -> None:
    expect = sync_api.expect
    expect.set_options(timeout=STEP_SECONDS * 1000)
    workspace = tmp_path / "work"
    workspace.mkdir()
    page = browser.new_page(viewport={"width": 1200, "height": 820})
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))

    # No token was tried yet: the panel asks for one, without an error in red.
    page.goto(served.url + "/")
    expect(page.locator("#token-panel")).to_be_visible()
    screenshot(page, tmp_path, "01-token")
    expect(page.locator("#token-error")).to_be_hidden()
    expect(page.locator("#error")).to_be_hidden()
    # A wrong token is an error worth showing.
    page.fill("#token-input", "not-the-token")
    page.click("#token-form button")
    expect(page.locator("#token-error")).to_be_visible()
    page.fill("#token-input", served.token)
    page.click("#token-form button")
    expect(page.locator("#host-status")).to_have_attribute("data-state", "up")

    page.click("#new-session summary")
    page.fill("#create-agent", "helper")
    page.fill("#create-workspace", str(workspace))
    page.fill("#create-title", "First hour")
    page.click("#create-form button")
    expect(page.locator("#watch-status")).to_have_attribute("data-state", "live")
    session_id = call_host(served, "sessions")[0].id

    # An answer in Markdown: formatting rendered, HTML and unsafe links shown as text.
    page.fill("#send-text", "show me markdown")
    page.click("#send-button")
    body = page.locator("#rows li.assistant .body").last
    expect(body).to_contain_text("stays text.")
    page.wait_for_timeout(300)  # an injected onerror would have fired by now
    screenshot(page, tmp_path, "02-markdown")
    expect(body.locator("h1")).to_have_text("Plan")
    expect(body.locator("strong")).to_have_text("bold")
    expect(body.locator("em")).to_have_text("emphasis")
    expect(body.locator("code").first).to_have_text("inline code")
    expect(body.locator("ul > li")).to_have_count(2)
    expect(body.locator("ol > li")).to_have_count(2)
    expect(body.locator("pre")).to_contain_text("<script>window.__emelexPwned = 'fence'</script>")
    expect(body.locator("blockquote")).to_have_text("quoted")
    link = body.locator("a")
    expect(link).to_have_count(1)  # only the https link is a link
    expect(link).to_have_attribute("href", "https://example.org/doc")
    assert "noopener" in (link.get_attribute("rel") or "")
    expect(body).to_contain_text("<b>raw html</b>")
    expect(body).to_contain_text("javascript:window.__emelexPwned='link'")
    assert body.locator("b, img, script, iframe, svg").count() == 0
    assert page.evaluate("window.__emelexPwned") is None

    # The queue says what runs in words: the message sent, not an invocation id.
    page.fill("#send-text", "a long task")
    page.click("#send-button")
    running = page.locator("#queue li[data-state='running']")
    expect(running).to_have_count(1)
    screenshot(page, tmp_path, "03-queue")
    invocation_id = running.get_attribute("data-invocation-id") or ""
    assert invocation_id
    expect(running).to_contain_text("a long task")
    expect(running).not_to_contain_text(invocation_id)
    assert invocation_id in (running.locator(".what").get_attribute("title") or "")
    page.click("#stop-button")
    expect(page.locator("#queue li[data-state]")).to_have_count(0)

    # A diagnostic names its invocation the same way.
    page.fill("#send-text", "fail now")
    page.click("#send-button")
    expect(page.locator("#diagnostics li")).to_have_count(1)
    page.click("#diagnostics-panel summary")
    diagnostic = page.locator("#diagnostics li")
    expect(diagnostic).to_contain_text("fail now")
    assert call_host(served, "queue", session_id).entries == ()

    # 700 pixels wide: one column, nothing wider than the window.
    page.set_viewport_size({"width": 700, "height": 900})
    page.wait_for_timeout(200)
    screenshot(page, tmp_path, "04-700px")
    assert page.evaluate("document.documentElement.scrollWidth") <= 700
    session_box = page.locator("#session").bounding_box()
    assert session_box is not None and session_box["width"] >= 600
    send_box = page.locator("#send-text").bounding_box()
    assert send_box is not None and send_box["x"] + send_box["width"] <= 700
    assert errors == []
