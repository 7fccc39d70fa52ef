"""The web page's Changes and Files panels in a real headless Chromium, against a Host
served by real hypercorn whose session works in a repository made by the real ``git``.

The repository has a staged edit, a worktree edit, untracked files (an image, a name
that is not UTF-8, a name and a content full of markup) and a directory of more than
one files page. The test opens the page and walks through the changes, a diff, the
directories, a text preview and an image preview (its bytes verified before display),
checks that no markup runs, and takes a screenshot of each step under tmp_path.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import zlib
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import Any

import httpx
import pytest

from emelex.agent import DenyAll
from emelex.app import Agent
from emelex.testing import Say, ScriptedModel
from tests.service.gitrepo import commit, git, git_home, init, needs_git, write
from tests.service.test_static_page import HTML_SINKS
from tests.service.web_host import NO_CHROMIUM, ServedHost, call_host, chromium_missing, served_host

__all__ = ["git_home"]  # the fixture, imported for pytest

STEP_SECONDS = 20
STATIC = resources.files("emelex.service.transport") / "_static"
#: A file name and a file content that would run script if the page rendered them.
HOSTILE_NAME = "<img src=x onerror=alert(1)>.txt"
HOSTILE_TEXT = (
    "<script>window.__emelexPwned = 'script'</script>\n"
    '<img src="x" onerror="window.__emelexPwned = \'img\'">\n'
    "<svg onload=\"window.__emelexPwned = 'svg'\"></svg>\n"
)
LATIN1_NAME = b"caf\xe9.txt"
MANY = 130  # more than one files page (128 entries)

needs_browser = pytest.mark.skipif(
    chromium_missing(),
    reason=NO_CHROMIUM,
)


def png(width: int, height: int) -> bytes:
    """A real PNG (8-bit RGB, a colour gradient) the browser decodes and draws."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    rows = b"".join(
        b"\x00" + b"".join(bytes((x * 16 % 256, y * 16 % 256, 160)) for x in range(width))
        for y in range(height)
    )
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


def _repository(workspace: Path) -> None:
    init(workspace)
    write(workspace, "README.md", "# Demo\n\nFirst version.\n")
    write(workspace, "src/app.py", "def answer():\n    return 41\n")
    for number in range(MANY):
        write(workspace, f"many/f{number:03d}.txt", f"file {number}\n")
    commit(workspace, "first")
    write(workspace, "README.md", "# Demo\n\nSecond version.\n")
    git(workspace, "add", "README.md")  # staged
    write(workspace, "src/app.py", "def answer():\n    return 42\n")  # not staged
    write(workspace, "pics/logo.png", png(16, 16))  # untracked, like the two below
    write(workspace, HOSTILE_NAME, HOSTILE_TEXT)
    write(workspace, LATIN1_NAME, "not UTF-8 in its name\n")


def _agent() -> Agent:
    model = ScriptedModel([[Say("ok")]])
    builder = Agent.builder().name("helper").instructions("Help.").model(model)
    return builder.approver(DenyAll()).build()


@pytest.fixture
def served(tmp_path: Path) -> Iterator[ServedHost]:
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


def _session(served: ServedHost, workspace: Path, title: str) -> str:
    created = call_host(
        served, "create_session", "helper", workspace, operation=f"op-{title}", title=title
    )
    return str(created.session.id)


