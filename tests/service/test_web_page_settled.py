"""Stop on the web page, in a real headless Chromium against a served Host: an invocation
that committed nothing keeps its place in the history (its prompt, "stopped before
anything was committed", when, and which stop), as text, and a reload shows the same.
Screenshots of each step go under the test's tmp_path.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from emelex.agent import DenyAll
from emelex.app import Agent
from emelex.testing import Say, ScriptedModel, Wait
from tests.service.web_host import (
    NO_CHROMIUM,
    ServedHost,
    call_host,
    chromium_missing,
    screenshot,
    served_host,
)

STEP_SECONDS = 20
PROMPT = "a long task <img src=x onerror=\"window.__emelexPwned = 'prompt'\">"

sync_api = pytest.importorskip("playwright.sync_api")

if chromium_missing():
    pytest.skip(NO_CHROMIUM, allow_module_level=True)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[ServedHost]:
    model = ScriptedModel([[Say("Working on it"), Wait(3600)], [Say("Done now")]])
    root = tmp_path / "root"
    root.mkdir()
    builder = Agent.builder().name("helper").instructions("Help.").model(model)
    with served_host(root, {"helper": builder.approver(DenyAll()).build()}) as host:
        yield host


def _history(page: Any) -> list[tuple[str, str]]:
    """The history list top to bottom: (kind, text) of each row and marker."""
    items = page.locator("#rows > li")
    found = []
    for index in range(items.count()):
        item = items.nth(index)
        classes = (item.get_attribute("class") or "").split()
        kind = "settled" if "settled" in classes else (item.get_attribute("data-role") or "")
        found.append((kind, item.locator(".body").first.inner_text()))
    return found


def _check_markers(page: Any, session_id: str, served: ServedHost) -> None:
    expect = sync_api.expect
    markers = page.locator("#rows li.settled")
    expect(markers).to_have_count(2)
    queued, running = markers.nth(0), markers.nth(1)
    expect(queued.locator(".body")).to_have_text("queued, then removed")
    expect(queued.locator(".settled-note")).to_contain_text(
        "stopped before anything was committed (removed from the queue before it ran)"
    )
    # The prompt is text: the markup in it is shown, never built.
    expect(running.locator(".body")).to_have_text(PROMPT)
    note = running.locator(".settled-note")
    expect(note).to_contain_text("stopped before anything was committed")
    expect(note).not_to_contain_text("removed from the queue")
    settled = call_host(served, "queue", session_id).settled
    assert [s.text for s in settled] == ["queued, then removed", PROMPT]
    stop = settled[1].stop_operation
    assert stop is not None and stop.startswith("web-")
    expect(note).to_contain_text(f"by stop {stop[:15]}…")  # the whole of it on hover
    expect(note).to_have_attribute("title", f"stop {stop}")
    # When: the Host's time, as the page's locale writes it.
    assert settled[1].finished_at_ms is not None
    written = page.evaluate(f"new Date({settled[1].finished_at_ms}).toLocaleString()")
    expect(note).to_contain_text(written)
    assert running.locator("img, script").count() == 0
    assert page.evaluate("window.__emelexPwned") is None


def test_a_stopped_turn_keeps_its_place_in_history(
    served: ServedHost, browser: Any, tmp_path: Path
) -> None:
    expect = sync_api.expect
    expect.set_options(timeout=STEP_SECONDS * 1000)
    workspace = tmp_path / "work"
    workspace.mkdir()
    page = browser.new_page(viewport={"width": 1100, "height": 800})
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(served.url + "/")
    page.fill("#token-input", served.token)
    page.click("#token-form button")
    page.click("#new-session summary")
    page.fill("#create-agent", "helper")
    page.fill("#create-workspace", str(workspace))
    page.fill("#create-title", "Stopping")
    page.click("#create-form button")
    expect(page.locator("#watch-status")).to_have_attribute("data-state", "live")
    session_id = call_host(served, "sessions")[0].id

    # One turn runs and streams a partial answer; a second message waits behind it.
    page.fill("#send-text", PROMPT)
    page.click("#send-button")
    expect(page.locator("#drafts li")).to_contain_text("Working on it")
    page.fill("#send-text", "queued, then removed")
    page.click("#send-button")
    queued = page.locator("#queue li[data-state='queued']")
    expect(queued).to_have_count(1)
    screenshot(page, tmp_path, "01-running-and-queued")
    queued.locator("button").click()
    expect(page.locator("#rows li.settled")).to_have_count(1)
    page.click("#stop-button")
    expect(page.locator("#queue li[data-state]")).to_have_count(0)
    expect(page.locator("#drafts li")).to_have_count(0)
    _check_markers(page, session_id, served)
    screenshot(page, tmp_path, "02-stopped")
    # Nothing of the stopped turn was committed: only the markers say it happened.
    assert call_host(served, "history", session_id).rows == ()

    # A reload rebuilds the page from the Host alone: the markers are still in place.
    page.reload()
    expect(page.locator("#watch-status")).to_have_attribute("data-state", "live")
    _check_markers(page, session_id, served)
    screenshot(page, tmp_path, "03-reloaded")

    # Later work follows them in history.
    page.fill("#send-text", "and now?")
    page.click("#send-button")
    expect(page.locator("#rows li.assistant .body")).to_have_text("Done now")
    assert _history(page) == [
        ("settled", "queued, then removed"),
        ("settled", PROMPT),
        ("user", "and now?"),
        ("assistant", "Done now"),
    ]
    screenshot(page, tmp_path, "04-after")
    page.reload()
    expect(page.locator("#rows li.assistant .body")).to_have_text("Done now")
    expect(page.locator("#rows li.settled")).to_have_count(2)
    assert _history(page)[:2] == [("settled", "queued, then removed"), ("settled", PROMPT)]
    assert errors == []
    assert all(
        (tmp_path / f"{name}.png").stat().st_size > 0 for name in ("02-stopped", "03-reloaded")
    )
