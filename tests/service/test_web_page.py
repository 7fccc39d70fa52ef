"""The Host's web page in a real headless Chromium (the Debian package), against a Host
served by real hypercorn with a session on a ScriptedModel.

One scenario, step by step, with a screenshot of each step under the test's tmp_path:
token entry, a new session, an answer arriving live, one tool call approved and
another denied (with a reload while the second waits), a long turn reloaded and
stopped, and a model answer full of markup that must stay text.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from emelex.agent import DenyAll
from emelex.app import Agent
from emelex.testing import Call, Fail, Say, ScriptedModel, Think, Wait
from emelex.tools import tool
from tests.service.web_host import NO_CHROMIUM, ServedHost, call_host, chromium_missing, served_host

STEP_SECONDS = 20
NOTES: list[str] = []
#: A model answer that would run script if the page rendered it as HTML.
PAYLOAD = (
    "<script>window.__emelexPwned = 'script'</script>"
    '<img src="x" onerror="window.__emelexPwned = \'img\'">'
    "<svg onload=\"window.__emelexPwned = 'svg'\"></svg>"
    "<iframe srcdoc=\"<script>parent.__emelexPwned='iframe'</script>\"></iframe>"
)

sync_api = pytest.importorskip("playwright.sync_api")

if chromium_missing():
    pytest.skip(NO_CHROMIUM, allow_module_level=True)


@tool(needs_approval=True)
async def note(text: str) -> str:
    """Write a note down.

    Args:
        text: What to note.
    """
    NOTES.append(text)
    return f"noted: {text}"


def _agent() -> Agent:
    model = ScriptedModel(
        [
            # 1: an answer that arrives while the page watches.
            [Think("The user says hello."), Say("Hello "), Wait(1.5), Say("from the Host.")],
            # 2: two calls, one approved and one denied, then a summary.
            [Call("note", {"text": "keep this"})],
            [Call("note", {"text": "drop this"})],
            [Say("I kept one note; the other was refused.")],
            # 3: a long turn that is stopped.
            [Say("Working"), Wait(3600)],
            # 4: markup from the model.
            [Think(PAYLOAD), Say(PAYLOAD)],
            # 5: a failing model round becomes a diagnostic.
            [Fail(RuntimeError("upstream said: secret response body"))],
        ]
    )
    builder = Agent.builder().name("helper").instructions("Help.").model(model).tool(note)
    return builder.approver(DenyAll()).build()


@pytest.fixture
def served(tmp_path: Path) -> Iterator[ServedHost]:
    NOTES.clear()
    root = tmp_path / "root"
    root.mkdir()
    with served_host(root, {"helper": _agent()}) as host:
        yield host


class Steps:
    """Numbered screenshots of each step, kept as the test's artifacts."""

    def __init__(self, page: Any, directory: Path) -> None:
        self.page = page
        self.directory = directory
        self.taken: list[Path] = []

    def shot(self, name: str) -> None:
        path = self.directory / f"{len(self.taken) + 1:02d}-{name}.png"
        self.page.screenshot(path=str(path), full_page=True)
        self.taken.append(path)


