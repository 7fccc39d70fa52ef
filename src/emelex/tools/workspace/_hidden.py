"""Hidden paths: glob patterns of workspace paths a session never sees.

A hidden path is refused by every operation that names it (``HiddenPath``) and left out
of every listing, find and grep walk, so nothing outside this layer has to re-read
rendered output to drop entries. Patterns use the workspace glob syntax (see
:func:`compile_glob`): a pattern without ``/`` matches a name at any depth, like
``.gitignore``; a leading ``/`` (or any inner ``/``) anchors it at the root; a matching
directory hides everything below it.
"""

from __future__ import annotations

from collections.abc import Iterable

from emelex.tools.workspace._errors import PatternError
from emelex.tools.workspace._search import Glob, compile_glob


class HiddenPaths:
    """Matches root-relative path components against hidden-path globs.

    Raises :class:`PatternError` for a pattern that is not a string or does not compile.
    """

    __slots__ = ("_anywhere", "_patterns", "_rooted")

    def __init__(self, patterns: Iterable[str] = ()) -> None:
        if isinstance(patterns, str):
            patterns = (patterns,)
        self._rooted: list[Glob] = []
        self._anywhere: list[Glob] = []
        kept: list[str] = []
        for pattern in patterns:
            if not isinstance(pattern, str):
                raise PatternError(repr(pattern), "a hidden path is a glob string")
            text = pattern.strip("/")
            try:
                glob = compile_glob(text)
            except ValueError as exc:  # defensive: compile_glob maps its own errors
                raise PatternError(pattern, str(exc)) from exc
            anchored = pattern.startswith("/") or "/" in text
            (self._rooted if anchored else self._anywhere).append(glob)
            kept.append(pattern)
        self._patterns = tuple(kept)

    @property
    def patterns(self) -> tuple[str, ...]:
        return self._patterns

    def __bool__(self) -> bool:
        return bool(self._rooted or self._anywhere)

    def __repr__(self) -> str:
        return f"HiddenPaths({list(self._patterns)!r})"

    def hides(self, parts: tuple[str, ...]) -> bool:
        """Whether the path or one of its ancestors is hidden."""
        return any(self.hides_last(parts[:depth]) for depth in range(1, len(parts) + 1))

    def hides_last(self, parts: tuple[str, ...]) -> bool:
        """Whether the last component of ``parts`` is hidden by itself (ancestors are
        not checked: a walk that never entered a hidden directory needs only this)."""
        if not parts:
            return False
        name = parts[-1]
        if any(glob.matches(name) for glob in self._anywhere):
            return True
        if self._rooted:
            joined = "/".join(parts)
            return any(glob.matches(joined) for glob in self._rooted)
        return False


NO_HIDDEN = HiddenPaths()

__all__ = ["NO_HIDDEN", "HiddenPaths"]
