"""The six workspace tools: read_file, list_directory, find_files, grep, write_file, edit_file.

Each is a thin layer over :mod:`emelex.tools.workspace`: it declares a closed JSON Schema,
decides whether a call needs approval, runs the blocking operation on a worker thread
(:func:`emelex.runtime.run_in_worker`, which joins the thread even when the turn is
cancelled, so a started write always completes) and renders a bounded text result.

Approval rules: reads, listings and searches run without asking unless the path lies
outside the workspace, looks like it holds secrets, or a search asks to include secret
files; writes and edits always ask. Only an approved call passes ``allow_outside`` /
``allow_secret`` / ``include_secrets`` to the workspace layer, and only for that call.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from emelex._errors import LimitExceeded
from emelex.model import ToolDefinition
from emelex.runtime import run_in_worker
from emelex.tools._protocol import AgentTool, ToolCancellationPolicy, ToolInvocation, ToolOutput
from emelex.tools.builtin._common import (
    cancelled_by,
    cut_text,
    located,
    notes,
    object_schema,
    plural,
    show,
    where,
)
from emelex.tools.workspace import (
    MAX_PATH_BYTES,
    MAX_WRITE_BYTES,
    DirectoryListing,
    EditMismatch,
    EditResult,
    FileContent,
    FindResult,
    GrepResult,
    OperationAborted,
    Target,
    Workspace,
    WorkspaceError,
    WriteResult,
    edit_file,
    find_files,
    grep,
    list_directory,
    read_file,
    write_file,
)

T = TypeVar("T")

#: Default number of lines ``read_file`` returns when ``limit`` is not given.
DEFAULT_READ_LINES = 2000
#: Most lines one ``read_file`` call may ask for.
MAX_READ_LINES = 100_000
#: Most bytes of text one ``read_file`` call returns.
READ_BYTES = 128 * 1024
LIST_ENTRIES = 1000
FIND_RESULTS = 1000
GREP_MATCHES = 200
GREP_BYTES = 64 * 1024
GREP_LINE_CHARS = 1000
MAX_GREP_CONTEXT = 20
MAX_PATTERN_CHARS = 4096
MAX_EDIT_COUNT = 10_000

_PATH = {"type": "string", "minLength": 1, "maxLength": MAX_PATH_BYTES}
_INCLUDE_SECRETS = {
    "type": "boolean",
    "description": "Also search likely-secret files and directories (.env, keys, .ssh, "
    "...); they are skipped otherwise. Needs approval.",
}


def _path_schema(description: str) -> dict[str, Any]:
    return {**_PATH, "description": description}


class _WorkspaceTool:
    """Common parts: the definition, the policy, path classification, worker calls."""

    name = ""
    authority_identity: Mapping[str, str] = {}

    def __init__(self, workspace: Workspace, description: str, schema: dict[str, Any]) -> None:
        self._workspace = workspace
        self._definition = ToolDefinition(self.name, description, schema)

    @property
    def definition(self) -> ToolDefinition:
        return self._definition

    @property
    def cancellation_policy(self) -> ToolCancellationPolicy:
        return ToolCancellationPolicy.FINISH_ONCE_STARTED

    def _classify(self, path: str) -> Target | None:
        """The parsed path, or None when it is refused whatever an approval says (bad
        text, a hidden path): invoke reports why, nothing is asked."""
        try:
            target = self._workspace.classify(path)
        except WorkspaceError:
            return None
        return None if self._workspace.hides(target) else target

    def _needs_approval(self, target: Target | None) -> bool:
        return target is not None and (target.outside or target.secret_reason() is not None)

    async def _run(self, fn: Callable[..., T], /, **kwargs: Any) -> T:
        return await run_in_worker(functools.partial(fn, self._workspace, **kwargs), name=self.name)

    async def _run_abortable(
        self, invocation: ToolInvocation, fn: Callable[..., T], /, **kwargs: Any
    ) -> T:
        """Run a read-only operation that stops within milliseconds when the turn or the
        caller is cancelled (it checks an abort flag between bounded chunks of work).
        A cancelled turn raises ``OperationAborted``; a cancelled caller, ``Cancelled``."""
        abort = threading.Event()
        call = functools.partial(fn, self._workspace, abort=abort, **kwargs)
        with cancelled_by(invocation.cancellation) as scope:
            return await run_in_worker(call, name=self.name, on_cancel=abort.set)
        assert scope.cancelled_caught
        raise OperationAborted(self.name, "stopped: the turn was cancelled")

    def _error(self, exc: Exception) -> ToolOutput:
        return ToolOutput.error(f"{self.name}: {exc}")


# -- read_file ---------------------------------------------------------------------------


class ReadFileTool(_WorkspaceTool):
    """``read_file {path, offset?, limit?}``: a range of lines of a UTF-8 text file."""

    name = "read_file"

    def __init__(self, workspace: Workspace, *, max_bytes: int = READ_BYTES) -> None:
        super().__init__(
            workspace,
            "Read a UTF-8 text file of the workspace. Returns up to `limit` lines "
            f"(default {DEFAULT_READ_LINES}) starting at line `offset` (1-based, default 1), "
            f"at most {max_bytes} bytes, after a header giving the line range, the file "
            "size and (when the whole file was read) its sha256 for edit_file. Paths are "
            "relative to the workspace root; symbolic links are never followed. Absolute "
            "paths outside the workspace and likely-secret files need approval.",
            object_schema(
                {
                    "path": _path_schema("File to read, relative to the workspace root."),
                    "offset": {
                        "type": "integer",
                        "minimum": 1,
                        "maximum": 1_000_000_000,
                        "description": "First line to return (1-based).",
                    },
                    "limit": {
                        "type": "integer",
                        "minimum": 1,
                        "maximum": MAX_READ_LINES,
                        "description": "Most lines to return.",
                    },
                },
                ["path"],
            ),
        )
        self._max_bytes = max_bytes

    def approval_reason(self, arguments: Mapping[str, Any]) -> str | None:
        target = self._classify(arguments["path"])
        if not self._needs_approval(target):
            return None
        assert target is not None
        return f"read the file {where(self._workspace, target)}"

    async def invoke(self, invocation: ToolInvocation) -> ToolOutput:
        arguments = invocation.arguments
        approved = invocation.approved
        try:
            content = await self._run_abortable(
                invocation,
                read_file,
                path=arguments["path"],
                offset_line=arguments.get("offset", 1),
                limit_lines=arguments.get("limit", DEFAULT_READ_LINES),
                max_bytes=self._max_bytes,
                allow_outside=approved,
                allow_secret=approved,
            )
        except (WorkspaceError, LimitExceeded) as exc:
            return self._error(exc)
        return _render_read(content, self._max_bytes)


def _render_read(content: FileContent, max_bytes: int) -> ToolOutput:
    path = show(content.path)
    if content.binary or content.text is None:
        return ToolOutput.error(
            f"read_file: {path} is a binary file ({content.size} bytes); read_file returns "
            "UTF-8 text only"
        )
    start = content.start_line or 1
    facts = f"{content.size}-byte file"
    if content.sha256 is not None:
        facts += f", sha256 {content.sha256}"
    if content.line_count == 0:
        what = "empty file" if content.size == 0 else f"no lines at or after line {start}"
        return ToolOutput(f"[{path}: {what}; {facts}]")
    end = start + content.line_count - 1
    footer = []
    if content.truncated:
        footer.append(f"[cut: one call returns at most {max_bytes} bytes]")
    if content.next_line is not None:
        footer.append(f"[more lines follow: continue with offset={content.next_line}]")
    else:
        footer.append("[end of file]")
    body = content.text if content.text.endswith("\n") else content.text + "\n"
    return ToolOutput(f"[{path}: lines {start}-{end}; {facts}]\n{body}" + "\n".join(footer))


# -- list_directory ----------------------------------------------------------------------


class ListDirectoryTool(_WorkspaceTool):
    """``list_directory {path}``: one directory's entries, sorted by name, bounded."""

    name = "list_directory"

    def __init__(self, workspace: Workspace, *, max_entries: int = LIST_ENTRIES) -> None:
        super().__init__(
            workspace,
            "List the entries of one directory of the workspace, sorted by name: "
            "directories end with '/', files show their size, symbolic links are shown "
            f"but never followed. At most {max_entries} entries. Use '.' for the "
            "workspace root.",
            object_schema(
                {"path": _path_schema("Directory to list, relative to the workspace root.")},
                ["path"],
            ),
        )
        self._max_entries = max_entries

    def approval_reason(self, arguments: Mapping[str, Any]) -> str | None:
        target = self._classify(arguments["path"])
        if not self._needs_approval(target):
            return None
        assert target is not None
        return f"list the directory {where(self._workspace, target)}"

    async def invoke(self, invocation: ToolInvocation) -> ToolOutput:
        approved = invocation.approved
        try:
            listing = await self._run_abortable(
                invocation,
                list_directory,
                path=invocation.arguments["path"],
                max_entries=self._max_entries,
                allow_outside=approved,
                allow_secret=approved,
            )
        except (WorkspaceError, LimitExceeded) as exc:
            return self._error(exc)
        return ToolOutput(_render_listing(listing))


