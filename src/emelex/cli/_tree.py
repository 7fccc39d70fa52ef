"""The actor tree of a diagnostics snapshot drawn with ``rich`` for a terminal.

The plain-text form for pipes and files stays :func:`emelex.cli._render.render_tree`
(scripts read it). Here the same words are styled and cropped to the terminal's width,
so one node is always one row. Every label is a :class:`rich.text.Text` built from
:func:`safe` text: markup in another process's actor names is never interpreted.
"""

from __future__ import annotations

import io
from typing import Any, TextIO

from rich.console import Console
from rich.live import Live
from rich.text import Text
from rich.tree import Tree

from emelex.cli._safe import safe

_STATE_STYLES = {"running": "green", "cancelling": "yellow", "failed": "red", "done": "dim"}


def _label(*parts: tuple[str, str]) -> Text:
    text = Text(no_wrap=True, overflow="ellipsis", end="")
    for words, style in parts:
        text.append(safe(words), style=style)
    return text


def _node_label(node: dict[str, Any]) -> Text:
    extra = []
    mailbox = node.get("mailbox")
    if mailbox:
        extra.append(f"mailbox {mailbox['occupancy']}/{mailbox['capacity']}")
    if node.get("cancel_requested"):
        extra.append("cancel requested")
    if node.get("thread_alive") is not None:
        extra.append("thread alive" if node["thread_alive"] else "thread ended")
    state = str(node["state"])
    return _label(
        (f"{node['kind']} ", "dim"),
        (repr(node["name"]), "bold"),
        (f" {state}", _STATE_STYLES.get(state, "")),
        (f" {node['age_seconds']:.1f}s", "dim"),
        (f" [{', '.join(extra)}]" if extra else "", "yellow"),
    )


def actor_tree(snapshot: dict[str, Any]) -> Tree:
    """The snapshot as a :class:`rich.tree.Tree`: the process line on top, each actor
    under its parent. Same words as :func:`render_tree`."""
    header = _label(
        (f"{snapshot.get('supervisor', '?')}", "bold"),
        (f" (pid {snapshot.get('pid', '?')}): {snapshot.get('actors', 0)} actors", ""),
    )
    tree = Tree(header, guide_style="dim")

    def add(parent: Tree, node: dict[str, Any]) -> None:
        branch = parent.add(_node_label(node))
        for child in node.get("children", []):
            add(branch, child)

    for root in snapshot.get("roots", []):
        add(tree, root)
    return tree


def _console(file: TextIO, width: int) -> Console:
    return Console(
        file=file,
        width=max(width, 20),
        force_terminal=True,
        color_system="standard",
        highlight=False,
        emoji=False,
        legacy_windows=False,
    )


def tree_lines(snapshot: dict[str, Any], width: int) -> list[str]:
    """The styled tree as terminal lines (SGR codes only), each at most ``width``
    columns: for a region of the screen that :class:`SplitScreen` positions itself."""
    console = _console(io.StringIO(), width)
    with console.capture() as capture:
        console.print(actor_tree(snapshot), crop=True, overflow="ellipsis")
    return capture.get().splitlines()


class LiveTree:
    """The tree redrawn in place on a terminal nothing else writes to (``supervise
    --socket`` on a terminal): rich erases exactly the rows it drew last time, where the
    hand-made code cleared the whole screen."""

    def __init__(self, out: TextIO) -> None:
        self._console = Console(file=out, highlight=False, emoji=False)
        # Cropped to the screen: a tree taller than the terminal cannot be erased.
        self._live = Live(
            console=self._console,
            auto_refresh=False,
            vertical_overflow="crop",
            redirect_stdout=False,
            redirect_stderr=False,
        )

    def show(self, snapshot: dict[str, Any]) -> None:
        if not self._live.is_started:
            self._live.start()
        self._live.update(actor_tree(snapshot), refresh=True)

    def close(self) -> None:
        if self._live.is_started:
            self._live.stop()


def print_tree(snapshot: dict[str, Any], file: TextIO) -> None:
    """One tree to ``file``: styled on a terminal, :func:`render_tree` text otherwise."""
    from emelex.cli._render import render_tree

    if file.isatty():
        console = Console(file=file, highlight=False, emoji=False)
        console.print(actor_tree(snapshot), crop=True, overflow="ellipsis")
        file.flush()
    else:
        print(render_tree(snapshot), file=file, flush=True)
