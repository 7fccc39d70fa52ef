"""Terminal text: escape neutralization, clipping at boundaries, the actor tree, and each
failure or approval sentence shown once."""

from __future__ import annotations

import io
import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from emelex.agent import (
    ApprovalRequested,
    ApprovalResolved,
    Approve,
    Deny,
    ReasoningDelta,
    ToolCompleted,
    ToolProposed,
    TurnFailed,
)
from emelex.cli._render import TerminalRenderer, render_tree, safe
from emelex.model import ToolCall
from emelex.tools import ToolOutput

from .pty_screen import PtyScreen

ATTACKS = {
    "title": "\x1b]0;pwned\x07",
    "clear": "\x1b[2J\x1b[H",
    "clipboard": "\x1b]52;c;Y3VybCBldmlsLnNofHNo\x07",
    "bidi": "\u202etxt.exe",
    "csi8": "\x9b31m",
    "cr": "safe\rEVIL",
}


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_safe_shows_escape_sequences_instead_of_sending_them(name: str) -> None:
    shown = safe(ATTACKS[name])
    assert all(
        ch in "\n\t" or (ch.isprintable() and unicodedata.category(ch) != "Cf") for ch in shown
    ), repr(shown)
    assert "\x1b" not in shown and "\x07" not in shown


def test_safe_names_what_it_neutralized() -> None:
    assert safe("\x1b]0;t\x07") == "\\x1b]0;t\\x07"
    assert safe("a\u202eb") == "a\\u202eb"
    assert safe("\x9b") == "\\x9b"
    assert safe("\x7f") == "\\x7f"
    assert safe("\U000e0041") == "\\U000e0041"  # a tag character (hidden text)
    assert safe("\ud800") == "\\ud800"  # a lone surrogate would make print() fail


def test_safe_keeps_ordinary_text() -> None:
    text = "line one\n\tindented — naïve 日本語 👩\u200d💻 emoji"
    assert safe(text) == text


def test_every_control_and_format_character_is_neutralized() -> None:
    for code in range(0x110000):
        char = chr(code)
        category = unicodedata.category(char)
        if char in "\n\t" or char in "\u200c\u200d":
            continue
        if category in ("Cc", "Cf", "Cs", "Zl", "Zp"):
            assert safe(char) != char, hex(code)


@given(st.text())
def test_safe_output_never_holds_a_control(text: str) -> None:
    shown = safe(text)
    for char in shown:
        if char not in "\n\t\u200c\u200d":
            assert unicodedata.category(char) not in ("Cc", "Cf", "Cs", "Zl", "Zp")


def _node(
    kind: str, name: str, children: list[dict[str, object]] | None = None
) -> dict[str, object]:
    return {
        "kind": kind,
        "name": name,
        "state": "running",
        "age_seconds": 1.0,
        "children": children or [],
    }


def test_render_tree_draws_several_roots_with_connectors() -> None:
    snapshot = {
        "supervisor": "app",
        "pid": 7,
        "actors": 5,
        "roots": [
            _node("session", "a", [_node("turn", "t1", [_node("tool", "x")]), _node("turn", "t2")]),
            _node("service", "diagnostics"),
        ],
    }
    assert render_tree(snapshot).splitlines() == [
        "app (pid 7): 5 actors",
        "├─ session 'a' running 1.0s",
        "│  ├─ turn 't1' running 1.0s",
        "│  │  └─ tool 'x' running 1.0s",
        "│  └─ turn 't2' running 1.0s",
        "└─ service 'diagnostics' running 1.0s",
    ]


def test_render_tree_neutralizes_names_from_the_other_process() -> None:
    snapshot = {"supervisor": "\x1b[2Japp", "roots": [_node("session", "\x1b]0;x\x07")]}
    text = render_tree(snapshot)
    assert "\x1b" not in text and "\x07" not in text
    assert "\\x1b[2Japp" in text


def _renderer(
    prompted: set[str] | None = None,
) -> tuple[TerminalRenderer, io.StringIO, io.StringIO]:
    out, err = io.StringIO(), io.StringIO()
    check = None if prompted is None else prompted.__contains__
    return TerminalRenderer(out, err, prompted=check), out, err