_KIND_NOTES = {
    "symlink": "symbolic link, not followed",
    "fifo": "named pipe",
    "socket": "socket",
    "char_device": "character device",
    "block_device": "block device",
    "other": "special file",
}


def _render_listing(listing: DirectoryListing) -> str:
    header = f"[{show(listing.path)}: {plural(listing.total_entries, 'entry', 'entries')}]"
    lines = [header]
    for entry in listing.entries:
        if entry.kind == "directory":
            line = entry.name + "/"
        elif entry.kind == "file":
            line = f"{entry.name}  ({entry.size} bytes)"
        else:
            line = f"{entry.name}  ({_KIND_NOTES.get(entry.kind, entry.kind)})"
        if entry.secret:
            line += "  [likely secret: reading it needs approval]"
        lines.append(line)
    text, cut = cut_text("\n".join(lines))
    if listing.truncated or cut:
        shown = len(listing.entries) if not cut else text.count("\n")
        text = text.rstrip("\n") + (
            f"\n[cut: showing the first {shown} of {listing.total_entries} entries by name]"
        )
    if listing.leftovers:
        text += (
            f"\n[{plural(listing.leftovers, 'leftover file')} of interrupted writes not shown "
            "(temporary or recovery copies)]"
        )
    if listing.hidden:
        noun = plural(listing.hidden, "hidden entry", "hidden entries")
        text += f"\n[{noun} not shown (workspace policy)]"
    return text


