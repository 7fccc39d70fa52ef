"""The ``shell`` tool: one approved host command, bounded in time and output.

Not a sandbox. The command runs through :func:`emelex.tools._process.run_shell` with an
environment captured when the tool was built (only vetted ``PATH``/``HOME`` and a fixed
locale; nothing else is inherited, so no ``.env`` or token variable leaks in), in the
workspace root or a verified subdirectory. Every call asks for approval. When the turn is
cancelled the command's whole process tree is stopped before the tool returns.
"""

from __future__ import annotations

import math
import os
import signal
from collections.abc import Mapping
from typing import Any

from emelex._errors import LimitExceeded
from emelex.model import ToolDefinition
from emelex.runtime import run_in_worker
from emelex.tools._process import (
    DEFAULT_KILL_GRACE,
    MAX_COMMAND_BYTES,
    MAX_TIMEOUT_SECONDS,
    CapturedOutput,
    ShellError,
    ShellResult,
    build_shell_environment,
    environment_digest,
    run_shell,
)
from emelex.tools._protocol import ToolCancellationPolicy, ToolInvocation, ToolOutput
from emelex.tools.builtin._common import cancelled_by, located, object_schema, show
from emelex.tools.workspace import MAX_PATH_BYTES, Target, Workspace, WorkspaceError

_FROM_PROCESS: Any = object()


def _seconds(value: float) -> str:
    return f"{value:g} s" if value >= 1 else f"{value:.2f} s"


