"""Workspace policy: read-only by default, hidden paths, a recursive-delete guard.

The policy is enforced at the tool layer, by wrappers around the built-in tools (see
``docs/app/workspace-policy.md``):

* read-only (the default): ``write_file`` and ``edit_file`` are not registered at all,
  and the shell is refused (:class:`ShellNotAllowed`);
* hidden paths: file tools refuse a ``path`` argument that is hidden, before any
  approval is asked; listings and search results drop hidden entries;
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
from emelex.tools.workspace import Glob, PatternError, Workspace, WorkspaceError, compile_glob

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
            compile_glob(pattern.strip("/"))
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


class HiddenPaths:
    """Matches workspace-relative path components against hidden-path globs."""

    __slots__ = ("_anywhere", "_rooted")

    def __init__(self, patterns: Iterable[str]) -> None:
        self._rooted: list[Glob] = []
        self._anywhere: list[Glob] = []
        for pattern in patterns:
            text = pattern.strip("/")
            glob = compile_glob(text)
            anchored = pattern.startswith("/") or "/" in text
            (self._rooted if anchored else self._anywhere).append(glob)

    def __bool__(self) -> bool:
        return bool(self._rooted or self._anywhere)

    def hides(self, parts: tuple[str, ...]) -> bool:
        """Whether the path or one of its ancestors is hidden."""
        for glob in self._anywhere:
            if any(glob.matches(part) for part in parts):
                return True
        for depth in range(1, len(parts) + 1):
            joined = "/".join(parts[:depth])
            if any(glob.matches(joined) for glob in self._rooted):
                return True
        return False

    def hides_text(self, path: str) -> bool:
        """Like :meth:`hides` for a displayed root-relative path (absolute: outside)."""
        if not path or path.startswith("/"):
            return False
        return self.hides(tuple(part for part in path.split("/") if part not in ("", ".")))


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
    Drops hidden entries from ``list_directory``, ``find_files`` and ``grep`` output.
    """

    def __init__(
        self,
        inner: AgentTool,
        workspace: Workspace,
        hidden: HiddenPaths,
        readonly: frozenset[tuple[str, ...]] = frozenset(),
    ) -> None:
        super().__init__(inner)
        self._workspace = workspace
        self._hidden = hidden
        self._readonly = readonly
        self._name = inner.definition.name

    def _target(self, arguments: Mapping[str, Any]) -> tuple[str, ...] | None:
        path = arguments.get("path", ".")
        if not isinstance(path, str):
            return None
        try:
            target = self._workspace.classify(path)
        except WorkspaceError:
            return None  # the tool reports malformed paths itself
        return None if target.outside else target.parts

    def refusal(self, arguments: Mapping[str, Any]) -> str | None:
        parts = self._target(arguments)
        if parts is None:
            return None
        shown = "/".join(parts) or "."
        if self._hidden.hides(parts):
            return f"{self._name}: {shown} is hidden by the workspace policy"
        if self._name in _FILE_WRITE_TOOLS and parts in self._readonly:
            return f"{self._name}: {shown} is a read-only file"
        return None

    def approval_reason(self, arguments: Mapping[str, Any]) -> str | None:
        if self.refusal(arguments) is not None:
            return None  # refused before it could run: nothing to approve
        return self._inner.approval_reason(arguments)

    async def invoke(self, invocation: ToolInvocation) -> ToolOutput:
        refusal = self.refusal(invocation.arguments)
        if refusal is not None:
            return ToolOutput.error(refusal)
        output = await self._inner.invoke(invocation)
        if not self._hidden or output.is_error:
            return output
        if self._name == "list_directory":
            base = self._target(invocation.arguments) or ()
            return self._filter(output, lambda line: self._listed_hidden(base, line), "entry")
        if self._name == "find_files":
            return self._filter(output, self._hidden.hides_text, "path")
        if self._name == "grep":
            return self._filter_grep(output)
        return output

    def _listed_hidden(self, base: tuple[str, ...], line: str) -> bool:
        candidates = [line[:-1]] if line.endswith("/") else []
        start = 0
        while (index := line.find("  (", start)) >= 0:
            candidates.append(line[:index])
            start = index + 1
        candidates.append(line)
        return any(self._hidden.hides((*base, name)) for name in candidates if name)

    @staticmethod
    def _filter(output: ToolOutput, hidden: Any, what: str) -> ToolOutput:
        lines = output.text.split("\n")
        kept = [lines[0]]
        dropped = 0
        for line in lines[1:]:
            if not line.startswith("[") and hidden(line):
                dropped += 1
            else:
                kept.append(line)
        if dropped:
            noun = what if dropped == 1 else ("entries" if what == "entry" else what + "s")
            kept.append(f"[{dropped} hidden {noun} not shown (workspace policy)]")
        return ToolOutput("\n".join(kept))

    _GREP_MARK = re.compile(r"([:-])\d+\1")

    def _filter_grep(self, output: ToolOutput) -> ToolOutput:
        lines = output.text.split("\n")
        kept = [lines[0]]
        dropped = 0
        for line in lines[1:]:
            if line.startswith("[") or line == "--":
                kept.append(line)
                continue
            paths = [line[: m.start()] for m in self._GREP_MARK.finditer(line)]
            if any(self._hidden.hides_text(path) for path in paths):
                dropped += 1
            else:
                kept.append(line)
        # Collapse group separators left without a group.
        cleaned: list[str] = [kept[0]]
        for line in kept[1:]:
            if line == "--" and (cleaned[-1] == "--" or len(cleaned) == 1):
                continue
            cleaned.append(line)
        while len(cleaned) > 1 and cleaned[-1] == "--":
            cleaned.pop()
        cleaned = [
            line
            for index, line in enumerate(cleaned)
            if not (line == "--" and index + 1 < len(cleaned) and cleaned[index + 1][:1] == "[")
        ]
        if dropped:
            cleaned.append(f"[{dropped} lines from hidden paths not shown (workspace policy)]")
        return ToolOutput("\n".join(cleaned))


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
    "GuardedFileTool",
    "GuardedShellTool",
    "HiddenPaths",
    "ToolWrapper",
    "WorkspacePolicy",
    "recursive_delete_reason",
]