# -- find_files ----------------------------------------------------------------------------


class FindFilesTool(_WorkspaceTool):
    """``find_files {pattern, path?, include_secrets?}``: regular files matching a glob."""

    name = "find_files"

    def __init__(self, workspace: Workspace, *, max_results: int = FIND_RESULTS) -> None:
        super().__init__(
            workspace,
            "Find regular files whose path (relative to `path`, default the workspace "
            "root) matches a glob: `*` and `?` stay within one directory level, `**` spans "
            "levels, `{a,b}` is an alternation (e.g. `**/*.py`, `src/*.{ts,tsx}`). Symbolic "
            "links are not followed; .git/.hg/.svn and likely-secret entries are skipped. "
            f"At most {max_results} paths.",
            object_schema(
                {
                    "pattern": {
                        "type": "string",
                        "minLength": 1,
                        "maxLength": MAX_PATTERN_CHARS,
                        "description": "Glob relative to `path`.",
                    },
                    "path": _path_schema("Directory to search (default: workspace root)."),
                    "include_secrets": _INCLUDE_SECRETS,
                },
                ["pattern"],
            ),
        )
        self._max_results = max_results

    def approval_reason(self, arguments: Mapping[str, Any]) -> str | None:
        target = self._classify(arguments.get("path", "."))
        secrets = bool(arguments.get("include_secrets", False))
        if target is None or not (secrets or self._needs_approval(target)):
            return None
        sentence = (
            f"search for files matching {show(arguments['pattern'])} "
            f"under {where(self._workspace, target)}"
        )
        if secrets:
            sentence += ", including likely-secret files and directories"
        return sentence

    async def invoke(self, invocation: ToolInvocation) -> ToolOutput:
        arguments = invocation.arguments
        path = arguments.get("path", ".")
        include = _include_secrets(self, invocation, path)
        try:
            found = await self._run_abortable(
                invocation,
                find_files,
                pattern=arguments["pattern"],
                path=path,
                max_results=self._max_results,
                include_secrets=include,
                allow_outside=invocation.approved,
            )
        except (WorkspaceError, LimitExceeded) as exc:
            return self._error(exc)
        return ToolOutput(_render_find(found, arguments["pattern"]))