def test_web_page_drives_a_session(served: ServedHost, browser: Any, tmp_path: Path) -> None:
    expect = sync_api.expect
    expect.set_options(timeout=STEP_SECONDS * 1000)
    workspace = tmp_path / "work"
    workspace.mkdir()
    page = browser.new_page(viewport={"width": 1200, "height": 820})
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    steps = Steps(page, tmp_path)

    # The TCP listener wants its token; the page asks for it and keeps it in the tab.
    page.goto(served.url + "/")
    expect(page.locator("#token-panel")).to_be_visible()
    page.fill("#token-input", "not-the-token")
    page.click("#token-form button")
    expect(page.locator("#token-error")).to_be_visible()
    page.fill("#token-input", served.token)
    steps.shot("token")
    page.click("#token-form button")
    expect(page.locator("#host-status")).to_have_attribute("data-state", "up")
    assert page.evaluate("sessionStorage.getItem('emelex.token')") == served.token

    # A session of the Host's agent, created from the page.
    page.click("#new-session summary")
    page.fill("#create-agent", "helper")
    page.fill("#create-workspace", str(workspace))
    page.fill("#create-title", "Browser test")
    page.click("#create-form button")
    expect(page.locator("#session-title")).to_have_text("Browser test")
    expect(page.locator("#watch-status")).to_have_attribute("data-state", "live")
    sessions = call_host(served, "sessions")
    assert [s.title for s in sessions] == ["Browser test"]
    session_id = sessions[0].id
    steps.shot("session")

    # 1: the answer arrives through the live watch while the page stays open.
    page.fill("#send-text", "hello")
    page.click("#send-button")
    expect(page.locator("#queue li[data-state='running']")).to_have_count(1)
    expect(page.locator("#stop-button")).to_be_enabled()
    sidebar = page.locator(f"#session-list li[data-session-id='{session_id}']")
    expect(sidebar).to_have_attribute("data-state", "running")
    steps.shot("running")
    answer = page.locator("#rows li.assistant .body")
    expect(answer).to_have_text("Hello from the Host.")
    # It came through the watch: the page read history once, before the send.
    expect(page.locator("#history-info")).to_contain_text("1 page, live through event")
    expect(page.locator("#rows li.user .body")).to_have_text("hello")
    reasoning = page.locator("#rows li.assistant details.reasoning")
    expect(reasoning).to_have_count(1)
    assert reasoning.evaluate("node => node.open") is False  # reasoning starts collapsed
    expect(page.locator("#queue li[data-state]")).to_have_count(0)
    expect(page.locator("#stop-button")).to_be_disabled()
    expect(sidebar).to_have_attribute("data-state", "idle")
    steps.shot("answered")

    # 2: approve the first call; reload while the second waits; deny it.
    page.fill("#send-text", "note two things")
    page.click("#send-button")
    approval = page.locator("#approvals li.approval")
    expect(approval).to_have_count(1)
    expect(approval.locator(".label")).to_have_text("note")
    expect(approval.locator(".arguments")).to_contain_text('"text": "keep this"')
    steps.shot("approval")
    approval.locator("button.approve").click()
    expect(approval.locator(".arguments")).to_contain_text('"text": "drop this"')
    page.reload()
    expect(page.locator("#watch-status")).to_have_attribute("data-state", "live")
    expect(approval).to_have_count(1)  # the same question after the reload
    expect(approval.locator(".arguments")).to_contain_text('"text": "drop this"')
    expect(page.locator("#queue li[data-state='running']")).to_have_count(1)
    expect(page.locator("#rows li.assistant .body").first).to_have_text("Hello from the Host.")
    steps.shot("reloaded-approval")
    approval.locator(".deny-reason").fill("not this one")
    approval.locator("button.deny").click()
    expect(page.locator("#approvals-panel")).to_be_hidden()
    expect(page.locator("#rows li.assistant .body").last).to_have_text(
        "I kept one note; the other was refused."
    )
    assert NOTES == ["keep this"]
    results = page.locator("#rows li.tool .body")
    expect(results).to_have_count(2)
    expect(results.first).to_have_text("noted: keep this")
    expect(results.last).to_contain_text("not this one")
    resolved = call_host(served, "history", session_id)
    calls = [c.name for r in resolved.rows for c in r.tool_calls]
    assert calls == ["note", "note"]
    steps.shot("approved-and-denied")

    # 3: a long turn: reload mid-turn, see it still running, stop it.
    page.fill("#send-text", "a long task")
    page.click("#send-button")
    expect(page.locator("#queue li[data-state='running']")).to_have_count(1)
    rows_before = page.locator("#rows li").count()
    page.reload()
    expect(page.locator("#watch-status")).to_have_attribute("data-state", "live")
    expect(page.locator("#queue li[data-state='running']")).to_have_count(1)
    expect(page.locator("#rows li")).to_have_count(rows_before)
    steps.shot("reloaded-running")
    page.click("#stop-button")
    expect(page.locator("#queue li[data-state]")).to_have_count(0)
    expect(page.locator("#stop-button")).to_be_disabled()
    assert call_host(served, "queue", session_id).entries == ()
    steps.shot("stopped")

    # 4: markup from the model is shown as text and never runs.
    page.fill("#send-text", "show me markup")
    page.click("#send-button")
    last = page.locator("#rows li.assistant").last
    expect(last.locator(".body")).to_have_text(PAYLOAD)
    last.locator("details.reasoning summary").click()
    expect(last.locator(".thinking")).to_have_text(PAYLOAD)
    page.wait_for_timeout(300)  # an injected onerror/onload would have fired by now
    assert page.evaluate("window.__emelexPwned") is None
    assert page.locator("#rows script, #rows img, #rows svg, #rows iframe").count() == 0
    steps.shot("markup-as-text")

    # 5: the failure shows under Diagnostics, in emelex's words only.
    page.fill("#send-text", "fail now")
    page.click("#send-button")
    expect(page.locator("#diagnostics li")).to_have_count(1)
    expect(page.locator("#diagnostics-count")).to_have_text("(1)")
    page.click("#diagnostics-panel summary")
    diagnostic = page.locator("#diagnostics li").text_content() or ""
    assert "modelError" in diagnostic and "secret response body" not in diagnostic
    steps.shot("diagnostics")

    assert errors == []
    assert all(path.stat().st_size > 0 for path in steps.taken)
    if os.environ.get("EMELEX_WEB_SCREENSHOT"):  # refreshes docs/images by hand
        shutil.copy(steps.directory / "05-approval.png", os.environ["EMELEX_WEB_SCREENSHOT"])
