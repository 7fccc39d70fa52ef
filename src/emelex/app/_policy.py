"""Workspace policy: read-only by default, hidden paths, a recursive-delete guard.

The policy is enforced at the tool layer, by wrappers around the built-in tools (see
``docs/app/workspace-policy.md``):

* read-only (the default): ``write_file`` and ``edit_file`` are not registered at all,
  and the shell is refused (:class:`ShellNotAllowed`);
* hidden paths: file tools refuse a ``path`` argument that is hidden, before any
  approval is asked; the workspace layer leaves hidden entries out of listings and
  searches;
* read-only seeded files: ``write_file`` / ``edit_file`` refuse them;
* recursive delete: unless allowed, the shell refuses ``rm -r``-style commands. This is
  a best-effort text check, not a sandbox.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from emelex.app._errors import InvalidPolicy
from emelex.model import ToolDefinition
from emelex.tools import AgentTool, ToolCancellationPolicy, ToolInvocation, ToolOutput
from emelex.tools.workspace import HiddenPaths, PatternError, Workspace, WorkspaceError

WORKSPACE_VIEW = "/workspace"
"""The absolute name an agent's model sees its workspace root by."""

_FILE_READ_TOOLS = ("read_file", "list_directory", "find_files", "grep")
_FILE_WRITE_TOOLS = ("write_file", "edit_file")


def _patterns(value: Iterable[str]) -> tuple[str, ...]:
    if isinstance(value, str):
        value = (value,)
    patterns = tuple(value)
    for pattern in patterns:
        if not isinstance(pattern, str):
            raise InvalidPolicy(f"hidden paths are glob strings, got {pattern!r}")
        try:
            HiddenPaths((pattern,))
        except (PatternError, ValueError) as exc:
            raise InvalidPolicy(f"invalid hidden-path glob {pattern!r}: {exc}") from exc
    return patterns


@attrs.frozen
class WorkspacePolicy:
    """What the agent may do to its workspace.

    ``write``: file writes/edits (and the shell) are available. ``hidden``: glob
    patterns of paths the file tools refuse and leave out of listings and searches
    (workspace glob syntax: ``*`` and ``?`` stay in one component, ``**`` spans
    components, ``{a,b}`` alternates; a pattern without ``/`` matches a name at any
    depth, like ``.gitignore``, and a leading ``/`` anchors it at the root; a
    matching directory hides everything below it).
    ``recursive_delete``: whether shell commands that delete recursively are let
    through (best effort; the shell is not a sandbox).
    """

    write: bool = False
    hidden: tuple[str, ...] = attrs.field(default=(), converter=_patterns)
    recursive_delete: bool = False

    @classmethod
    def read_only(cls) -> WorkspacePolicy:
        """The default: read, list and search only."""
        return cls()

    @classmethod
    def read_write(cls) -> WorkspacePolicy:
        """Also write and edit files (each write asks for approval) and allow a shell."""
        return cls(write=True)

    def hide(self, *patterns: str) -> WorkspacePolicy:
        """A copy that also hides ``patterns``."""
        return attrs.evolve(self, hidden=(*self.hidden, *patterns))

    def allow_recursive_delete(self, allowed: bool = True) -> WorkspacePolicy:
        return attrs.evolve(self, recursive_delete=allowed)


class ToolWrapper:
    """Forwards the AgentTool protocol to ``inner``."""

    def __init__(self, inner: AgentTool) -> None:
        self._inner = inner

    @property
    def inner(self) -> AgentTool:
        return self._inner

    @property
    def definition(self) -> ToolDefinition:
        return self._inner.definition

    @property
    def cancellation_policy(self) -> ToolCancellationPolicy:
        return self._inner.cancellation_policy

    @property
    def authority_identity(self) -> Mapping[str, str]:
        return dict(getattr(self._inner, "authority_identity", None) or {})

    @property
    def gated(self) -> bool:
        return bool(getattr(self._inner, "gated", False))

    def approval_reason(self, arguments: Mapping[str, Any]) -> str | None:
        return self._inner.approval_reason(arguments)

    async def invoke(self, invocation: ToolInvocation) -> ToolOutput:
        return await self._inner.invoke(invocation)