class ShellTool:
    """``shell {command, timeout_seconds?, cwd?}``: ``/bin/sh -c command`` on the host.

    ``timeout_seconds`` is the default per-call timeout and the cap a call may ask for
    (itself capped at 20 minutes); ``output_bytes`` bounds what is kept of each of stdout
    and stderr (head and tail). ``path``/``home`` default to this process's ``PATH`` and
    ``HOME`` at construction time; later changes to ``os.environ`` do not reach commands.
    """

    name = "shell"

    def __init__(
        self,
        workspace: Workspace,
        *,
        timeout_seconds: float,
        output_bytes: int,
        path: str | None = _FROM_PROCESS,
        home: str | None = _FROM_PROCESS,
        kill_grace: float = DEFAULT_KILL_GRACE,
    ) -> None:
        if not (math.isfinite(timeout_seconds) and timeout_seconds > 0):
            raise ValueError(f"timeout_seconds must be positive, got {timeout_seconds}")
        if output_bytes < 1:
            raise ValueError(f"output_bytes must be positive, got {output_bytes}")
        self._workspace = workspace
        self._timeout = min(float(timeout_seconds), MAX_TIMEOUT_SECONDS)
        self._output_bytes = output_bytes
        self._kill_grace = kill_grace
        self._environment = build_shell_environment(
            os.environ.get("PATH") if path is _FROM_PROCESS else path,
            os.environ.get("HOME") if home is _FROM_PROCESS else home,
        )
        digest = environment_digest(self._environment)
        self.authority_identity: Mapping[str, str] = {
            "path_sha256": digest.path_sha256,
            "home_sha256": digest.home_sha256 or "unset",
        }
        self._definition = ToolDefinition(
            self.name,
            "Run a command with /bin/sh on the host (not a sandbox) in the workspace root "
            "or the workspace subdirectory `cwd`. stdin is empty; the environment holds "
            "only PATH, HOME and a UTF-8 locale. Returns the exit status and stdout/stderr "
            f"(each cut to its first and last {output_bytes // 2} bytes when longer). The "
            f"command and every process it starts are stopped after `timeout_seconds` "
            f"(default and maximum {self._timeout:g}). Always asks the user for approval.",
            object_schema(
                {
                    "command": {
                        "type": "string",
                        "minLength": 1,
                        "maxLength": MAX_COMMAND_BYTES,
                        "description": "Shell command line (at most "
                        f"{MAX_COMMAND_BYTES} bytes once UTF-8 encoded).",
                    },
                    "timeout_seconds": {
                        "type": "number",
                        "exclusiveMinimum": 0,
                        "maximum": self._timeout,
                        "description": "Wall-clock limit for this command.",
                    },
                    "cwd": {
                        "type": "string",
                        "minLength": 1,
                        "maxLength": MAX_PATH_BYTES,
                        "description": "Working directory relative to the workspace root "
                        "(default: the root).",
                    },
                },
                ["command"],
            ),
        )

    @property
    def definition(self) -> ToolDefinition:
        return self._definition

    @property
    def cancellation_policy(self) -> ToolCancellationPolicy:
        return ToolCancellationPolicy.FINISH_ONCE_STARTED

    @property
    def environment(self) -> Mapping[str, str]:
        """The environment every command gets (a copy is passed to each run)."""
        return dict(self._environment)

    def _cwd_target(self, arguments: Mapping[str, Any]) -> Target | None:
        try:
            return self._workspace.target(arguments.get("cwd", "."))
        except WorkspaceError:
            return None

    def _timeout_for(self, arguments: Mapping[str, Any]) -> float:
        return min(float(arguments.get("timeout_seconds", self._timeout)), self._timeout)

    def approval_reason(self, arguments: Mapping[str, Any]) -> str | None:
        target = self._cwd_target(arguments)
        command = arguments["command"]
        if target is None or "\0" in command:
            return None  # refused by invoke without running anything
        return (
            f"run the shell command {show(command)} in "
            f"{located(self._workspace, target)} on the host (not sandboxed; "
            f"timeout {_seconds(self._timeout_for(arguments))})"
        )

    async def invoke(self, invocation: ToolInvocation) -> ToolOutput:
        arguments = invocation.arguments
        command = arguments["command"]
        if "\0" in command:
            return ToolOutput.error("shell: the command contains a NUL character")
        cwd_text = arguments.get("cwd", ".")
        try:
            cwd = await run_in_worker(self._workspace.directory_path, cwd_text, name="shell cwd")
        except WorkspaceError as exc:
            return ToolOutput.error(f"shell: working directory {exc}")
        if not invocation.approved:
            return ToolOutput.error("shell: this call needs approval and was not approved")
        if invocation.cancellation.cancelled:
            return ToolOutput.error("shell: the turn was cancelled before the command started")
        timeout = self._timeout_for(arguments)
        try:
            with cancelled_by(invocation.cancellation):
                result = await run_shell(
                    command,
                    cwd=cwd,
                    env=self._environment,
                    timeout=timeout,
                    output_bytes=self._output_bytes,
                    kill_grace=self._kill_grace,
                )
                return render_shell(result, timeout)
        except (ShellError, LimitExceeded) as exc:
            return ToolOutput.error(f"shell: {exc}")
        return ToolOutput.error(
            "shell: the turn was cancelled while the command ran; the command and every "
            "process it started were stopped (its output is not available)"
        )


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _stream(name: str, captured: CapturedOutput) -> str:
    if captured.total_bytes == 0:
        return f"[{name}: empty]"
    size = f"{captured.total_bytes} bytes"
    if captured.truncated:
        size += (
            f"; showing the first {len(captured.head)} and last {len(captured.tail)}, "
            f"{captured.omitted_bytes} omitted in between"
        )
    text = captured.text()
    return f"[{name}: {size}]\n{text if text.endswith(chr(10)) else text + chr(10)}".rstrip("\n")


def render_shell(result: ShellResult, timeout: float) -> ToolOutput:
    """The tool message: how the command ended, then bounded stdout and stderr."""
    duration = _seconds(result.duration)
    if result.timed_out:
        ending = (
            f"timed out after {_seconds(timeout)}: the command and every process it "
            "started were stopped"
        )
        if result.signal is not None:
            ending += f" ({_signal_name(result.signal)})"
    elif result.signal is not None:
        ending = f"killed by {_signal_name(result.signal)} after {duration}"
    else:
        ending = f"exit code {result.exit_code} after {duration}"
    parts = [f"[{ending}]", _stream("stdout", result.stdout), _stream("stderr", result.stderr)]
    if not result.output_complete:
        parts.append("[output may be incomplete: a process kept the pipes open]")
    return ToolOutput("\n".join(parts), is_error=not result.success)
