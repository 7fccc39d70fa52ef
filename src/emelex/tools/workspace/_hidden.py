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
from emelex.tools.workspace._search import Glob, compile_glob, compile_globs

_NAME_CACHE = 4096


def _union(texts: list[str]) -> Glob | None:
    return compile_globs(tuple(texts)) if texts else None


class HiddenPaths:
    """Matches root-relative path components against hidden-path globs.

    Raises :class:`PatternError` for a pattern that is not a string or does not compile.
    """

    __slots__ = ("_anywhere", "_names", "_patterns", "_rooted")

    _rooted: Glob | None
    _anywhere: Glob | None

    def __init__(self, patterns: Iterable[str] = ()) -> None:
        if isinstance(patterns, str):
            patterns = (patterns,)
        rooted: list[str] = []
        anywhere: list[str] = []
        kept: list[str] = []
        for pattern in patterns:
            if not isinstance(pattern, str):
                raise PatternError(repr(pattern), "a hidden path is a glob string")
            text = pattern.strip("/")
            compile_glob(text)  # each pattern is checked (and named) on its own
            anchored = pattern.startswith("/") or "/" in text
            (rooted if anchored else anywhere).append(text)
            kept.append(pattern)
        self._patterns = tuple(kept)
        # One RE2 program per kind: a walk tests every entry, so one call, not one per
        # pattern (``{a,b}`` alternation is the glob syntax's own).
        self._rooted = _union(rooted)
        self._anywhere = _union(anywhere)
        # Walks meet the same names in every directory (README.md, __init__.py): the
        # name-only verdicts are remembered, up to a bound.
        self._names: dict[str, bool] = {}

    @property
    def patterns(self) -> tuple[str, ...]:
        return self._patterns

    def __bool__(self) -> bool:
        return bool(self._patterns)

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
        if self._anywhere is not None:
            name = parts[-1]
            verdict = self._names.get(name)
            if verdict is None:
                verdict = self._anywhere.matches(name)
                if len(self._names) < _NAME_CACHE:
                    self._names[name] = verdict
            if verdict:
                return True
        rooted = self._rooted
        if rooted is None or (rooted.max_depth is not None and len(parts) > rooted.max_depth):
            return False  # deeper than any anchored pattern reaches
        return rooted.matches("/".join(parts))


NO_HIDDEN = HiddenPaths()

__all__ = ["NO_HIDDEN", "HiddenPaths"]