def test_approval_sentence_shown_once_whoever_decides() -> None:
    # Without terminal prompts, the renderer shows the sentence.
    renderer, _, err = _renderer()
    renderer(ApprovalRequested("t", "c1", "Write 2 bytes to /ws/a"))
    renderer(ApprovalResolved("t", "c1", Deny("no")))
    assert err.getvalue().count("Write 2 bytes to /ws/a") == 1
    # With a prompt that showed it, the renderer does not repeat it ...
    renderer, _, err = _renderer(prompted={"c1"})
    renderer(ApprovalRequested("t", "c1", "Write 2 bytes to /ws/a"))
    renderer(ApprovalResolved("t", "c1", Approve()))
    assert "Write 2 bytes" not in err.getvalue() and "approved" in err.getvalue()
    # ... and shows it when a flag decided without a prompt.
    renderer, _, err = _renderer(prompted=set())
    renderer(ApprovalRequested("t", "c2", "Read /ws/b"))
    renderer(ApprovalResolved("t", "c2", Approve()))
    assert err.getvalue().count("Read /ws/b") == 1


def test_failure_shown_once_and_remembered() -> None:
    renderer, _, err = _renderer()
    assert not renderer.failure_shown
    renderer(TurnFailed("t", "model failed: \x1b[2Jboom", rolled_back=True))
    assert renderer.failure_shown
    assert err.getvalue() == "turn failed (rolled back): model failed: \\x1b[2Jboom\n"


def test_tool_output_is_clipped_at_a_word_with_a_marker() -> None:
    renderer, _, err = _renderer()
    text = " ".join(f"word{i}" for i in range(100))
    renderer(ToolCompleted("t", "c1", ToolOutput(text), executed=True))
    line = err.getvalue().strip()
    assert line.startswith("← result: word0 word1")
    shown = line.removeprefix("← result: ").split(" […")[0]
    assert text.startswith(shown + " ")
    assert f"[…{len(text) - len(shown)} more characters]" in line


def test_tool_names_and_arguments_are_neutralized() -> None:
    renderer, out, err = _renderer()
    renderer(ToolProposed("t", 1, ToolCall("c", "\x1b]0;x\x07", {"a": "\x1b[2J\u202e"})))
    assert out.getvalue() == ""
    assert err.getvalue() == '→ tool \\x1b]0;x\\x07 {"a": "\\u001b[2J\\u202e"}\n'


def test_supervise_shows_another_process_names_neutralized(tmp_path: Path) -> None:
    program = tmp_path / "app.py"
    program.write_text(
        "import trio\n"
        "from emelex.runtime import open_supervisor\n"
        "async def main():\n"
        "    async with open_supervisor('app\\x1b]0;title\\x07') as sup:\n"
        "        async with sup.open_actor('session', '\\x1b[2J\\u202eevil'):\n"
        "            await trio.sleep(60)\n"
        "trio.run(main)\n"
    )
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "emelex.cli",
            "supervise",
            "--once",
            "--",
            sys.executable,
            str(program),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert not any(raw in result.stdout for raw in ("\x1b", "\x07", "\u202e"))
    assert result.stdout.startswith("app\\x1b]0;title\\x07 (pid ")
    assert "─ session '\\x1b[2J\\u202eevil' running" in result.stdout


def test_notes_and_reasoning_on_a_terminal_are_dim_and_inert(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TERM", "xterm-256color")
    monkeypatch.delenv("NO_COLOR", raising=False)
    terminal = PtyScreen()
    try:
        out = io.StringIO()
        renderer = TerminalRenderer(out, terminal.file)
        renderer(ReasoningDelta("t", 1, "think [bold]x[/bold] "))
        renderer(ReasoningDelta("t", 1, "\x1b]0;t\x07done"))
        renderer(ToolProposed("t", 1, ToolCall("c", "[red]tool[/red]", {})))
        raw = terminal.sync()
    finally:
        terminal.close()
    assert terminal.rows()[:2] == [
        "think [bold]x[/bold] \\x1b]0;t\\x07done",
        "→ tool [red]tool[/red] {}",
    ]
    assert raw.count(b"\x1b[2m") >= 3 and b"\x1b]0;" not in raw
    assert out.getvalue() == ""