class GuardedFileTool(ToolWrapper):
    """A built-in file tool behind the workspace policy.

    Refuses (without asking for approval, and without running the tool) a ``path``
    that is hidden, and for ``write_file`` / ``edit_file`` a read-only seeded file.
    Hidden entries never reach listings and searches: the workspace layer leaves them
    out (``Workspace.open(hidden=...)``), so the output passes through untouched.
    """

    def __init__(
        self,
        inner: AgentTool,
        workspace: Workspace,
        readonly: frozenset[tuple[str, ...]] = frozenset(),
    ) -> None:
        super().__init__(inner)
        self._workspace = workspace
        self._readonly = readonly
        self._name = inner.definition.name

    def refusal(self, arguments: Mapping[str, Any]) -> str | None:
        path = arguments.get("path", ".")
        if not isinstance(path, str):
            return None
        try:
            target = self._workspace.classify(path)
        except WorkspaceError:
            return None  # the tool reports malformed paths itself
        if target.outside:
            return None
        if self._workspace.hides(target):
            return f"{self._name}: {target.display} is hidden by the workspace policy"
        if self._name in _FILE_WRITE_TOOLS and target.parts in self._readonly:
            return f"{self._name}: {target.display} is a read-only file"
        return None

    def approval_reason(self, arguments: Mapping[str, Any]) -> str | None:
        if self.refusal(arguments) is not None:
            return None  # refused before it could run: nothing to approve
        return self._inner.approval_reason(arguments)

    async def invoke(self, invocation: ToolInvocation) -> ToolOutput:
        refusal = self.refusal(invocation.arguments)
        if refusal is not None:
            return ToolOutput.error(refusal)
        return await self._inner.invoke(invocation)


# -- the shell guard ---------------------------------------------------------------------

_SEPARATOR = r"(?:^|[\s;&|`(/]|\$\()"
_RECURSIVE_DELETE = (
    # rm -r, rm -rf, rm -fR, rm -v -r, /bin/rm --recursive ...
    re.compile(_SEPARATOR + r"rm\s+(?:-\S*\s+)*?(?:-[A-Za-z]*[rR][A-Za-z]*|--recursive)(?:\s|$)"),
    # find ... -delete
    re.compile(_SEPARATOR + r"find\s.*\s-delete(?:\s|$)"),
    # git clean with -d (removes directories)
    re.compile(_SEPARATOR + r"git\s+clean\s+(?:-\S*\s+)*?-[A-Za-z]*d"),
    # interpreters asked to remove trees
    re.compile(r"\brmtree\b|\brm_rf\b|\bremove_dir_all\b|\bfs\.rm(?:Sync)?\b"),
)


def recursive_delete_reason(command: str) -> str | None:
    """A sentence when ``command`` looks like a recursive delete, else None.

    Best effort: it reads the command text and can be evaded (variables, ``eval``,
    scripts, other tools). It is a guard against accidents, not a sandbox.
    """
    for pattern in _RECURSIVE_DELETE:
        match = pattern.search(command)
        if match:
            return (
                "shell: refused by the workspace policy: the command looks like a "
                f"recursive delete ({match.group(0).strip()!r})"
            )
    return None


class GuardedShellTool(ToolWrapper):
    """The shell behind the policy's recursive-delete guard."""

    def __init__(self, inner: AgentTool, *, recursive_delete: bool) -> None:
        super().__init__(inner)
        self._allow = recursive_delete

    def refusal(self, arguments: Mapping[str, Any]) -> str | None:
        command = arguments.get("command")
        if self._allow or not isinstance(command, str):
            return None
        return recursive_delete_reason(command)

    def approval_reason(self, arguments: Mapping[str, Any]) -> str | None:
        if self.refusal(arguments) is not None:
            return None
        return self._inner.approval_reason(arguments)

    async def invoke(self, invocation: ToolInvocation) -> ToolOutput:
        refusal = self.refusal(invocation.arguments)
        if refusal is not None:
            return ToolOutput.error(refusal)
        return await self._inner.invoke(invocation)


__all__ = [
    "WORKSPACE_VIEW",
    "GuardedFileTool",
    "GuardedShellTool",
    "HiddenPaths",
    "ToolWrapper",
    "WorkspacePolicy",
    "recursive_delete_reason",
]