def _include_secrets(tool: _WorkspaceTool, invocation: ToolInvocation, path: str) -> bool:
    """Secrets are searched only by an approved call that asked for them, or whose base
    path itself is likely secret (the approval sentence named it)."""
    if not invocation.approved:
        return False
    if invocation.arguments.get("include_secrets", False):
        return True
    target = tool._classify(path)
    return target is not None and target.secret_reason() is not None


def _skipped(secrets: int, links: int, hidden: int = 0) -> list[str]:
    notes = []
    if secrets:
        notes.append(
            f"{plural(secrets, 'likely-secret entry', 'likely-secret entries')} skipped "
            "(include_secrets=true asks for approval to search them)"
        )
    if links:
        notes.append(f"{plural(links, 'symbolic link')} not followed")
    if hidden:
        noun = plural(hidden, "hidden entry", "hidden entries")
        notes.append(f"{noun} left out (workspace policy)")
    return notes


_FIND_CUTS = {
    "max_results": "the result limit was reached",
    "max_visited": "too many entries were examined",
    "max_depth": "directories nested too deeply were not entered",
}


def _render_find(found: FindResult, pattern: str) -> str:
    if found.matches:
        body = "\n".join(found.matches)
        header = f"[{plural(len(found.matches), 'file')} matching {show(pattern)}]"
    else:
        body = ""
        header = f"[no files match {show(pattern)}]"
    text, cut = cut_text(body)
    notes = []
    if found.truncated or cut:
        reason = _FIND_CUTS.get(found.truncation or "", "the output size limit was reached")
        notes.append(f"cut: {reason}; narrow the pattern or the path")
    notes.extend(_skipped(found.skipped_secrets, found.skipped_links, found.skipped_hidden))
    parts = [header]
    if text:
        parts.append(text.rstrip("\n"))
    parts.extend(f"[{note}]" for note in notes)
    return "\n".join(parts)


# -- grep ----------------------------------------------------------------------------------


