"""Approval policies of the command line: a terminal prompt, or flags for this run."""

from __future__ import annotations

import os
import sys
from collections.abc import Collection

import trio

from emelex.agent import ApprovalContext, ApprovalDecision, Approve, Deny
from emelex.cli._render import safe

READ_TOOLS = frozenset({"read_file", "list_directory", "find_files", "grep"})
MAX_ANSWER_BYTES = 1024


class FlagApprovals:
    """Approves calls to the tools named on the command line (for this run only);
    denies everything else. Nothing is remembered between calls."""

    def __init__(self, allowed: Collection[str]) -> None:
        self.allowed = frozenset(allowed)

    async def decide(self, context: ApprovalContext) -> ApprovalDecision:
        if context.call.name in self.allowed:
            return Approve()
        return Deny(f"not approved: run with --allow-tool {context.call.name} to allow it")


class TerminalApprovals:
    """Asks on the terminal for every call, naming the exact action; default No.

    Reads the answer from the terminal without a blocking thread, so cancelling the turn
    (Ctrl-C) cancels a pending prompt at once.
    """

    def __init__(self, fallback: FlagApprovals, lines: StdinLines) -> None:
        self.fallback = fallback
        self.lines = lines
        self._asked: set[str] = set()

    def was_asked(self, call_id: str) -> bool:
        """Whether the prompt showed this call's approval sentence (asked once: forgets)."""
        try:
            self._asked.remove(call_id)
        except KeyError:
            return False
        return True

    async def decide(self, context: ApprovalContext) -> ApprovalDecision:
        if context.call.name in self.fallback.allowed:
            return Approve()
        self._asked.add(context.call.id)
        print(
            f"\n\x1b[1mApprove {safe(context.call.name)}?\x1b[0m {safe(context.reason)}\n  [y/N] ",
            end="",
            file=sys.stderr,
            flush=True,
        )
        answer = await self.lines.readline()
        if answer is not None and answer.strip().lower() in ("y", "yes"):
            return Approve()
        return Deny("denied at the terminal")


class StdinLines:
    """Lines from stdin, read asynchronously (cancellable, no blocking thread).

    Each line is bounded to MAX_LINE_BYTES (longer input raises ValueError). Use as an
    async context manager; closing puts stdin back into blocking mode.
    """

    MAX_LINE_BYTES = 64 * 1024

    def __init__(self) -> None:
        self._stream = trio.lowlevel.FdStream(os.dup(sys.stdin.fileno()))
        self._buffer = b""
        self._eof = False

    async def __aenter__(self) -> StdinLines:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._stream.aclose()

    async def readline(self) -> str | None:
        """The next line without its newline, or None at end of input."""
        while b"\n" not in self._buffer and not self._eof:
            if len(self._buffer) > self.MAX_LINE_BYTES:
                raise ValueError(f"input line longer than {self.MAX_LINE_BYTES} bytes")
            chunk = await self._stream.receive_some(MAX_ANSWER_BYTES * 16)
            if not chunk:
                self._eof = True
            self._buffer += chunk
        if not self._buffer:
            return None
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line.decode("utf-8", "replace")
