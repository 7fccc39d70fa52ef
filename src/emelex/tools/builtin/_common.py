"""Helpers shared by the built-in tools: display quoting, result bounds, schemas."""

from __future__ import annotations

import unicodedata
from collections.abc import Callable
from types import TracebackType
from typing import Any

import trio

from emelex.runtime import AgentCancellation
from emelex.tools.workspace import Target, Workspace

#: Longest text a listing-style tool (list, find) returns; longer output is cut.
MAX_RESULT_BYTES = 64 * 1024

_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t", '"': '\\"', "\\": "\\\\"}


def show(text: str) -> str:
    """``text`` in double quotes with every invisible or layout-changing character escaped.

    Approval sentences quote model-supplied text with this, so a newline, a terminal escape
    or a bidirectional override inside a path or command cannot disguise what is shown.
    """
    out: list[str] = ['"']
    for char in text:
        escaped = _ESCAPES.get(char)
        if escaped is not None:
            out.append(escaped)
        elif char.isprintable() and unicodedata.category(char) not in ("Cf", "Co", "Cs"):
            out.append(char)
        else:
            code = ord(char)
            out.append(
                f"\\x{code:02x}"
                if code < 0x100
                else f"\\u{code:04x}"
                if code < 0x10000
                else f"\\U{code:08x}"
            )
    out.append('"')
    return "".join(out)


def absolute(workspace: Workspace, target: Target) -> str:
    """The absolute path a target names (the workspace root joined with its parts)."""
    if target.outside:
        return target.display
    if not target.parts:
        return workspace.root
    return "/".join((workspace.root.rstrip("/"), *target.parts))


def notes(workspace: Workspace, target: Target) -> list[str]:
    """Why a path needs approval: it lies outside the workspace, or it looks secret."""
    found = []
    if target.outside:
        found.append(f"outside the workspace {show(workspace.root)}")
    reason = target.secret_reason()
    if reason is not None:
        found.append(f"a likely-secret path ({reason})")
    return found


def located(workspace: Workspace, target: Target) -> str:
    """A path as approvals name it: first as results and the model name it (the
    target's display, e.g. ``"/workspace/a.txt"``), so the user reads one form
    everywhere, then, for a path inside the workspace, the real file that is
    (``(on disk "/home/me/project/a.txt")``): an approval must say what it touches."""
    shown, real = show(target.display), show(absolute(workspace, target))
    return shown if shown == real else f"{shown} (on disk {real})"


def where(workspace: Workspace, target: Target) -> str:
    """:func:`located` followed by the :func:`notes` that apply to it."""
    return ", ".join([located(workspace, target), *notes(workspace, target)])


def cut_text(text: str, limit: int = MAX_RESULT_BYTES) -> tuple[str, bool]:
    """``text`` cut to at most ``limit`` UTF-8 bytes at a line end when one exists."""
    data = text.encode("utf-8", "surrogateescape")
    if len(data) <= limit:
        return text, False
    head = data[:limit]
    newline = head.rfind(b"\n")
    if newline > 0:
        head = head[: newline + 1]
    return head.decode("utf-8", "ignore"), True


def plural(count: int, word: str, many: str | None = None) -> str:
    return f"{count} {word if count == 1 else (many or word + 's')}"


def object_schema(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    """A closed JSON Schema object: unknown properties are refused."""
    return {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }


class cancelled_by:
    """A cancel scope that is cancelled when ``cancellation`` fires (or already has).

    A class rather than a generator so type checkers know it can swallow the
    cancellation (its ``__exit__`` returns ``bool``).
    """

    def __init__(self, cancellation: AgentCancellation) -> None:
        self._cancellation = cancellation
        self._scope = trio.CancelScope()
        self._remove: Callable[[], None] | None = None

    def __enter__(self) -> trio.CancelScope:
        scope = self._scope.__enter__()
        self._remove = self._cancellation.add_callback(scope.cancel)
        return scope

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        if self._remove is not None:
            self._remove()
        return self._scope.__exit__(exc_type, exc, tb)