class GrepTool(_WorkspaceTool):
    """``grep {pattern, path?, literal?, context?, ...}``: matching lines with context."""

    name = "grep"

    def __init__(
        self,
        workspace: Workspace,
        *,
        max_matches: int = GREP_MATCHES,
        max_bytes: int = GREP_BYTES,
    ) -> None:
        super().__init__(
            workspace,
            "Search file contents below `path` (a directory or one file; default the "
            "workspace root) for a regular expression (RE2 syntax: Python-like, without "
            "backreferences or lookaround; matching takes linear time), or a plain text with "
            "`literal`. Prints `path:line:text` for matches and `path-line-text` for "
            "`context` lines, groups separated by `--`. Binary files, .git/.hg/.svn, "
            "symbolic links and likely-secret files are skipped. At most "
            f"{max_matches} matching lines and {max_bytes} bytes.",
            object_schema(
                {
                    "pattern": {
                        "type": "string",
                        "minLength": 1,
                        "maxLength": MAX_PATTERN_CHARS,
                        "description": "RE2 regular expression (or text with literal=true).",
                    },
                    "path": _path_schema("Directory or file to search (default: root)."),
                    "literal": {
                        "type": "boolean",
                        "description": "Treat the pattern as plain text.",
                    },
                    "context": {
                        "type": "integer",
                        "minimum": 0,
                        "maximum": MAX_GREP_CONTEXT,
                        "description": "Lines of context before and after each match.",
                    },
                    "case_insensitive": {"type": "boolean"},
                    "glob": {
                        "type": "string",
                        "minLength": 1,
                        "maxLength": MAX_PATTERN_CHARS,
                        "description": "Only search files whose path relative to `path` "
                        "matches this glob (e.g. `**/*.py`).",
                    },
                    "include_secrets": _INCLUDE_SECRETS,
                },
                ["pattern"],
            ),
        )
        self._max_matches = max_matches
        self._max_bytes = max_bytes

    def approval_reason(self, arguments: Mapping[str, Any]) -> str | None:
        target = self._classify(arguments.get("path", "."))
        secrets = bool(arguments.get("include_secrets", False))
        if target is None or not (secrets or self._needs_approval(target)):
            return None
        kind = "the text" if arguments.get("literal", False) else "the regular expression"
        sentence = (
            f"search file contents for {kind} {show(arguments['pattern'])} "
            f"under {where(self._workspace, target)}"
        )
        if secrets:
            sentence += ", including likely-secret files and directories"
        return sentence

    async def invoke(self, invocation: ToolInvocation) -> ToolOutput:
        arguments = invocation.arguments
        path = arguments.get("path", ".")
        try:
            result = await self._run_abortable(
                invocation,
                grep,
                pattern=arguments["pattern"],
                path=path,
                literal=arguments.get("literal", False),
                case_insensitive=arguments.get("case_insensitive", False),
                glob=arguments.get("glob"),
                context=arguments.get("context", 0),
                max_matches=self._max_matches,
                max_bytes=self._max_bytes,
                max_line_chars=GREP_LINE_CHARS,
                include_secrets=_include_secrets(self, invocation, path),
                allow_outside=invocation.approved,
            )
        except (WorkspaceError, LimitExceeded) as exc:
            return self._error(exc)
        return ToolOutput(render_grep(result))


_GREP_CUTS = {
    "max_matches": "the match limit was reached",
    "max_bytes": "the output size limit was reached",
    "max_visited": "too many entries were examined",
    "max_depth": "directories nested too deeply were not entered",
}


def render_grep(result: GrepResult) -> str:
    """ripgrep-style lines: ``path:n:text`` for matches, ``path-n-text`` for context."""
    out: list[str] = []
    previous: tuple[str, int] | None = None
    for line in result.lines:
        if previous is not None and (
            previous[0] != line.path or line.line_number != previous[1] + 1
        ):
            out.append("--")
        mark = ":" if line.is_match else "-"
        text = line.text + (" [line cut]" if line.cut else "")
        out.append(f"{line.path}{mark}{line.line_number}{mark}{text}")
        previous = (line.path, line.line_number)
    files = plural(result.files_with_matches, "file")
    header = (
        f"[{plural(result.match_count, 'matching line')} in {files}; "
        f"{plural(result.files_searched, 'file')} searched]"
    )
    notes = []
    if result.truncated:
        reason = _GREP_CUTS.get(result.truncation or "", "a limit was reached")
        notes.append(f"cut: {reason}; narrow the pattern, the path or the glob")
    if result.skipped_binary:
        notes.append(f"{plural(result.skipped_binary, 'binary file')} skipped")
    if result.skipped_large:
        notes.append(f"{plural(result.skipped_large, 'large file')} skipped")
    notes.extend(_skipped(result.skipped_secrets, result.skipped_links, result.skipped_hidden))
    return "\n".join([header, *out, *(f"[{note}]" for note in notes)])