@needs_git
@needs_browser
def test_changes_and_files_panels(
    served: ServedHost, browser: Any, tmp_path: Path, git_home: Path
) -> None:
    from playwright.sync_api import expect

    expect.set_options(timeout=STEP_SECONDS * 1000)
    workspace = tmp_path / "work"
    _repository(workspace)
    plain = tmp_path / "plain"
    plain.mkdir()
    session_id = _session(served, workspace, "repo")
    plain_id = _session(served, plain, "plain")

    page = browser.new_page(viewport={"width": 1280, "height": 900})
    errors: list[str] = []
    dialogs: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))

    def on_dialog(dialog: Any) -> None:  # alert(1) from an injected handler lands here
        dialogs.append(dialog.message)
        dialog.dismiss()

    page.on("dialog", on_dialog)
    steps = Steps(page, tmp_path)
    page.goto(f"{served.url}/#session={session_id}")
    page.fill("#token-input", served.token)
    page.click("#token-form button")
    expect(page.locator("#session-title")).to_have_text("repo")

    # Changes: each area with its paths, exactly as Git sees them.
    changes = page.locator("#changes")
    staged = changes.locator("li[data-area='staged']")
    worktree = changes.locator("li[data-area='worktree']")
    untracked = changes.locator("li[data-area='untracked']")
    expect(staged).to_have_count(1)
    expect(staged).to_contain_text("README.md")
    expect(worktree).to_have_count(1)
    expect(worktree).to_contain_text("src/app.py")
    expect(worktree.locator(".badge")).to_have_text("M")
    expect(untracked).to_have_count(3)
    shown = sorted(text.strip() for text in untracked.locator(".path").all_text_contents())
    assert shown == sorted([HOSTILE_NAME, "caf\\xe9.txt", "pics/logo.png"])
    expect(page.locator("#changes-head")).to_contain_text("main at ")
    steps.shot("changes")

    # A diff of each area; a binary file says so.
    worktree.locator("button").click()
    expect(page.locator("#diff")).to_contain_text("-    return 41\n+    return 42")
    expect(page.locator("#diff")).to_contain_text("diff --git a/src/app.py b/src/app.py")
    expect(page.locator("#diff-title")).to_have_text("worktree: src/app.py")
    steps.shot("worktree-diff")
    staged.locator("button").click()
    expect(page.locator("#diff")).to_contain_text("-First version.\n+Second version.")
    untracked.filter(has_text="logo.png").locator("button").click()
    expect(page.locator("#diff-note")).to_have_text("Binary files differ (0 → 463 bytes).")
    expect(page.locator("#diff")).to_be_hidden()
    untracked.filter(has_text="onerror").locator("button").click()
    expect(page.locator("#diff")).to_contain_text("+<script>window.__emelexPwned")
    steps.shot("untracked-diff")

    # Files: the root, a directory, the breadcrumb back up, paging through a big directory.
    files = page.locator("#files li")
    expect(files.filter(has_text="src/")).to_have_count(1)
    root_names = [t.split(" ", 1)[0] for t in files.locator(".name").all_text_contents()]
    assert {"README.md", "src/", "many/", "pics/", "caf\\xe9.txt"} <= set(root_names)
    assert ".git/" not in root_names
    files.filter(has_text="src/").locator("button").click()
    expect(page.locator("#files-crumbs")).to_have_text("workspace / src")
    expect(files).to_have_count(1)
    files.locator("button").click()
    expect(page.locator("#preview-text")).to_have_text("def answer():\n    return 42\n")
    expect(page.locator("#preview-title")).to_have_text("src/app.py")
    steps.shot("text-preview")
    page.locator("#files-crumbs button", has_text="workspace").click()
    expect(page.locator("#files-crumbs")).to_have_text("workspace")
    files.filter(has_text="many/").locator("button").click()
    expect(files).to_have_count(128)
    expect(page.locator("#files-more")).to_be_visible()
    page.click("#files-more")
    expect(files).to_have_count(MANY)
    expect(page.locator("#files-more")).to_be_hidden()
    expect(files.last).to_contain_text(f"f{MANY - 1:03d}.txt")
    steps.shot("paged-directory")

    # An image: shown from a Blob URL once its size and SHA-256 match.
    page.locator("#files-crumbs button", has_text="workspace").click()
    files.filter(has_text="pics/").locator("button").click()
    expect(page.locator("#files-crumbs")).to_have_text("workspace / pics")
    files.filter(has_text="logo.png").locator("button").click()
    image = page.locator("#preview-image")
    expect(image).to_be_visible()
    expect(page.locator("#preview-note")).to_have_text("image/png, 463 bytes")
    page.wait_for_function("document.getElementById('preview-image').naturalWidth === 16")
    assert (image.get_attribute("src") or "").startswith("blob:")
    expect(page.locator("#preview-text")).to_be_hidden()
    steps.shot("image-preview")

    # Markup in a name and in a content stays text and never runs.
    page.locator("#files-crumbs button", has_text="workspace").click()
    files.filter(has_text="onerror").locator("button").click()
    expect(page.locator("#preview-text")).to_have_text(HOSTILE_TEXT)
    expect(page.locator("#preview-title")).to_have_text(HOSTILE_NAME)
    expect(image).to_be_hidden()
    page.wait_for_timeout(300)  # an injected onerror/onload would have fired by now
    assert page.evaluate("window.__emelexPwned") is None
    assert dialogs == []
    panels = page.locator("#workspace-panels")
    assert panels.locator("script, svg, iframe, img:not(#preview-image)").count() == 0
    steps.shot("markup-as-text")

    # A file written now appears through watchFiles, and under Changes too (a change of
    # the listed directory asks for a status again); Refresh agrees.
    write(workspace, "late.txt", "written while the page watched\n")
    expect(files.filter(has_text="late.txt")).to_have_count(1)
    expect(untracked).to_have_count(4)
    page.click("#changes-refresh")
    expect(untracked).to_have_count(4)
    expect(untracked.filter(has_text="late.txt")).to_have_count(1)
    steps.shot("watched")

    # A watched directory deleted under the page says so.
    files.filter(has_text="many/").locator("button").click()
    expect(files).to_have_count(128)
    shutil.rmtree(workspace / "many")
    expect(page.locator("#files-note")).to_have_text("This directory was deleted.")
    expect(files).to_have_count(0)
    expect(page.locator("#files-more")).to_be_hidden()
    steps.shot("directory-deleted")

    # Another session whose workspace is no repository.
    page.goto(f"{served.url}/#session={plain_id}")
    expect(page.locator("#session-title")).to_have_text("plain")
    expect(page.locator("#changes-note")).to_contain_text("No repository")
    expect(changes.locator("li")).to_have_count(0)
    expect(page.locator("#preview-title")).to_have_text("")
    steps.shot("no-repository")

    # The served page's own policy header allows blob: images too (both policies apply).
    answer = httpx.get(f"{served.url}/", timeout=STEP_SECONDS)
    assert "img-src 'self' blob:;" in answer.headers["content-security-policy"]
    assert errors == []
    assert all(path.stat().st_size > 0 for path in steps.taken)
    if os.environ.get("EMELEX_WEB_WORKSPACE_SCREENSHOT"):  # refreshes docs/images by hand
        shutil.copy(steps.taken[6], os.environ["EMELEX_WEB_WORKSPACE_SCREENSHOT"])


