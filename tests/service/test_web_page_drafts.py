"""The web page shows the running answer while it streams (live drafts), in a real
headless Chromium against a served Host: the partial answer is on screen before the turn
commits, survives a reload, stays text, and gives way to the committed row.

The model holds mid-answer until the test releases it (PacedModel), so each step is
deterministic; screenshots of each step go under the test's tmp_path.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from emelex.agent import DenyAll
from emelex.app import Agent
from emelex.testing import Say, ScriptedModel, Think
from tests.service.paced import PacedModel
from tests.service.web_host import NO_CHROMIUM, ServedHost, call_host, chromium_missing, served_host

STEP_SECONDS = 20
#: Streamed before the hold: markup that would run if the page rendered it as HTML.
MARKUP = "<img src=x onerror=\"window.__emelexPwned='draft'\"><b>bold?</b> "
HELD = "Hello " + MARKUP

sync_api = pytest.importorskip("playwright.sync_api")

if chromium_missing():
    pytest.skip(NO_CHROMIUM, allow_module_level=True)


@pytest.fixture
def model() -> PacedModel:
    scripted = ScriptedModel(
        [[Think("Thinking it over."), Say("Hello "), Say(MARKUP), Say("and goodbye.")]]
    )
    return PacedModel(scripted, hold_after=3)


@pytest.fixture
def served(tmp_path: Path, model: PacedModel) -> Iterator[ServedHost]:
    root = tmp_path / "root"
    root.mkdir()
    builder = Agent.builder().name("helper").instructions("Help.").model(model)
    with served_host(root, {"helper": builder.approver(DenyAll()).build()}) as host:
        yield host


def test_the_page_shows_the_answer_streaming_before_it_commits(
    served: ServedHost, model: PacedModel, browser: Any, tmp_path: Path
) -> None:
    expect = sync_api.expect
    expect.set_options(timeout=STEP_SECONDS * 1000)
    workspace = tmp_path / "work"
    workspace.mkdir()
    created = call_host(served, "create_session", "helper", workspace, operation="c")
    session_id = created.session.id
    page = browser.new_page(viewport={"width": 1100, "height": 700})
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    shots: list[Path] = []

    def shot(name: str) -> None:
        path = tmp_path / f"{len(shots) + 1:02d}-{name}.png"
        page.screenshot(path=str(path), full_page=True)
        shots.append(path)

    page.goto(f"{served.url}/#session={session_id}")
    page.fill("#token-input", served.token)
    page.click("#token-form button")
    expect(page.locator("#watch-status")).to_have_attribute("data-state", "live")

    page.fill("#send-text", "hello")
    page.click("#send-button")

    async def held() -> None:
        with trio.fail_after(STEP_SECONDS):
            await model.holding.wait()

    served.run(held)
    # The model is held mid-answer: nothing committed, the partial answer on screen.
    draft = page.locator("#drafts li.draft")
    expect(draft).to_have_count(1)
    expect(draft.locator(".body")).to_have_text(HELD)
    expect(page.locator("#rows li.assistant")).to_have_count(0)
    reasoning = draft.locator("details.reasoning")
    expect(reasoning).to_be_visible()
    assert reasoning.evaluate("node => node.open") is False  # collapsed, as in rows
    expect(draft.locator(".thinking")).to_have_text("Thinking it over.")
    shot("draft")

    # A reload mid-answer shows the same draft again (sent from its beginning).
    page.reload()
    expect(page.locator("#watch-status")).to_have_attribute("data-state", "live")
    expect(draft).to_have_count(1)
    expect(draft.locator(".body")).to_have_text(HELD)
    expect(page.locator("#queue li[data-state='running']")).to_have_count(1)
    shot("draft-after-reload")

    # Markup in the draft stayed text.
    assert page.evaluate("window.__emelexPwned") is None
    assert page.locator("#drafts img, #drafts b, #drafts script").count() == 0

    async def release() -> None:
        model.release.set()

    served.run(release)
    answer = page.locator("#rows li.assistant .body")
    expect(answer).to_have_text(HELD + "and goodbye.")
    expect(draft).to_have_count(0)  # the committed row replaced the provisional one
    expect(page.locator("#queue li[data-state]")).to_have_count(0)
    shot("committed")
    assert page.evaluate("window.__emelexPwned") is None
    assert errors == []
    assert all(path.stat().st_size > 0 for path in shots)