# -- write_file and edit_file ----------------------------------------------------------


def _encoded(text: str) -> bytes | None:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return None


class _MutatingTool(_WorkspaceTool):
    def _unapproved(self, path: str) -> ToolOutput:
        """The result for a call that reached invoke without approval: the harness asks
        for every valid mutation, so this is a refused path text (or a misuse)."""
        try:
            self._workspace.target(path, allow_outside=True)
        except WorkspaceError as exc:
            return self._error(exc)
        return ToolOutput.error(f"{self.name}: this call needs approval and was not approved")


class WriteFileTool(_MutatingTool):
    """``write_file {path, content}``: create or atomically replace a text file."""

    name = "write_file"

    def __init__(self, workspace: Workspace) -> None:
        super().__init__(
            workspace,
            "Create a file or replace its whole content with `content` (UTF-8). The "
            "write is atomic (a temporary sibling is synced and renamed into place) and "
            "missing parent directories are created. Symbolic links are never written "
            "through. Always asks the user for approval.",
            object_schema(
                {
                    "path": _path_schema("File to write, relative to the workspace root."),
                    "content": {
                        "type": "string",
                        "maxLength": MAX_WRITE_BYTES,
                        "description": "The complete new content of the file.",
                    },
                },
                ["path", "content"],
            ),
        )

    def approval_reason(self, arguments: Mapping[str, Any]) -> str | None:
        target = self._classify(arguments["path"])
        data = _encoded(arguments["content"])
        if target is None or data is None:
            return None
        return (
            f"write {plural(len(data), 'byte')} to {where(self._workspace, target)} "
            "(creating the file or atomically replacing its content; missing parent "
            "directories are created)"
        )

    async def invoke(self, invocation: ToolInvocation) -> ToolOutput:
        path = invocation.arguments["path"]
        data = _encoded(invocation.arguments["content"])
        if data is None:
            return ToolOutput.error(
                "write_file: the content is not valid Unicode text (a lone surrogate)"
            )
        if not invocation.approved:
            return self._unapproved(path)
        try:
            result = await self._run(
                write_file,
                path=path,
                content=data,
                create_parents=True,
                allow_outside=True,
                allow_secret=True,
            )
        except (WorkspaceError, LimitExceeded) as exc:
            return self._error(exc)
        return ToolOutput(_render_write(result))


def _render_write(result: WriteResult) -> str:
    verb = "created" if result.created else "replaced"
    return (
        f"{verb} {show(result.path)}: {plural(result.bytes_written, 'byte')} written, "
        f"sha256 {result.sha256}"
    )