def _tamper(kind: str, frame: str) -> str | None:
    """One Host frame of a read, altered as ``kind`` says (None: dropped)."""
    parsed = json.loads(frame)
    update = parsed.get("update") or {}
    if kind == "digest" and update.get("kind") == "end":
        update["digest"] = "sha256:" + "0" * 64
    elif kind == "offset" and update.get("kind") == "chunk":
        update["offset"] += 1
    elif kind == "size" and update.get("kind") == "end":
        update["size"] += 1
    elif kind == "no-end" and update.get("kind") == "end":
        return None
    return json.dumps(parsed)


@needs_browser
def test_a_preview_shows_only_verified_bytes(
    served: ServedHost, browser: Any, tmp_path: Path
) -> None:
    """Between the Host and the page, a proxy alters the read's frames: the page refuses
    each altered capture and shows the untouched one."""
    from playwright.sync_api import expect

    expect.set_options(timeout=STEP_SECONDS * 1000)
    workspace = tmp_path / "plain"
    workspace.mkdir()
    (workspace / "a.txt").write_text("the original text\n")
    session_id = _session(served, workspace, "plain")
    page = browser.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    mode = {"kind": "none"}

    def proxy(route: Any) -> None:
        server = route.connect_to_server()
        route.on_message(server.send)

        def from_host(message: str | bytes) -> None:
            altered = _tamper(mode["kind"], str(message))
            if altered is not None:
                route.send(altered)

        server.on_message(from_host)

    page.route_web_socket(re.compile(r".*/v1/sub/readFile$"), proxy)
    page.goto(f"{served.url}/#session={session_id}")
    page.fill("#token-input", served.token)
    page.click("#token-form button")
    entry = page.locator("#files li", has_text="a.txt").locator("button")
    note = page.locator("#preview-note")
    text = page.locator("#preview-text")
    refusals = {
        "digest": "The file's SHA-256 does not match; not shown.",
        "offset": "A chunk arrived out of order.",
        "size": "The read does not add up (size or version); not shown.",
        "no-end": "The read ended incomplete (no end).",
    }
    for kind, refusal in refusals.items():
        mode["kind"] = kind
        entry.click()
        expect(note).to_have_text(refusal)
        expect(text).to_be_hidden()
        assert text.text_content() == ""
    mode["kind"] = "none"
    entry.click()
    expect(text).to_have_text("the original text\n")
    expect(note).to_have_text("18 bytes")
    page.screenshot(path=str(tmp_path / "verified.png"))
    assert errors == []


#: Counts the page's settled listFiles answers; a task queued after the answer's JSON runs
#: after every microtask the page's own code chained on it, so its panel is final then.
COUNT_LISTINGS = """
window.__listingsSettled = 0;
const originalFetch = window.fetch.bind(window);
window.fetch = async (resource, init) => {
  const response = await originalFetch(resource, init);
  if (String(resource).endsWith("/v1/op/listFiles")) {
    const json = response.json.bind(response);
    response.json = async () => {
      try {
        return await json();
      } finally {
        setTimeout(() => { window.__listingsSettled += 1; }, 0);
      }
    };
  }
  return response;
};
"""


