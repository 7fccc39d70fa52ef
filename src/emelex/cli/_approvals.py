"""Approval policies of the command line: a terminal prompt, or flags for this run."""

from __future__ import annotations

import os
import sys
from collections.abc import Collection
from typing import TextIO

import trio

from emelex.agent import ApprovalContext, ApprovalDecision, Approve, Deny
from emelex.cli._render import safe
from emelex.cli._workspace_reads import READ_TOOLS, confined_read_refusal

MAX_ANSWER_BYTES = 1024

#: What the model is told when a call was not approved: what happened, not how to
#: configure the command line (that hint goes to the user, on stderr).
NOT_APPROVED = "the user did not approve this call, so it was not run"
DECLINED = "the user declined this call at the approval prompt, so it was not run"


class FlagApprovals:
    """Approves, for this run only, calls to the tools named with ``--allow-tool`` and,
    with ``--allow-workspace-reads``, read-only file tool calls that stay inside the
    workspace and touch no likely-secret path. Denies everything else. Nothing is
    remembered between calls.

    The model is told that the user did not approve the call; the user is told once
    per tool, on ``err``, which flag would have approved it.
    """

    def __init__(
        self,
        allowed: Collection[str],
        *,
        workspace_reads: bool = False,
        err: TextIO | None = None,
    ) -> None:
        self.allowed = frozenset(allowed)
        self.workspace_reads = workspace_reads
        self._err = err
        self._hinted: set[str] = set()

    async def refusal(self, context: ApprovalContext) -> str | None:
        """None when the flags approve this call; otherwise why they do not."""
        name = context.call.name
        if name in self.allowed:
            return None
        if not self.workspace_reads:
            return f"no flag approves {name}"
        return await confined_read_refusal(context)

    def hint(self, context: ApprovalContext, refusal: str) -> None:
        """Tell the user (once per tool) why a call was denied and which flag allows it."""
        name = context.call.name
        if name in self._hinted:
            return
        self._hinted.add(name)
        if self.workspace_reads and name in READ_TOOLS:
            why = f"--allow-workspace-reads does not cover it: {refusal}"
        else:
            why = "no terminal to ask"
        print(
            f"emelex: denied {name} ({why}); --allow-tool {name} approves every {name} "
            "call of a run",
            file=self._err if self._err is not None else sys.stderr,
            flush=True,
        )

    async def decide(self, context: ApprovalContext) -> ApprovalDecision:
        refusal = await self.refusal(context)
        if refusal is None:
            return Approve()
        self.hint(context, refusal)
        return Deny(NOT_APPROVED)


def policy_for(
    allowed: Collection[str], workspace_reads: bool, lines: StdinLines | None
) -> FlagApprovals | TerminalApprovals:
    """The run's policy: the flags alone without a terminal, else flags then a prompt."""
    flags = FlagApprovals(allowed, workspace_reads=workspace_reads)
    return TerminalApprovals(flags, lines) if lines is not None else flags


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
        refusal = await self.fallback.refusal(context)
        if refusal is None:
            return Approve()
        self._asked.add(context.call.id)
        note = ""
        if self.fallback.workspace_reads and context.call.name in READ_TOOLS:
            # Say why the flag the user passed did not settle it.
            note = f"\n  \x1b[2m(--allow-workspace-reads does not cover it: {safe(refusal)})\x1b[0m"
        print(
            f"\n\x1b[1mApprove {safe(context.call.name)}?\x1b[0m {safe(context.reason)}{note}"
            "\n  [y/N] ",
            end="",
            file=sys.stderr,
            flush=True,
        )
        answer = await self.lines.readline()
        if answer is not None and answer.strip().lower() in ("y", "yes"):
            return Approve()
        return Deny(DECLINED)


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