class EditFileTool(_MutatingTool):
    """``edit_file {path, old, new, count?, expected_sha256?}``: exact-text replacement."""

    name = "edit_file"

    def __init__(self, workspace: Workspace) -> None:
        super().__init__(
            workspace,
            "Replace text in a UTF-8 file: `old` must occur exactly `count` times "
            "(default 1) and every occurrence is replaced by `new`; otherwise nothing "
            "changes and the error says how many were found (add surrounding lines to "
            "`old` to make it unique). `expected_sha256` (from read_file) makes the edit "
            "fail if the file changed since it was read. The file is replaced "
            "atomically. Always asks the user for approval.",
            object_schema(
                {
                    "path": _path_schema("File to edit, relative to the workspace root."),
                    "old": {
                        "type": "string",
                        "minLength": 1,
                        "maxLength": MAX_WRITE_BYTES,
                        "description": "Exact text to replace (whitespace matters).",
                    },
                    "new": {
                        "type": "string",
                        "maxLength": MAX_WRITE_BYTES,
                        "description": "Replacement text.",
                    },
                    "count": {
                        "type": "integer",
                        "minimum": 1,
                        "maximum": MAX_EDIT_COUNT,
                        "description": "How many occurrences `old` must have (default 1).",
                    },
                    "expected_sha256": {
                        "type": "string",
                        "pattern": "^[0-9a-fA-F]{64}$",
                        "description": "sha256 of the whole file as read_file reported it.",
                    },
                },
                ["path", "old", "new"],
            ),
        )

    def approval_reason(self, arguments: Mapping[str, Any]) -> str | None:
        target = self._classify(arguments["path"])
        old = _encoded(arguments["old"])
        new = _encoded(arguments["new"])
        if target is None or old is None or new is None:
            return None
        count = arguments.get("count", 1)
        growth = count * (len(new) - len(old))
        change = f"grows by {plural(growth, 'byte')}"
        if growth < 0:
            change = f"shrinks by {plural(-growth, 'byte')}"
        elif growth > MAX_WRITE_BYTES:
            change += f", past the {MAX_WRITE_BYTES}-byte limit: it will be refused"
        sentence = (
            f"edit {located(self._workspace, target)}: replace "
            f"{plural(count, 'occurrence')} of a {len(old)}-byte text with a "
            f"{len(new)}-byte text (the file {change})"
        )
        extra = notes(self._workspace, target)
        if extra:
            sentence += f" ({'; '.join(extra)})"
        digest = arguments.get("expected_sha256")
        if digest is not None:
            sentence += f", only if the file's sha256 is {digest.lower()}"
        return sentence

    async def invoke(self, invocation: ToolInvocation) -> ToolOutput:
        arguments = invocation.arguments
        path = arguments["path"]
        old, new = _encoded(arguments["old"]), _encoded(arguments["new"])
        if old is None or new is None:
            return ToolOutput.error("edit_file: the text is not valid Unicode (a lone surrogate)")
        if not invocation.approved:
            return self._unapproved(path)
        growth = arguments.get("count", 1) * (len(new) - len(old))
        if growth > MAX_WRITE_BYTES:  # over the ceiling whatever the file holds
            return self._error(LimitExceeded("edit_file_bytes", MAX_WRITE_BYTES, growth))
        try:
            result = await self._run(
                edit_file,
                path=path,
                old=arguments["old"],
                new=arguments["new"],
                count=arguments.get("count", 1),
                expected_sha256=arguments.get("expected_sha256"),
                allow_outside=True,
                allow_secret=True,
            )
        except EditMismatch as exc:
            return ToolOutput.error(f"edit_file: {exc}; nothing was changed{_hint(exc)}")
        except (WorkspaceError, LimitExceeded) as exc:
            return self._error(exc)
        return ToolOutput(_render_edit(result))


def _hint(exc: EditMismatch) -> str:
    if exc.kind == "sha256":
        return " (the file changed since it was read: read it again)"
    if exc.actual == 0:
        return " (the old text was not found: read the file again and copy it exactly)"
    return " (include more surrounding text in `old`, or set `count` to the number found)"


def _render_edit(result: EditResult) -> str:
    return (
        f"edited {show(result.path)}: {plural(result.replacements, 'replacement')}, "
        f"{plural(result.bytes_written, 'byte')} written, sha256 {result.sha256_after} "
        f"(was {result.sha256_before})"
    )


def file_tools(workspace: Workspace) -> tuple[AgentTool, ...]:
    """The six workspace tools, in their advertised order."""
    return (
        ReadFileTool(workspace),
        ListDirectoryTool(workspace),
        FindFilesTool(workspace),
        GrepTool(workspace),
        WriteFileTool(workspace),
        EditFileTool(workspace),
    )