def _wait_until(page: Any, ready: Any) -> None:
    """Let the page (and its route handlers) run until ``ready()``, for STEP_SECONDS."""
    for _ in range(STEP_SECONDS * 20):
        if ready():
            return
        page.wait_for_timeout(50)
    raise AssertionError("the page never got there")


@needs_browser
def test_a_listing_answered_before_a_deletion_never_brings_the_directory_back(
    served: ServedHost, browser: Any, tmp_path: Path
) -> None:
    """A reread the Host answered while the watched directory still existed, delivered
    only after the watch said the directory was deleted, is dropped by the page."""
    from playwright.sync_api import expect

    expect.set_options(timeout=STEP_SECONDS * 1000)
    workspace = tmp_path / "plain"
    (workspace / "sub").mkdir(parents=True)
    (workspace / "sub" / "a.txt").write_text("a\n")
    session_id = _session(served, workspace, "plain")
    page = browser.new_page()
    page.add_init_script(COUNT_LISTINGS)
    page.goto(f"{served.url}/#session={session_id}")
    page.fill("#token-input", served.token)
    page.click("#token-form button")
    files = page.locator("#files li")
    note = page.locator("#files-note")
    files.filter(has_text="sub/").locator("button").click()
    expect(page.locator("#files-crumbs")).to_have_text("workspace / sub")
    expect(files).to_have_count(1)

    # Every listing from now on is answered by the Host at once and handed to the page
    # only when the test says so.
    held: list[tuple[Any, Any]] = []
    page.route("**/v1/op/listFiles", lambda route: held.append((route, route.fetch())))
    (workspace / "sub" / "b.txt").write_text("b\n")  # a change: the page rereads
    _wait_until(page, lambda: bool(held))
    shutil.rmtree(workspace / "sub")
    expect(note).to_have_text("This directory was deleted.")
    expect(files).to_have_count(0)

    settled = page.evaluate("window.__listingsSettled")
    released = list(held)
    for route, answer in released:
        assert answer.ok  # listed while the directory existed
        route.fulfill(response=answer)
    page.wait_for_function(f"window.__listingsSettled >= {settled + len(released)}")
    assert note.text_content() == "This directory was deleted."
    assert files.count() == 0
    assert len(held) == len(released)  # and the page asked for nothing more
    page.unroute("**/v1/op/listFiles")


#: Name bytes and how the page shows them: UTF-8 as text, anything else escaped.
NAMES = [
    ("café".encode(), "café"),
    (b"caf\xe9", "caf\\xe9"),
    (b"a\nb", "a\\x0ab"),
    ("\u202etxt.exe".encode(), "\\xe2\\x80\\xaetxt.exe"),  # a bidirectional override
    ("\ufeffbom".encode(), "\ufeffbom"),  # a leading BOM is kept
    (b"caf\\xe9", "caf\\x5cxe9"),  # a literal backslash-x never passes for a byte
    (b"a\\b", "a\\b"),
    ("日本".encode(), "日本"),
]


@needs_browser
def test_names_are_shown_exactly(served: ServedHost, browser: Any) -> None:
    page = browser.new_page()
    page.goto(f"{served.url}/")
    shown = page.evaluate(
        """async (names) => {
            const { displayName } = await import("/static/workspace.js");
            return names.map((bytes) => displayName(new Uint8Array(bytes)));
        }""",
        [list(raw) for raw, _ in NAMES],
    )
    assert shown == [expected for _, expected in NAMES]


def test_the_workspace_script_has_no_html_sinks() -> None:
    source = (STATIC / "workspace.js").read_text(encoding="utf-8")
    code = [line.split("//", 1)[0] for line in source.splitlines()]
    assert [line for line in code if HTML_SINKS.search(line)] == []
    app = (STATIC / "app.js").read_text(encoding="utf-8")
    assert 'import { Workspace } from "./workspace.js";' in app


def test_images_may_come_only_from_the_host_or_a_blob() -> None:
    page = (STATIC / "index.html").read_text(encoding="utf-8")
    policy = re.search(r'http-equiv="Content-Security-Policy"\s+content="([^"]+)"', page)
    assert policy is not None
    directives = dict(d.strip().split(" ", 1) for d in policy.group(1).split(";"))
    assert directives["img-src"] == "'self' blob:"
    assert directives["script-src"] == "'self'"
